"""The compose stack, rendered by compose-go (the loader of `docker compose`) since no Docker
engine runs here: the effective config of the base and of every overlay is what users get."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from ktor_lab import versions
from ktor_lab.cases import CASES, ENGINES, LIFETIMES, Case
from ktor_lab.machine import java
from ktor_lab.parts import compose
from ktor_lab.paths import PROXY_JAR, REPO
from ktor_lab.processes import free_port

DOTENV = compose.dotenv()
EXTRAS = tuple(compose.EXTRA_OVERLAYS)
HEALTHCHECKED = ("nginx", "proxy", "locust", "prometheus", "grafana")
# Services that run once and end: what depends on them waits for their success.
ONE_SHOT = ("toxiproxy-init",)
PORTS = {
    "proxy": [(8080, 8080)],
    "nginx": [(8088, 80), (8443, 443)],
    "locust": [(8089, 8089)],
    "prometheus": [(9090, 9090)],
    "grafana": [(3000, 3000)],
}


def render(*overlays: str, **env: str) -> dict:
    """What compose loads with only .env and `env` set: no variable of the user's shell."""
    return compose.merged_config(*overlays, env=env, inherit_env=False)


def accepted_by_proxy(variable: str) -> list[str]:
    """The values the proxy jar lists as valid for `variable` when given a bad one."""
    r = subprocess.run(
        [java(), "-jar", str(PROXY_JAR)],
        env={**os.environ, "HOST": "127.0.0.1", "PORT": str(free_port()), variable: "bogus"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(rf"{variable}='bogus' is not valid; valid values: (.+)", r.stderr)
    assert m, r.stderr
    return m[1].strip().split(", ")


def test_one_overlay_per_case_the_proxy_accepts():
    engines, lifetimes = accepted_by_proxy("CLIENT_ENGINE"), accepted_by_proxy("CLIENT_LIFETIME")
    assert (tuple(engines), tuple(lifetimes)) == (ENGINES, LIFETIMES)
    expected = {f"{lifetime}-{engine}" for lifetime in lifetimes for engine in engines}
    present = {p.stem for p in compose.OVERLAYS.glob("*.yml")} - set(EXTRAS)
    assert present == expected == set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_case_overlay_sets_the_proxy_engine_and_lifetime(case):
    c = Case.parse(case)
    lifetime, engine = c.lifetime, c.engine
    services = render(case)["services"]
    env = services["proxy"]["environment"]
    # What the compose stack gives the proxy is the case's own environment (Case.proxy_env).
    assert (
        {k: env[k] for k in c.proxy_env()}
        == c.proxy_env()
        == {
            "CLIENT_ENGINE": engine,
            "CLIENT_LIFETIME": lifetime,
        }
    )
    assert services["locust"]["environment"]["LAB_CASE"] == case
    # Only the delta, with a first line that says what it changes.
    text = compose.overlay(case).read_text()
    assert text.startswith(f"# {case}: ")
    raw = yaml.safe_load(text)
    proxy = {"environment": {"CLIENT_ENGINE": engine, "CLIENT_LIFETIME": lifetime}}
    assert raw == {
        "services": {"proxy": raw["services"]["proxy"], "locust": {"environment": {"LAB_CASE": case}}}
    }
    release = versions.release_of(c)
    if release == versions.default_release():
        assert raw["services"]["proxy"] == proxy
        assert services["proxy"]["build"]["args"]["KTOR_VERSION"] == DOTENV["KTOR_VERSION"]
    else:
        # An engine the default release lacks: the image is built on its last release, and says so.
        assert services["proxy"]["build"]["args"]["KTOR_VERSION"] == release.name
        assert services["proxy"]["image"] == f"ktor-lab/proxy:ktor-{release.name}"
        assert text.splitlines()[1] == (
            f"# {versions.note(c)}. Its image is built on {compose.release_variable(engine)} (.env): "
            f"KTOR_VERSION's {versions.default_release().name} does not publish it."
        )


def test_base_alone_runs_singleton_cio_with_every_part():
    services = render()["services"]
    assert set(services) == {"nginx", "nginx-exporter", "proxy", "locust", "prometheus", "grafana"}
    env = services["proxy"]["environment"]
    assert (env["CLIENT_ENGINE"], env["CLIENT_LIFETIME"], env["UPSTREAM_URL"]) == (
        "cio",
        "singleton",
        "http://nginx:80",
    )
    assert env["JAVA_OPTS"] == DOTENV["PROXY_JAVA_OPTS"]
    assert services["locust"]["environment"]["LAB_CASE"] == "singleton-cio"
    assert services["locust"]["environment"]["LOCUST_HOST"] == "http://proxy:8080"


def all_renderings() -> list[tuple[str, ...]]:
    return [
        (),
        *[(c,) for c in CASES],
        ("singleton-cio", "distributed"),
        ("singleton-cio", "headless"),
        ("per-call-okhttp", "distributed", "headless"),
        ("per-call-okhttp", "https"),
        ("per-call-okhttp", "network"),
        ("singleton-okhttp", "https", "network"),
    ]


@pytest.mark.parametrize("overlays", all_renderings(), ids=lambda o: "+".join(o) or "base")
def test_every_mounted_path_exists_in_the_repository(overlays):
    rendered = render(*overlays)
    for name, service in rendered["services"].items():
        for volume in service.get("volumes", []):
            if volume["type"] == "volume":  # the lab CA's volume (lab-tls), declared by the stack
                assert volume["source"] in rendered["volumes"], (name, volume)
                continue
            assert volume["type"] == "bind", (name, volume)
            source = Path(volume["source"])
            assert source.exists(), f"{name}: {source} is not in the repository"
            assert REPO in source.parents, (name, source)
        if build := service.get("build"):
            assert (Path(build["context"]) / build.get("dockerfile", "Dockerfile")).exists(), name


def test_entrypoint_script_is_executable_and_template_variables_are_set():
    """The nginx image runs /docker-entrypoint.d/*.sh only when executable, and envsubst replaces
    only variables that are set: every ${VAR} of the template must be in the service's environment."""
    for name in ("05-lab-bind.sh", "30-lab-tls.sh", "40-lab-files.sh"):
        script = REPO / "nginx" / "docker-entrypoint.d" / name
        assert script.stat().st_mode & stat.S_IXUSR
        mode = subprocess.run(
            ["git", "ls-files", "-s", str(script)], cwd=REPO, capture_output=True, text=True
        )
        assert mode.stdout.startswith("100755"), mode.stdout
    env = render()["services"]["nginx"]["environment"]
    template = (REPO / "nginx" / "templates" / "default.conf.template").read_text()
    used = set(re.findall(r"\$\{(\w+)\}", template))
    assert used <= set(env), used - set(env)


@pytest.mark.parametrize("overlays", all_renderings(), ids=lambda o: "+".join(o) or "base")
def test_healthchecks_and_dependencies(overlays):
    services = render(*overlays)["services"]
    for name in HEALTHCHECKED:
        check = services[name]["healthcheck"]
        assert check["test"][0] == "CMD", name
        for key in ("start_period", "interval", "timeout", "retries"):
            assert check.get(key), (name, key)
    for name, service in services.items():
        for dependency, how in service.get("depends_on", {}).items():
            # A dependency with a healthcheck is waited for until healthy; the exporter's image
            # has no shell or HTTP client, so it can only be started; a one-shot must succeed.
            expected = "service_healthy" if "healthcheck" in services[dependency] else "service_started"
            expected = "service_completed_successfully" if dependency in ONE_SHOT else expected
            assert how["condition"] == expected, (name, dependency)
    assert services["proxy"]["depends_on"]["nginx"]["condition"] == "service_healthy"
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_healthcheck_commands_use_what_each_image_has():
    services = render()["services"]
    # nginx (Debian) and eclipse-temurin (Ubuntu) have curl; Prometheus and Grafana busybox wget.
    tools = {"nginx": "curl", "proxy": "curl", "locust": "python", "prometheus": "wget", "grafana": "wget"}
    for name, tool in tools.items():
        assert services[name]["healthcheck"]["test"][1] == tool, name
    assert not DOTENV["NGINX_IMAGE"].split(":")[1].endswith("alpine")


@pytest.mark.parametrize("case", ["singleton-cio", "per-call-java"])
def test_proxy_and_nginx_get_the_same_limits_in_every_case(case):
    services = render(case)["services"]
    assert services["proxy"]["cpus"] == float(DOTENV["PROXY_CPUS"])
    assert services["nginx"]["cpus"] == float(DOTENV["NGINX_CPUS"])
    assert int(services["proxy"]["mem_limit"]) == parse_bytes(DOTENV["PROXY_MEMORY"])
    assert int(services["nginx"]["mem_limit"]) == parse_bytes(DOTENV["NGINX_MEMORY"])
    env = services["proxy"]["environment"]
    assert env["CLIENT_MAX_CONNECTIONS"] == DOTENV["CLIENT_MAX_CONNECTIONS"]
    assert env["CLIENT_LIMITS"] == DOTENV["CLIENT_LIMITS"] == "fair"


def parse_bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(text[:-1]) * units[text[-1].lower()] if text[-1].lower() in units else int(text)


def test_limits_follow_env_overrides():
    services = render(PROXY_CPUS="1.5", PROXY_MEMORY="768m")["services"]
    assert (services["proxy"]["cpus"], int(services["proxy"]["mem_limit"])) == (1.5, 768 << 20)


def test_engine_defaults_can_be_chosen_from_the_shell():
    # what docs/studies/threads.md replays: CLIENT_LIMITS=defaults docker compose ... up
    env = render("singleton-okhttp", CLIENT_LIMITS="defaults")["services"]["proxy"]["environment"]
    assert (env["CLIENT_ENGINE"], env["CLIENT_LIMITS"]) == ("okhttp", "defaults")


def test_documented_ports_on_loopback():
    services = render()["services"]
    for name, expected in PORTS.items():
        ports = [(p["host_ip"], int(p["published"]), p["target"]) for p in services[name]["ports"]]
        assert ports == [("127.0.0.1", published, target) for published, target in expected], name
    assert "ports" not in services["nginx-exporter"]


def test_a_bind_off_loopback_needs_the_lan_overlay_which_gives_every_ui_a_login():
    """compose/lan.yml: Locust, Prometheus' gate and Grafana on LAB_BIND with a login (LAB_PASSWORD,
    user lab), Prometheus itself unpublished; the proxy, nginx and Toxiproxy's API stay on
    LAB_PROXY_BIND, loopback unless set. Without the overlay the base tells nginx's bind check
    the address, and the check stops the stack (test_bind_check.py, test_compose_stack.py)."""
    base = render(LAB_BIND="10.1.2.3")["services"]
    assert (base["nginx"]["environment"]["LAB_BIND"], base["nginx"]["environment"]["LAB_LOGINS"]) == (
        "10.1.2.3",
        "off",
    )
    # Locust checks it too (lab_guard), and without the overlay no UI is published off loopback,
    # even when nginx's check is skipped (docker compose up --no-deps locust prometheus grafana).
    assert base["locust"]["environment"]["LAB_BIND"] == "10.1.2.3"
    for name in ("locust", "prometheus", "grafana"):
        assert {p["host_ip"] for p in base[name]["ports"]} == {"127.0.0.1"}, name
    for overlays in (("singleton-cio", "lan"), ("per-call-okhttp", "distributed", "network", "lan")):
        rendered = render(*overlays, LAB_BIND="10.1.2.3", LAB_PASSWORD="pw-never-shown")
        # the password is a secret read from the shell when the stack is made, never a variable
        # of a container: the rendered stack (what `docker compose config` prints) holds no copy
        assert "pw-never-shown" not in json.dumps(rendered)
        assert rendered["secrets"]["lab-password"]["environment"] == "LAB_PASSWORD"
        services = rendered["services"]
        published = {
            name: sorted((p["host_ip"], p["target"]) for p in s.get("ports", []))
            for name, s in services.items()
            if s.get("ports")
        }
        expected = {
            "locust": [("10.1.2.3", 8089)],
            "prometheus-gate": [("10.1.2.3", 9090)],
            "grafana": [("10.1.2.3", 3000)],
            "proxy": [("127.0.0.1", 8080)],
            "nginx": [("127.0.0.1", 80), ("127.0.0.1", 443)],
            **({"toxiproxy": [("127.0.0.1", 8474)]} if "network" in overlays else {}),
        }
        assert published == expected, overlays
        assert services["nginx"]["environment"]["LAB_LOGINS"] == "on"
        for name in ("locust", "grafana", "prometheus-gate"):
            assert [s["source"] for s in services[name]["secrets"]] == ["lab-password"], name
            env = services[name]["environment"]
            assert env["LAB_PASSWORD_FILE"] == "/run/secrets/lab-password" and "LAB_PASSWORD" not in env, name
        grafana = services["grafana"]["environment"]
        assert (grafana["GF_SECURITY_ADMIN_USER"], grafana["GF_AUTH_ANONYMOUS_ENABLED"]) == ("lab", "false")
        gate = services["prometheus-gate"]
        assert gate["image"] == services["nginx"]["image"]
        assert gate["depends_on"]["prometheus"]["condition"] == "service_healthy"
        assert gate["healthcheck"]["test"][:2] == ["CMD", "curl"]
        for volume in gate["volumes"]:
            assert Path(volume["source"]).is_file() and REPO in Path(volume["source"]).parents
    # the proxy and nginx on the network only on request
    opened = render(
        "singleton-cio", "network", "lan", LAB_BIND="10.1.2.3", LAB_PASSWORD="pw", LAB_PROXY_BIND="10.1.2.3"
    )["services"]
    assert {p["host_ip"] for n in ("proxy", "nginx") for p in opened[n]["ports"]} == {"10.1.2.3"}
    # Toxiproxy's API has no login and makes proxies to any address: loopback, whatever is asked.
    assert {p["host_ip"] for p in opened["toxiproxy"]["ports"]} == {"127.0.0.1"}


def test_the_workers_check_the_master_s_host_against_the_proxy_s():
    services = render("singleton-cio", "distributed", LAB_ALLOWED_HOSTS="target.example")["services"]
    for name in ("locust", "locust-worker"):
        env = services[name]["environment"]
        assert (env["LOCUST_HOST"], env["LAB_ALLOWED_HOSTS"]) == ("http://proxy:8080", "target.example"), name


def test_prometheus_and_grafana_point_at_compose_services():
    services = render()["services"]
    prom = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())
    for job in prom["scrape_configs"]:
        [target] = job["static_configs"][0]["targets"]
        host, port = target.split(":")
        assert host in services, target
        listening = {
            "proxy": services["proxy"]["environment"]["PORT"],
            "locust": "8089",
            "nginx-exporter": re.search(r":(\d+)$", " ".join(services["nginx-exporter"]["command"]))[1],
        }
        assert listening[host] == port, target
    assert "http://nginx:8081/stub_status" in " ".join(services["nginx-exporter"]["command"])
    datasource = yaml.safe_load((REPO / "grafana" / "provisioning" / "datasources" / "lab.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"


def test_images_are_pinned():
    for key, image in DOTENV.items():
        if key.endswith("_IMAGE"):
            name, _, tag = image.rpartition(":")
            assert name and tag and tag != "latest" and re.search(r"\d", tag), (key, image)
    for name, service in render("distributed")["services"].items():
        image = service["image"]
        built = image.endswith(":local") or image == f"ktor-lab/proxy:ktor-{DOTENV['KTOR_VERSION']}"
        assert image in DOTENV.values() or built, (name, image)
    # The proxy's build takes its release and JVM image from .env.
    args = render("singleton-cio")["services"]["proxy"]["build"]["args"]
    assert args == {"KTOR_VERSION": DOTENV["KTOR_VERSION"], "RUN_IMAGE": DOTENV["PROXY_RUN_IMAGE"]}
    assert DOTENV["KTOR_VERSION"] == versions.default_release().name
    for dockerfile in (REPO / "proxy-app" / "Dockerfile", REPO / "locust" / "Dockerfile"):
        for line in dockerfile.read_text().splitlines():
            if line.startswith("ARG") and "IMAGE=" in line:
                assert re.search(r":\S*\d", line) and ":latest" not in line, line


def test_every_command_works_with_no_variable_set():
    """`config`, `up`, `ps`, `down` load the files with nothing set in the shell; Grafana's admin
    password is then made by its entrypoint (tested on containers in test_compose_stack.py)."""
    services = render("singleton-cio")["services"]
    grafana = services["grafana"]
    assert grafana["environment"]["GRAFANA_ADMIN_PASSWORD"] == ""
    assert grafana["entrypoint"] == ["/lab-entrypoint.sh"]
    mounts = {v["target"]: Path(v["source"]) for v in grafana["volumes"]}
    script = mounts["/lab-entrypoint.sh"]
    assert script == REPO / "grafana" / "lab-entrypoint.sh" and script.stat().st_mode & stat.S_IXUSR
    assert "exec /run.sh" in script.read_text()  # the official image's own entrypoint, after it
    chosen = render(GRAFANA_ADMIN_PASSWORD="not-admin")["services"]["grafana"]
    assert chosen["environment"]["GRAFANA_ADMIN_PASSWORD"] == "not-admin"


def test_proxy_open_files_limit_is_a_setting_not_a_compose_ulimit():
    """A compose `ulimits:` above the host's hard limit stops the container before it starts;
    PROXY_NOFILE is applied inside, by proxy-app/start.sh, and defaults to the hard limit."""
    proxy = render()["services"]["proxy"]
    assert "ulimits" not in proxy
    assert proxy["environment"]["PROXY_NOFILE"] == DOTENV["PROXY_NOFILE"] == "max"
    assert render(PROXY_NOFILE="20000")["services"]["proxy"]["environment"]["PROXY_NOFILE"] == "20000"


def test_the_compose_backend_knows_every_variable_compose_passes_to_the_proxy():
    raw = yaml.safe_load(compose.BASE.read_text())["services"]["proxy"]["environment"]
    passed = {m for v in raw.values() for m in re.findall(r"\$\{(\w+)", str(v))}
    assert passed == set(compose.PROXY_VARIABLES)


def test_https_points_the_proxy_at_nginx_over_tls_trusting_the_lab_ca_alone():
    services = render("per-call-okhttp", "https")["services"]
    env = services["proxy"]["environment"]
    assert (env["UPSTREAM_URL"], env["UPSTREAM_CA_FILE"], env["CLIENT_HTTP_VERSION"]) == (
        "https://nginx:443",
        "/lab-tls/ca.pem",
        "1.1",
    )
    assert (
        render("singleton-java", "https", CLIENT_HTTP_VERSION="2")["services"]["proxy"]["environment"][
            "CLIENT_HTTP_VERSION"
        ]
        == "2"
    )
    mounts = {v["target"]: v for v in services["proxy"]["volumes"]}
    assert mounts["/lab-tls"]["source"] == "lab-tls" and mounts["/lab-tls"]["read_only"]
    nginx = {v["target"]: v["source"] for v in services["nginx"]["volumes"]}
    assert nginx["/etc/nginx/lab-tls"] == "lab-tls"
    assert services["nginx"]["environment"]["LAB_TLS_DIR"] == "/etc/nginx/lab-tls"


def test_distributed_adds_workers_that_follow_the_master():
    services = render("singleton-cio", "distributed", LOCUST_WORKERS="3")["services"]
    master, worker = services["locust"], services["locust-worker"]
    assert master["environment"]["LOCUST_MODE_MASTER"] == "true"
    assert master["environment"]["LOCUST_EXPECT_WORKERS"] == "3"
    assert worker["environment"]["LOCUST_MODE_WORKER"] == "true"
    assert worker["environment"]["LOCUST_MASTER_NODE_HOST"] == "locust"
    assert worker["deploy"]["replicas"] == 3
    assert "ports" not in worker  # --scale needs no fixed host port
    assert worker["image"] == master["image"]
    assert master["environment"]["LAB_CASE"] == "singleton-cio"


def test_dockerfile_builds_with_the_commands_the_tests_use():
    """The image is built as `make test` builds the jar: the same Maven flags, unit tests included
    (the compose suite builds the image for real)."""
    makefile = (REPO / "Makefile").read_text()
    mvn = re.search(r"^MVN := (.+)$", makefile, re.M)[1]
    assert "\t$(MVN) package\n" in makefile  # every module from ./pom.xml, unit tests included
    runs = [
        line.removeprefix("RUN ").strip()
        for line in (REPO / "proxy-app" / "Dockerfile").read_text().splitlines()
        if line.startswith("RUN ")
    ]
    assert f"{mvn} -f proxy-app $(cat maven-flags) package" in runs


def test_the_image_builds_a_release_with_the_flags_the_runner_uses(tmp_path):
    """The Dockerfile's release step, run by sh over ktor-releases.tsv and proxy-app/maven-flags.awk
    as the image has them: the same Maven flags as versions.py gives a native build of that release
    (in any order), and an unknown release stopped by name."""
    dockerfile = (REPO / "proxy-app" / "Dockerfile").read_text()
    step = re.search(r"^RUN (awk .*?)\n", dockerfile, re.M)[1]
    for name in ("ktor-releases.tsv", "proxy-app/maven-flags.awk"):
        (tmp_path / Path(name).name).write_text((REPO / name).read_text())
    for release in versions.releases():
        r = subprocess.run(
            ["sh", "-c", step], cwd=tmp_path, env={"KTOR_VERSION": release.name, "PATH": "/usr/bin:/bin"}
        )
        assert r.returncode == (0 if release.builds_proxy else 1), release.name
        if not release.builds_proxy:  # clients only: no image, refused with the reason
            continue
        flags = (tmp_path / "maven-flags").read_text().split()
        assert sorted(flags) == sorted(release.maven_flags())
    assert "-Dno.apache=true" in versions.default_release().maven_flags()
    bad = subprocess.run(
        ["sh", "-c", step],
        cwd=tmp_path,
        env={"KTOR_VERSION": "9.9.9", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    known = " ".join(r.name for r in versions.releases())
    assert (
        bad.returncode != 0
        and f"KTOR_VERSION=9.9.9 is not in ktor-releases.tsv (known: {known}" in bad.stderr
    )


def test_the_proxy_image_context_sends_what_its_dockerfile_copies_and_no_more():
    """The build context is the repository root (the proxy's parent POM is ./pom.xml); .dockerignore
    lets through exactly the files the Dockerfile copies, so a change elsewhere rebuilds nothing."""
    build = render("singleton-cio")["services"]["proxy"]["build"]
    assert Path(build["context"]) == REPO and build["dockerfile"] == "proxy-app/Dockerfile"
    copied = {
        source
        for line in (REPO / "proxy-app" / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for source in line.split()[1:-1]
    }
    allowed = [ln[1:] for ln in (REPO / ".dockerignore").read_text().splitlines() if ln.startswith("!")]
    assert "*" in (REPO / ".dockerignore").read_text().splitlines()
    top = {
        "pom.xml",
        "ktor-releases.tsv",
        ".mvn",
        "proxy-app/pom.xml",
        "proxy-app/start.sh",
        "proxy-app/maven-flags.awk",
    }
    assert copied == top | {"proxy-app/src"}, copied
    for path in copied:
        assert any(a == path or a.startswith(path + "/") for a in allowed), path
    # Every source root the Maven build can use (src/engines: one per engine, for the releases with it).
    roots = {f"proxy-app/src/{p.name}" for p in (REPO / "proxy-app" / "src").iterdir()}
    assert (
        set(allowed) - top == roots == {"proxy-app/src/main", "proxy-app/src/engines", "proxy-app/src/test"}
    )
    # Locust's image installs the same pinned requirements the venv does (pins kept equal in test_locust).
    assert "-r /tmp/lab-requirements.txt" in (REPO / "locust" / "Dockerfile").read_text()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_the_network_overlay_puts_toxiproxy_under_nginx_s_name_for_the_proxy(tls):
    overlays = ("per-call-okhttp", *(("https",) if tls else ()), "network")
    services = render(*overlays, UPSTREAM_RTT_MS="20", UPSTREAM_JITTER_MS="2")["services"]
    proxy, toxiproxy, init = services["proxy"], services["toxiproxy"], services["toxiproxy-init"]
    # The proxy still calls nginx by name (and over TLS verifies nginx's certificate); the name is
    # Toxiproxy's for it alone, through a link.
    assert proxy["environment"]["UPSTREAM_URL"] == ("https://nginx:443" if tls else "http://nginx:80")
    assert proxy["links"] == ["toxiproxy:nginx"]
    assert "links" not in services["nginx-exporter"] and "links" not in services["locust"]
    # Toxiproxy's proxies forward those two ports to the real nginx, by its name from its own container.
    proxies = json.loads((REPO / "toxiproxy" / "proxies.json").read_text())
    assert {(p["listen"], p["upstream"]) for p in proxies} == {
        ("0.0.0.0:80", "nginx:80"),
        ("0.0.0.0:443", "nginx:443"),
    }
    assert toxiproxy["image"] == DOTENV["TOXIPROXY_IMAGE"]
    assert "-config=/lab-network/proxies.json" in toxiproxy["command"]
    assert toxiproxy["healthcheck"]["test"] == ["CMD", "/toxiproxy-cli", "list"]  # no shell, no curl in it
    [api] = toxiproxy["ports"]
    assert (api["host_ip"], api["target"]) == ("127.0.0.1", 8474)
    # The values from the shell reach the one-shot that sets the toxics and the proxy that shows them.
    for service in (init, proxy):
        env = service["environment"]
        assert (env["UPSTREAM_RTT_MS"], env["UPSTREAM_JITTER_MS"], env["UPSTREAM_BANDWIDTH_KBPS"]) == (
            "20",
            "2",
            "0",
        )
    assert init["entrypoint"] == ["python", "/lab-network/lab_network.py"]
    assert init["image"] == services["locust"]["image"] and init["build"] == services["locust"]["build"]
    assert proxy["depends_on"]["toxiproxy-init"]["condition"] == "service_completed_successfully"
    # Off by default: with nothing set, the values are 0 (lab_network_info says none).
    assert render("singleton-cio", "network")["services"]["proxy"]["environment"]["UPSTREAM_RTT_MS"] == "0"
