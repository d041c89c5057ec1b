"""The backends' own rules, checked on plans before anything starts, and `lab run` choosing one
without branching on it."""

from __future__ import annotations

import ast
import re

import pytest

from ktor_lab import backends
from ktor_lab.cases import Case
from ktor_lab.errors import LabError
from ktor_lab.network import Network
from ktor_lab.paths import REPO
from ktor_lab.plan import Plan, parse_load


def plan(*cases: str, **kw) -> Plan:
    return Plan(list(cases or ["singleton-cio"]), ["static-small"], [parse_load("rate/10")], **kw)


def test_every_backend_is_one_of_the_registry_and_does_what_the_interface_says():
    assert set(backends.BACKENDS) == {"native", "compose"}
    for kind, cls in backends.BACKENDS.items():
        backend = backends.make(kind)
        assert isinstance(backend, backends.Backend)
        assert backend.kind == kind and isinstance(backend.scrape_seconds, int)
        assert isinstance(backend.keeps_proxies, bool)
        for name in (
            *("check", "open", "start_case", "use", "stop_case", "locust_host"),
            *("network_record", "container_ids", "close", "describe"),
        ):
            assert callable(getattr(cls, name)), (kind, name)
        for name in ("locust_url", "prometheus_url"):
            assert hasattr(cls, name), (kind, name)


# What each backend can do beyond one proxy's windows (backends.CAPABILITIES), as declared.
CAN = {
    backends.NativeBackend: set(backends.CAPABILITIES),
    backends.ComposeBackend: {"network", "connections"},
    backends.SwarmBackend: {"kept proxies"},
}
# The capabilities a member of the backend's own offers (the base's refuses, or reads None).
MEMBERS = {"nginx alone": "open_upstream", "faults": "fault_server", "logs": "run_dir"}
MEMBERS |= {"connections": "connections"}
CASE = Case("singleton", "cio")
# How each refusable capability is asked for (natively the first three would start nginx).
ASKS = {
    "nginx alone": lambda b: b.open_upstream(REPO / "nonexistent", ""),
    "faults": lambda b: b.fault_server(),
    "logs": lambda b: b.run_dir,
    "kept proxies": lambda b: b.start_case(CASE, {}, Network(), keep=True),
    "another upstream": lambda b: b.start_case(CASE, {}, Network(), upstream_url="http://127.0.0.1:1"),
    "network": lambda b: b.start_case(CASE, {}, Network(20)),
}


@pytest.mark.parametrize("cls", list(CAN), ids=lambda cls: cls.kind)
def test_what_a_backend_cannot_do_is_what_it_declares_and_is_refused_in_one_line(cls):
    """Each backend declares what it can do (`can`); a member that needs a capability is its own
    where it declares it, else the base's, which refuses through `need`: one line naming the
    backend and what to use instead. start_case refuses what it is asked beyond the backend's."""
    backend = cls()
    assert cls.can == CAN[cls] and cls.can <= set(backends.CAPABILITIES)
    assert backend.keeps_proxies is ("kept proxies" in cls.can)
    for capability, member in MEMBERS.items():
        assert (member in vars(cls)) is (capability in cls.can), (cls.kind, member)
    if "connections" not in cls.can:
        assert backend.connections(0, 1) is None  # not readable: no connection figures
    backend.start = lambda *a: backends.ProxyHandle("http://127.0.0.1:1", None, "", Network())
    for capability, ask in ASKS.items():
        backend.proxy = None
        if capability in cls.can:
            if capability not in MEMBERS:
                ask(backend)  # started (here: the fake's handle)
            continue
        with pytest.raises(LabError) as e:
            ask(backend)
        assert str(e.value) == f"the {cls.kind} backend {backends.CAPABILITIES[capability]}"
        assert "\n" not in str(e.value) and ("natively" in str(e.value) or "docker logs" in str(e.value))
    if "kept proxies" in cls.can:  # a second proxy kept beside the first: "several proxies"
        backend.proxy = None
        ASKS["kept proxies"](backend)
        if "several proxies" in cls.can:
            ASKS["kept proxies"](backend)
        else:
            with pytest.raises(LabError, match=f"^the {cls.kind} backend runs one proxy at a time: "):
                ASKS["kept proxies"](backend)


@pytest.mark.parametrize(
    "the_plan,message",
    [
        (plan(dims={"java": ["17"]}), "--java with --backend compose: the proxy's JDK is its image's"),
        (plan("singleton-cio jdk 17"), "--java with --backend compose"),
        (
            plan(proxy_env={"NOT_A_VARIABLE": "on"}),
            "--set NOT_A_VARIABLE: docker-compose.yml does not pass it",
        ),
    ],
    ids=["java", "a-case-s-jdk", "unknown-set"],
)
def test_compose_refuses_what_it_cannot_apply_in_one_line(the_plan, message):
    with pytest.raises(LabError) as e:
        backends.make("compose").check(the_plan)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_case_that_names_what_it_cannot_do_is_refused_and_a_matrix_skips_it_by_name():
    """HTTP/2 through CIO or Apache, a release without the engine: refused in one line when a case
    names it itself; a combination of the plan's dimensions skipped, and named with why."""
    for case, message in (
        ("singleton-cio protocol h2", "CIO (Ktor's coroutine engine) speaks HTTP/1.1 only"),
        ("per-call-apache protocol h2", "use protocol https, or another engine"),
        ("singleton-java ktor 3.4.1", "Ktor 3.4.1 does not publish the java engine"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            plan(case)
    matrix = plan(
        "singleton-cio", "singleton-okhttp", dims={"protocol": ["http", "h2"], "ktor": ["3.4.1", "3.5.2"]}
    )
    assert [c.name for c in matrix.cases_to_run()] == [
        "singleton-cio ktor 3.4.1",
        "singleton-okhttp ktor 3.4.1",
        "singleton-okhttp ktor 3.4.1 protocol h2",
        "singleton-cio ktor 3.5.2",
        "singleton-okhttp ktor 3.5.2",
        "singleton-okhttp ktor 3.5.2 protocol h2",
    ]
    assert [(c.name, why.split(";")[0]) for c, why in matrix.skipped()] == [
        ("singleton-cio ktor 3.4.1 protocol h2", "CIO (Ktor's coroutine engine) speaks HTTP/1.1 only"),
        ("singleton-cio ktor 3.5.2 protocol h2", "CIO (Ktor's coroutine engine) speaks HTTP/1.1 only"),
    ]
    with pytest.raises(ValueError, match="no combination of these cases and dimensions can run"):
        plan("singleton-cio", dims={"protocol": ["h2"]})


def test_native_applies_the_network(monkeypatch):
    asked = []
    monkeypatch.setattr(backends, "missing", lambda network=False: asked.append(network) or [])
    backends.make("native").check(plan())
    backends.make("native").check(plan("per-call-okhttp protocol h2"))  # TLS and HTTP/2 are applied
    backends.make("native").check(plan("per-call-cio rtt 40"))  # the round trip is applied: Toxiproxy
    assert asked == [False, False, True]
    monkeypatch.setattr(backends, "grafana_binary", lambda: None)
    with pytest.raises(LabError, match="grafana is not installed"):
        backends.make("native", grafana=True).check(plan())


def test_both_backends_apply_the_round_trip():
    """No backend refuses a round trip any more: both put Toxiproxy between the proxy and nginx."""
    assert not hasattr(backends, "refuse_unapplied")
    for cls in backends.BACKENDS.values():
        assert "network" in cls.start_case.__code__.co_varnames
        assert callable(cls.network_record)


def test_compose_needs_a_docker_engine(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LabError, match=r"docker is missing: .* \(--backend compose\)"):
        backends.make("compose").check(plan())


def test_lab_run_has_no_branch_on_the_backend():
    tree = ast.parse((REPO / "runner" / "src" / "ktor_lab" / "commands" / "run.py").read_text())
    compared = [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare) and "backend" in ast.unparse(n.left)
    ]
    assert not compared, compared


def test_a_plan_applies_its_dimensions_to_every_case_and_refuses_them_twice():
    p = plan("singleton-cio", "per-call-okhttp", dims={"ktor": ["3.4.0", "3.5.2"]})
    assert [c.name for c in p.cases_to_run()] == [
        "singleton-cio ktor 3.4.0",
        "per-call-okhttp ktor 3.4.0",
        "singleton-cio ktor 3.5.2",
        "per-call-okhttp ktor 3.5.2",
    ]
    assert p.has_dimensions and not plan().has_dimensions
    assert p.to_json()["cases"] == ["singleton-cio", "per-call-okhttp"]
    with pytest.raises(ValueError, match="names its ktor; give it there or with --ktor, not both"):
        plan("singleton-cio ktor 3.5.2", dims={"ktor": ["3.4.0"]})
    with pytest.raises(ValueError, match="does not publish the apache engine"):
        plan("singleton-apache ktor 3.5.2")


def test_a_plan_takes_round_trips_as_a_dimension_and_the_network_s_other_values_once():
    p = plan("singleton-okhttp", "per-call-okhttp", dims={"rtt_ms": [0, 20]}, bandwidth_kbps=500)
    assert [c.name for c in p.cases_to_run()] == [
        "singleton-okhttp",
        "per-call-okhttp",
        "singleton-okhttp rtt 20",
        "per-call-okhttp rtt 20",
    ]
    assert p.has_dimensions and len(p.runs()) == 4
    assert p.network_for(p.cases_to_run()[2]) == Network(20, 0, 500)
    assert not plan(dims={"rtt_ms": [0]}).network_for(Case("singleton", "cio")).on
    with pytest.raises(ValueError, match="names its rtt; give it there or with --rtt, not both"):
        plan("singleton-cio rtt 5", dims={"rtt_ms": [20]})
    # A round trip of 0 has nothing to vary: the jitter is the other round trips'.
    jittered = plan(dims={"rtt_ms": [0, 20]}, jitter_ms=3)
    assert [jittered.network_for(c) for c in jittered.cases_to_run()] == [Network(0, 0, 0), Network(20, 3, 0)]
    with pytest.raises(ValueError, match=r"^UPSTREAM_JITTER_MS=5 is more than UPSTREAM_RTT_MS=4"):
        plan(dims={"rtt_ms": [0, 4]}, jitter_ms=5)
    with pytest.raises(ValueError, match=r"^UPSTREAM_JITTER_MS=2 varies a round trip, and no run here"):
        plan(dims={"rtt_ms": [0]}, jitter_ms=2)


def test_a_native_proxy_runs_the_jar_of_its_case_s_release_on_its_jdk(tmp_path, monkeypatch):
    """Stack.proxy is where a case's release and JDK become a jar and a java, for lab run, lab up
    and lab verify alike; a jar given by the caller (the lean proxy) wins."""
    from ktor_lab import stack as stack_module
    from ktor_lab import versions
    from ktor_lab.cases import Case
    from ktor_lab.paths import LEAN_PROXY_JAR, PROXY_JAR

    built, started = [], []

    def ensure_jar(module, release):
        built.append(release.name)
        return versions.jar(module, release)

    monkeypatch.setattr(versions, "ensure_jar", ensure_jar)

    class Started:
        pid = 1

        def stop(self):
            pass

    def start(run_dir, env, java_opts, jar, java_bin=None):
        started.append((jar, java_bin))
        return Started()

    monkeypatch.setattr(stack_module.proxy, "start", start)
    older = versions.release("3.4.0")
    lab = stack_module.Stack(tmp_path)
    lab.proxy(Case.parse(f"singleton-okhttp ktor {older.name} jdk 25"))
    lab.proxy(Case.parse("singleton-okhttp"))
    lab.proxy(Case.parse(f"singleton-okhttp ktor {older.name}"), jar=LEAN_PROXY_JAR)
    # An engine the default release lacks: its last release's jar, without being asked.
    lab.proxy(Case.parse("per-call-apache"))
    # The default release's jar goes through the same check: one older than its sources is rebuilt.
    assert built == [older.name, versions.default_release().name, "3.4.1"]
    assert versions.jar("proxy-app", versions.default_release()) == PROXY_JAR
    assert started == [
        (versions.jar("proxy-app", older), versions.jdk("25").java),
        (PROXY_JAR, None),
        (LEAN_PROXY_JAR, None),
        (versions.jar("proxy-app", versions.release("3.4.1")), None),
    ]


def test_lab_bench_runs_a_case_on_its_release_and_refuses_another_jdk_before_anything_starts(capsys):
    from ktor_lab import cli

    assert cli.main(["bench", "--cases", "singleton-cio jdk 25"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert (
        "'singleton-cio jdk 25' names its JDK" in err
        and "lab bench runs every target on the default JDK" in err
    )
    # --ktor moves every target to that release; an engine it lacks is skipped by name.
    assert (
        cli.main(["bench", "--ktor", "3.4.1", "--cases", "singleton-okhttp,singleton-java", "--dry-run"]) == 0
    )
    out = capsys.readouterr().out
    assert "skips singleton-java ktor 3.4.1: Ktor 3.4.1 does not publish the java engine" in out
    assert (
        "(singleton-okhttp ktor 3.4.1, plain okhttp, plain-limits okhttp, plain-limits streamed okhttp)"
        in out
    )


def test_two_parts_given_one_port_are_refused_naming_the_option_of_the_second():
    """`lab up --proxy-port 18080` gave the proxy nginx's default port: it failed as it started,
    after nginx took it. Refused before anything starts, with the option that moves it."""
    from ktor_lab.processes import free_port
    from ktor_lab.stack import Ports, busy_ports

    ports = Ports.free()
    ports.proxy = ports.nginx
    assert busy_ports(ports) == [
        f"port {ports.nginx} is given to both nginx and the proxy: choose another with --proxy-port"
    ]
    ports.proxy = free_port()
    assert busy_ports(ports) == []


def test_every_option_a_busy_port_names_is_one_lab_up_takes_and_it_moves_that_port(monkeypatch):
    """busy_ports tells the user to choose another port with an option (stack.PORT_OWNERS): lab up
    takes each of them, and each moves its own port (--nginx-tls-port was named and refused)."""
    from ktor_lab.cli import main_parser
    from ktor_lab.commands import options
    from ktor_lab.stack import PORT_OWNERS, Ports

    for name in PORT_OWNERS:
        monkeypatch.delenv(f"LAB_{name.upper()}_PORT", raising=False)
    for n, (name, (_, option, _)) in enumerate(PORT_OWNERS.items()):
        args = main_parser().parse_args(["up", "singleton-cio", option, str(40000 + n)])
        assert getattr(options.ports(args), name) == 40000 + n, option
        assert [getattr(options.ports(args), other) for other in PORT_OWNERS if other != name] == [
            getattr(Ports(), other) for other in PORT_OWNERS if other != name
        ]
