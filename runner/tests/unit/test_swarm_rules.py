"""The swarm stack's rules, read from docker-stack.yml and the lab's swarm code, without an engine:
what a kernel without IPVS needs, placement by role, config files every node gets, bad input.
test_swarm_stack.py deploys the same stack on a real one-node swarm."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from ktor_lab.cases import Case
from ktor_lab.commands import swarm as command
from ktor_lab.errors import LabError
from ktor_lab.parts import compose, swarm
from ktor_lab.paths import REPO

STACK = yaml.safe_load(swarm.STACK_FILE.read_text())


def test_every_service_resolves_by_dns_and_publishes_on_its_own_node():
    """No virtual IP and no routing mesh: both need IPVS, which some kernels (this one) lack."""
    for name, service in STACK["services"].items():
        assert service["deploy"]["endpoint_mode"] == "dnsrr", name
        for port in service.get("ports", []):
            assert port["mode"] == "host", (name, port)


def test_each_service_is_placed_by_its_role_and_the_roles_are_the_documented_ones():
    for name, service in STACK["services"].items():
        role = swarm.SERVICES[name]
        constraints = service["deploy"].get("placement", {}).get("constraints", [])
        if role:
            assert constraints == [f"node.labels.lab.{role} == true"], name
        else:
            assert service["deploy"]["mode"] == "global" and not constraints, name
    assert set(STACK["services"]) == set(swarm.SERVICES)
    text = (REPO / "docs" / "swarm.md").read_text()
    assert all(f"lab.{role}" in text for role in swarm.ROLES)


def test_the_stack_uses_the_compose_config_files_and_the_same_images_and_limits():
    """The same nginx, Grafana and Prometheus files as compose (every one of them exists), the
    same pinned images and the same limits for the proxy and nginx."""
    for name, config in STACK["configs"].items():
        assert (REPO / config["file"]).is_file(), name
    base = yaml.safe_load(compose.BASE.read_text())["services"]
    assert STACK["services"]["nginx"]["image"] == base["nginx"]["image"]
    assert STACK["services"]["prometheus"]["image"] == base["prometheus"]["image"]
    assert STACK["services"]["proxy"]["environment"].keys() - {"UPSTREAM_CA_FILE"} >= (
        base["proxy"]["environment"].keys() - {"UPSTREAM_CA_FILE"}
    )
    limits = STACK["services"]["proxy"]["deploy"]["resources"]["limits"]
    assert (limits["cpus"], limits["memory"]) == (base["proxy"]["cpus"], base["proxy"]["mem_limit"])
    # every file compose mounts into nginx and Grafana, a folder's files included
    mounted = set()
    for service in ("nginx", "grafana"):
        for volume in base[service]["volumes"]:
            if volume.startswith("./"):
                path = REPO / volume.split(":")[0]
                files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
                mounted |= {str(p.relative_to(REPO)) for p in files}
    configured = {c["file"].removeprefix("./") for c in STACK["configs"].values()}
    # compose's bind check is compose's (LAB_BIND); the swarm's own: its scrape config, the gate's files
    swarm_only = {"prometheus/swarm.yml", "prometheus/gate/entrypoint.sh", "prometheus/gate/nginx.conf"}
    assert mounted - {"nginx/docker-entrypoint.d/05-lab-bind.sh"} == configured - swarm_only


def test_prometheus_on_swarm_scrapes_the_compose_jobs_and_every_node():
    compose_jobs = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    swarm_jobs = yaml.safe_load((REPO / "prometheus" / "swarm.yml").read_text())["scrape_configs"]
    assert [j for j in swarm_jobs if j["job_name"] != "node"] == compose_jobs
    (node,) = [j for j in swarm_jobs if j["job_name"] == "node"]
    assert node["dns_sd_configs"][0]["names"] == ["node-stats"]


def node(hostname: str, **labels: str) -> swarm.Node:
    return swarm.Node(id=hostname, hostname=hostname, addr="10.0.0.1", state="ready", labels=labels)


def test_a_one_node_swarm_gets_every_role_and_a_labelled_one_is_left_as_it_is(monkeypatch):
    calls = []
    monkeypatch.setattr(swarm, "docker", lambda *argv, **_: calls.append(argv) or "")
    only = node("a")
    assert swarm.label_nodes([only]) and only.roles() == list(swarm.ROLES)
    assert calls[0][:2] == ("node", "update") and calls[0][-1] == "a"
    calls.clear()
    labelled = [node("a", **{"lab.sut": "true"}), node("b", **{f"lab.{r}": "true" for r in swarm.ROLES})]
    assert swarm.label_nodes(labelled) == [] and calls == []


def test_a_swarm_of_several_nodes_without_a_role_says_which_label_to_add(monkeypatch):
    monkeypatch.setattr(swarm, "docker", lambda *argv, **_: pytest.fail(f"changed the swarm: {argv}"))
    nodes = [node("a", **{"lab.sut": "true", "lab.upstream": "true"}), node("b", **{"lab.loadgen": "true"})]
    with pytest.raises(
        LabError, match=r"lab\.monitor=true .*docker node update --label-add lab\.monitor=true"
    ):
        swarm.label_nodes(nodes)
    down = node("c", **{"lab.monitor": "true"})
    down.state = "down"
    with pytest.raises(LabError, match="lab.monitor"):
        swarm.label_nodes([*nodes, down])


def test_the_case_picks_the_engine_and_lifetime_and_the_image_is_tagged_by_release_only():
    env = swarm.stack_env(
        Case.parse("per-call-okhttp"), "127.0.0.1:5000", {"KTOR_VERSION": "3.5.1"}, 3, False
    )
    assert (env["CLIENT_ENGINE"], env["CLIENT_LIFETIME"], env["LOCUST_WORKERS"]) == (
        "okhttp",
        "per-call",
        "3",
    )
    assert env["GRAFANA_REPLICAS"] == "0"
    assert swarm.image("127.0.0.1:5000", "proxy", env) == "127.0.0.1:5000/ktor-lab/proxy:ktor-3.5.1"
    assert "okhttp" not in swarm.image("r:5000", "proxy", env)


def test_a_setting_the_stack_does_not_read_is_refused_by_name():
    assert command.stack_settings(["CLIENT_MAX_CONNECTIONS=200"]) == {"CLIENT_MAX_CONNECTIONS": "200"}
    assert command.stack_settings(["PROXY_RUN_IMAGE=eclipse-temurin:25-jre"])  # the proxy image's build
    with pytest.raises(
        LabError, match="CLIENT_MAX_CONECTIONS: neither docker-stack.yml nor the build reads it"
    ):
        command.stack_settings(["CLIENT_MAX_CONECTIONS=200"])


def test_the_node_exporter_reads_a_hosts_proc(tmp_path):
    import lab_node  # locust/lab_node.py (pip install -e locust)

    (tmp_path / "stat").write_text("cpu  100 0 50 850 0 0 0 0 0 0\ncpu0 50 0 25 425\ncpu1 50 0 25 425\n")
    (tmp_path / "meminfo").write_text("MemTotal:       2048 kB\nMemFree:  1 kB\nMemAvailable:   1024 kB\n")
    (tmp_path / "loadavg").write_text("0.50 0.40 0.30 1/100 42\n")
    families = {f.name: f for f in lab_node.HostCollector(tmp_path, "n1").collect()}
    cpu = {s.labels["mode"]: s.value for s in families["lab_node_cpu_seconds"].samples}
    assert cpu["idle"] == 850 / lab_node.USER_HZ and cpu["user"] == 100 / lab_node.USER_HZ
    assert families["lab_node_cpus"].samples[0].value == 2
    memory = {s.labels["kind"]: s.value for s in families["lab_node_memory_bytes"].samples}
    assert memory == {"total": 2048 * 1024, "available": 1024 * 1024}
    assert {s.labels["node"] for f in families.values() for s in f.samples} == {"n1"}


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--set", "CLIENT_ENGINE=okhttp"], "--set CLIENT_ENGINE: the case sets it"),
        (["--set", "LOCUST_WORKERS=4"], "--set LOCUST_WORKERS: --workers sets it"),
        (["--set", "LAB_PASSWORD=x"], "--set LAB_PASSWORD: your shell's LAB_PASSWORD"),
        (["--set", "KTOR_VERSION=9.9.9"], "--set KTOR_VERSION: Ktor '9.9.9' is not in ktor-releases.tsv"),
        (["--registry", "registry example:5000"], "--registry 'registry example:5000': give HOST:PORT"),
        (["--name", "my stack"], "--name 'my stack': a stack name is"),
        (["--workers", "0"], "--workers must be 1 or more"),
        (["--no-push"], "--no-push needs --registry"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_anything_is_asked_of_docker(
    argv, message, capsys, monkeypatch
):
    from ktor_lab import cli

    monkeypatch.setattr(swarm, "docker", lambda *a, **_: pytest.fail(f"asked docker {a}"))
    monkeypatch.setattr(swarm, "swarm_problem", lambda: pytest.fail("asked whether this is a swarm"))
    assert cli.main(["swarm", "up", "per-call-cio", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


PUBLISH = yaml.safe_load(swarm.PUBLISH_FILE.read_text())


def test_every_published_ui_asks_for_the_login_of_the_one_secret():
    """Every port is published on every address of its node: Locust's UI and API log in against
    the secret (lab_guard.py), Prometheus only through its gate, Grafana without anonymous access."""
    published = {name for name, s in STACK["services"].items() if s.get("ports")}
    assert published == {"locust", "prometheus-gate", "grafana"}
    (secret,) = STACK["secrets"].values()
    assert secret["external"] and secret["name"] == "${LAB_PASSWORD_SECRET:-ktor-lab-password}"
    assert swarm.secret_name("ktor-lab") == "ktor-lab-password"
    for name in ("locust", "prometheus-gate", "grafana"):
        service = STACK["services"][name]
        assert service["secrets"] == ["lab-password"], name
        assert service["environment"]["LAB_PASSWORD_FILE"] == "/run/secrets/lab-password", name
    grafana = STACK["services"]["grafana"]["environment"]
    assert (grafana["GF_AUTH_ANONYMOUS_ENABLED"], grafana["GF_SECURITY_ADMIN_USER"]) == ("false", "lab")
    assert "GRAFANA_ADMIN_PASSWORD" not in grafana  # the admin's password is the lab's
    gate = STACK["services"]["prometheus-gate"]
    assert gate["image"] == STACK["services"]["nginx"]["image"]
    assert gate["ports"] == [{"target": 9090, "published": "${PROMETHEUS_HOST_PORT:-9090}", "mode": "host"}]
    assert swarm.SERVICES["prometheus-gate"] == swarm.SERVICES["prometheus"] == "monitor"
    assert swarm.PUBLISHED_BY["prometheus"] == "prometheus-gate"
    # the workers check the master's host against the proxy's, as the master does
    worker = STACK["services"]["locust-worker"]["environment"]
    assert worker["LOCUST_HOST"] == STACK["services"]["locust"]["environment"]["LOCUST_HOST"]


def test_the_gate_asks_for_basic_auth_on_every_path_and_passes_to_prometheus():
    conf = (REPO / "prometheus" / "gate" / "nginx.conf").read_text()
    public = conf.split("listen 9090;")[1].split("server {")[0]
    assert 'auth_basic "ktor-lab";' in public and "auth_basic_user_file /tmp/lab-gate/users;" in public
    assert "auth_basic off" not in conf and "set $prometheus http://prometheus:9090;" in public
    assert "listen 127.0.0.1:8081;" in conf  # the healthcheck's, in the container only
    script = (REPO / "prometheus" / "gate" / "entrypoint.sh").read_text()
    assert "printf 'lab:{PLAIN}%s\\n'" in script and "LAB_PASSWORD_FILE" in script


def test_the_proxy_and_nginx_are_published_only_on_request():
    assert "ports" not in STACK["services"]["proxy"] and "ports" not in STACK["services"]["nginx"]
    assert set(PUBLISH["services"]) == {"proxy", "nginx"}
    for name, service in PUBLISH["services"].items():
        assert [p["mode"] for p in service["ports"]] == ["host"], name
    assert str(swarm.PUBLISH_FILE) not in swarm.deploy_argv("ktor-lab")
    argv = swarm.deploy_argv("ktor-lab", publish_proxy=True)
    assert argv[argv.index(str(swarm.PUBLISH_FILE)) - 1] == "-c"
    assert not swarm.publishes_proxy({}) and swarm.publishes_proxy({"LAB_PUBLISH_PROXY": "1"})
    assert command.stack_settings(["LAB_PUBLISH_PROXY=1"]) == {"LAB_PUBLISH_PROXY": "1"}


class FakeSecrets:
    """`docker secret ls|rm|create` of one engine, as ensure_password asks them."""

    def __init__(self, *names: str):
        self.names = set(names)
        self.created: dict[str, str] = {}

    def docker(self, *argv: str, check: bool = True) -> str:
        assert argv[0] == "secret", argv
        if argv[1] == "ls":
            return "".join(f"{n}\n" for n in sorted(self.names))
        if argv[1] == "rm":
            self.names.discard(argv[2])
            return ""
        raise AssertionError(argv)

    def run(self, argv, input=None, **_):
        assert argv[:3] == ["docker", "secret", "create"] and argv[-1] == "-", argv
        assert argv[argv.index("--label") + 1] == f"{swarm.PASSWORD_LABEL}=ktor-lab"
        assert argv[-2] not in self.names, "a secret is replaced by rm, then create"
        self.names.add(argv[-2])
        self.created[argv[-2]] = input
        return SimpleNamespace(returncode=0, stdout="", stderr="")


@pytest.fixture
def secrets(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    fake = FakeSecrets()
    monkeypatch.setattr(swarm, "docker", fake.docker)
    monkeypatch.setattr(swarm.subprocess, "run", fake.run)
    return fake


def test_a_password_is_made_at_the_first_deploy_shown_once_then_kept(secrets):
    first = swarm.ensure_password("ktor-lab", None)
    assert first.how == "made" and len(first.password) >= 20
    assert secrets.created == {"ktor-lab-password": first.password}
    kept = swarm.password_file("ktor-lab")
    assert kept.read_text() == first.password and kept.stat().st_mode & 0o777 == 0o600
    assert first.password in first.describe() and "shown this once" in first.describe()
    again = swarm.ensure_password("ktor-lab", None)
    assert (again.how, again.password) == ("kept", first.password)
    assert first.password not in again.describe()
    assert len(secrets.created) == 1  # nothing made again
    swarm.forget_password("ktor-lab")
    assert not kept.exists() and secrets.names == set()


def test_lab_password_replaces_the_secret_and_is_never_written_here(secrets):
    swarm.ensure_password("ktor-lab", None)
    given = swarm.ensure_password("ktor-lab", "chosen-by-me")
    assert given.how == "given" and secrets.created["ktor-lab-password"] == "chosen-by-me"
    assert not swarm.password_file("ktor-lab").exists()
    assert "chosen-by-me" not in given.describe()
    with pytest.raises(LabError, match="LAB_PASSWORD: the password is blank"):
        swarm.ensure_password("ktor-lab", " ")


def test_a_secret_whose_password_the_lab_lost_is_replaced_by_a_new_one(secrets):
    secrets.names.add("ktor-lab-password")  # made elsewhere, or its copy here was removed
    login = swarm.ensure_password("ktor-lab", None)
    assert login.how == "made" and secrets.created["ktor-lab-password"] == login.password


@pytest.mark.parametrize(
    "case,argv,message",
    [
        ("singleton-okhttp protocol https", [], "runs a case over HTTP/1.1 without distance"),
        ("per-call-cio rtt 20", [], "runs a case over HTTP/1.1 without distance"),
        ("per-call-cio jdk 25", [], "set that with --set PROXY_RUN_IMAGE"),
        ("per-call-cio", ["--loads", "rate/0/10"], "rate"),  # lab run's own rules of a load
        ("per-call-cio", ["--windows", "0"], "windows and duration must be at least 1"),
        (
            "singleton-apache",
            ["--set", "KTOR_VERSION=3.5.2"],
            "Ktor 3.5.2 does not publish the apache engine",
        ),
        (
            "per-call-cio ktor 3.5.1",
            ["--set", "KTOR_VERSION=3.5.2"],
            "give it there or with --set KTOR_VERSION, not both",
        ),
    ],
)
def test_a_case_the_swarm_stack_cannot_run_is_refused_by_its_backend_before_docker(
    case, argv, message, capsys, monkeypatch
):
    from ktor_lab import cli

    monkeypatch.setattr(swarm, "docker", lambda *a, **_: pytest.fail(f"asked docker {a}"))
    monkeypatch.setattr(swarm, "swarm_problem", lambda: pytest.fail("asked whether this is a swarm"))
    assert cli.main(["swarm", "run", case, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_swarm_backend_measures_one_proxy_of_a_plan_and_refuses_more():
    from ktor_lab.backends import SwarmBackend
    from ktor_lab.plan import Plan, parse_load

    load = [parse_load("rate/100/10")]
    SwarmBackend().check(Plan(["per-call-cio"], ["static-small"], load), machine=False)
    for plan in (
        Plan(["per-call-cio"], ["static-small"], load, forks=2),
        Plan(["per-call-cio", "singleton-cio"], ["static-small"], load),
    ):
        with pytest.raises(LabError, match="the swarm stack runs one proxy, not 2: one case, one JVM"):
            SwarmBackend().check(plan, machine=False)


@pytest.mark.parametrize(
    "case,shell,release",
    [
        ("singleton-apache", "", "3.4.1"),  # its last release, by itself
        ("per-call-cio ktor 3.5.1", "", "3.5.1"),  # the case's own
        ("per-call-cio", "3.4.1", "3.4.1"),  # the shell's KTOR_VERSION
    ],
)
def test_the_swarm_backend_builds_the_release_the_case_or_the_shell_names(case, shell, release, monkeypatch):
    from ktor_lab.backends import SwarmBackend
    from ktor_lab.cases import Case

    monkeypatch.setenv("KTOR_VERSION", shell) if shell else monkeypatch.delenv("KTOR_VERSION", raising=False)
    assert SwarmBackend().release_of(Case.parse(case)) == release
