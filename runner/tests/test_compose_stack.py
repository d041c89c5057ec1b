"""The compose stack on a real Docker engine: the README's commands, run as a user runs them.

Every test here starts containers from docker-compose.yml and the overlays, as one compose
project of its own (`ktor-lab-test-<pid>`, free host ports), so a lab a user has up is never
touched, and removes it afterwards. On the build machine the images are the stand-ins of
../shared/standin (Debian's nginx, Prometheus, Locust, JDK 17 under the official tags).
Grafana has no stand-in: its panels are checked by running every query against this
Prometheus, and its entrypoint script in a container of its own.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from conftest import scrape, wait_until, whole_run_counts_agree
from ktor_lab import network, versions
from ktor_lab.cases import Case
from ktor_lab.metrics import query
from ktor_lab.parts import compose, grafana, nginx
from ktor_lab.parts.loadgen import LocustWeb, WindowStats
from ktor_lab.paths import REPO
from ktor_lab.processes import free_port

pytestmark = pytest.mark.compose

LOAD_SECONDS = 6
WORKER_REPORT_S = 3  # Locust workers report their stats to the master every 3 s
RATE = 100  # requests a second: enough to count, little enough for per-call cases on 2 cores
USERS = 10
MIN_REQUESTS = 100


def new_project(name: str, **kwargs) -> compose.Project:
    ports = {s: free_port() for s in ("proxy", "nginx", "locust", "prometheus")}
    return compose.Project(f"ktor-lab-test-{os.getpid()}-{name}", ports, **kwargs)


@pytest.fixture(scope="module")
def lab(compose_engine) -> Iterator[compose.Project]:
    """The stack of one project, switched from case to case as a user switches overlays."""
    project = new_project("main")
    try:
        yield project
    finally:
        project.down()
        assert not compose.wait_gone(project), f"left behind: {project.leftovers()}"


def upstream_count(proxy_url: str) -> float:
    return scrape(proxy_url).sum("lab_upstream_requests_seconds_count")


def load_through_proxy(
    project: compose.Project, case: str, seconds: int, **custom
) -> tuple[WindowStats, float]:
    """Locust at RATE through the proxy for `seconds`, started through its web API as the UI does;
    returns Locust's stats of the whole run and the proxy's own count of upstream exchanges over
    the same run. Whole runs, not a window after a reset: Locust clears its stats when a run
    starts, while a reset in the middle lets workers' reports of earlier requests arrive after it."""
    web = LocustWeb(project.url("locust"))
    options = {
        "scenario": "static-small",
        "load_model": "rate",
        "target_rps": RATE,
        "lab_case": case,
        **custom,
    }
    before = upstream_count(project.url("proxy"))
    web.swarm("http://proxy:8080", USERS, USERS, **options)
    time.sleep(seconds)
    # enough requests to compare counts, however slow the machine (per-call TLS with both cores
    # busy made 59 in 6 s): a little longer until MIN_REQUESTS, at most 4 times as long
    deadline = time.monotonic() + 3 * seconds
    while web.stats().requests < MIN_REQUESTS and time.monotonic() < deadline:
        time.sleep(0.5)
    web.stop()
    if web.stats().workers:
        # A worker sends no report on "stop": its last requests come with its next 3 s report.
        time.sleep(WORKER_REPORT_S + 1)
    stats = web.stats()
    time.sleep(0.5)  # the last exchanges are recorded as their bodies end
    return stats, upstream_count(project.url("proxy")) - before


# Two cases on containers, one per lifetime, each over TLS (compose/https.yml; the h2 one with
# CLIENT_HTTP_VERSION=2), the engine negotiating what it says; plain http is every other test's
# stack (the README's singleton-cio, the headless runs). Every overlay's environment is the case's
# own, proven for all of them by rendering (test_compose.py); the apache overlay's own image is
# its test below.
UP_CASES = {"per-call-okhttp protocol https": "HTTP/1.1", "singleton-java protocol h2": "HTTP/2.0"}


@pytest.mark.parametrize("case", UP_CASES, ids=["per-call-https", "singleton-h2"])
def test_each_lifetime_is_up_and_serves_through_its_engine_over_tls(lab, case):
    """The proxy trusts the lab CA nginx made in the lab-tls volume, says what it negotiated, and
    nginx logged the protocol; Locust's requests and the proxy's count agree."""
    c = Case.parse(case)
    lab.up(c)
    assert requests.get(f"{lab.url('proxy')}/health", timeout=5).text == f"ok {c.id}\n"
    stats, served = load_through_proxy(lab, c.id, LOAD_SECONDS)
    assert stats.failures == 0, stats.errors
    # enough exchanges for the counts to mean something; the rate reached is the machine's (per-call
    # Apache5 made 575 of 1000 in a run with both cores busy), not what this test checks
    assert stats.requests >= MIN_REQUESTS, stats
    assert whole_run_counts_agree(stats.requests, served, USERS), (stats.requests, served)
    # what was negotiated is known once an exchange was made
    info = scrape(lab.url("proxy")).labels("lab_proxy_info")
    assert info["case"] == c.id
    assert (info["scheme"], info["negotiated_http_version"], info["negotiated_tls_version"]) == (
        "https",
        UP_CASES[case],
        "TLSv1.3",
    ), info
    logged = lab.read_file("nginx", compose.CONNECTIONS_LOG).splitlines()
    assert any(f" https {UP_CASES[case]} TLSv1.3 " in line for line in logged), logged[-5:]


@pytest.mark.parametrize("host", ["localhost", "example.com", "nginx"])
def test_nginx_serves_the_lab_whatever_the_host_header(lab, host):
    lab.up(lab.case or Case.parse("singleton-cio"))
    base = lab.url("nginx")
    assert requests.get(f"{base}/files/tiny.txt", headers={"Host": host}, timeout=5).text == "Success!\n"
    root = requests.get(f"{base}/", headers={"Host": host}, timeout=5)
    assert root.text == "Success!\n", "the image's own default server answered"
    assert requests.get(f"{base}/files/manifest.json", headers={"Host": host}, timeout=5).json()["100m.bin"]


def test_locust_ui_form_offers_the_lab_options_and_runs_what_it_says(lab, browser):
    okhttp = Case.parse("singleton-okhttp")
    lab.up(okhttp)
    lab.compose(okhttp, "up", "-d", "--wait", "--no-deps", "--force-recreate", "locust")
    ui = lab.url("locust")
    page = browser.new_page(viewport={"width": 1200, "height": 1600})
    page.goto(ui + "/")
    page.get_by_text("Custom parameters").click()
    fields = {el.get_attribute("name") for el in page.locator("form input, form select").all()}
    lab_options = {
        "scenario",
        "loadModel",
        "waitMin",
        "waitMax",
        "targetRps",
        "largeSize",
        "uploadSize",
        "delayMs",
    }
    assert lab_options <= fields, lab_options - fields
    assert set(page.locator("select[name=scenario] option").all_inner_texts()) == {
        "static-small",
        "static-large",
        "upload",
        "slow",
        "mix",
    }
    page.locator("input[name=userCount]").fill("5")
    page.locator("input[name=spawnRate]").fill("5")
    page.locator("select[name=scenario]").select_option("upload")
    page.locator("select[name=uploadSize]").select_option("1k")
    page.locator("input[name=waitMin]").fill("0")
    page.locator("input[name=waitMax]").fill("0.05")
    page.get_by_role("button", name="Start").click()
    web = LocustWeb(ui)
    assert wait_until(lambda: web.stats().requests >= 50, timeout=30), web.stats()

    # Read while the run goes on (once stopped, the open page sets Locust back to a new test);
    # /stats/requests is cached by Locust for 2 s.
    def entries() -> dict[str, int]:
        body = requests.get(f"{ui}/stats/requests", timeout=5).json()
        return {e["name"]: e["num_requests"] for e in body["stats"]}

    assert wait_until(lambda: entries().get("upload", 0) >= 50, timeout=30), entries()
    own = set(entries())
    stats = web.stats()
    page.close()
    web.stop()
    assert own == {"upload", "Aggregated"}
    assert stats.failures == 0, stats.errors
    assert (stats.settings["scenario"], stats.settings["upload_size"]) == ("upload", "1k")
    assert (stats.settings["wait_min"], stats.settings["wait_max"]) == (0, 0.05)


def test_prometheus_has_every_target_and_every_panel_query_data(lab):
    c = lab.case or Case.parse("singleton-cio")  # the stack as the tests before left it
    lab.up(c)
    base = lab.url("prometheus")
    # Grafana's $__rate_interval for a 5 s scrape is 20 s: load for longer than that.
    stats, _ = load_through_proxy(lab, c.id, 25)
    assert stats.failures == 0
    assert wait_until(lambda: len(query(base, "up == 1")) == 3, timeout=20), query(base, "up")
    assert {r["metric"]["job"] for r in query(base, "up == 1")} == {"proxy", "locust", "nginx"}
    lifetime, engine = c.lifetime, c.engine
    # The pool's panel has data for the engines that expose their pool (OkHttp, Apache5) only.
    absent = grafana.not_exposed(scrape(lab.url("proxy")).labels("lab_proxy_info"))
    assert not grafana.panels_without_data(
        base, {"engine": engine, "lifetime": lifetime}, "20s", absent=absent
    )
    assert not grafana.panels_without_data(base, {"engine": ".*", "lifetime": ".*"}, "20s", absent=absent)


def test_proxy_open_files_limit_comes_from_the_environment(lab):
    case = lab.case or Case.parse("singleton-cio")
    hard = int(
        lab.compose(
            case,
            "run",
            "--rm",
            "--no-deps",
            "--entrypoint",
            "sh",
            "proxy",
            "-c",
            "ulimit -Hn",
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    lab.up(case)
    assert scrape(lab.url("proxy")).sum("process_files_max_files") == hard  # max, the default
    too_high = lab.compose(
        case,
        "run",
        "--rm",
        "--no-deps",
        "-e",
        f"PROXY_NOFILE={hard + 1}",
        "proxy",
        check=False,
        capture_output=True,
        text=True,
    )
    assert too_high.returncode == 2
    assert f"PROXY_NOFILE={hard + 1} is above this host's open-files hard limit ({hard})" in too_high.stderr
    lab.env["PROXY_NOFILE"] = "4096"
    try:
        lab.up(case)
        assert scrape(lab.url("proxy")).sum("process_files_max_files") == 4096
    finally:
        lab.env["PROXY_NOFILE"] = "max"
        lab.up(case)


def test_the_apache_overlay_runs_on_its_last_release_by_itself_and_a_release_without_it_is_refused(
    compose_engine,
):
    """The README's command for the apache case, with .env as it is: the proxy's image is built on
    3.4.1 (APACHE_KTOR_VERSION) under its own tag, lab_proxy_info says so, and it serves; the same
    overlay on a release without the engine stops the proxy naming the release."""
    last = versions.last_release("apache")
    default = versions.default_release()
    project = new_project("release")
    apache = Case.parse("singleton-apache")
    try:
        project.compose(apache, "up", "-d", "--wait", "--wait-timeout", "300", "proxy", "nginx")
        project.case = apache
        info = scrape(project.url("proxy")).labels("lab_proxy_info")
        assert (info["ktor_version"], info["case"]) == (last.name, "singleton-apache")
        assert info["engine_note"] == "apache: Ktor 3.4.1, its last release; deprecated"
        assert requests.get(f"{project.url('proxy')}/files/tiny.txt", timeout=10).text.strip() == "Success!"
        images = subprocess.run(
            ["docker", "images", "-q", f"ktor-lab/proxy:ktor-{last.name}"], capture_output=True, text=True
        )
        assert images.stdout.strip()
        # The default release's image (built for the other cases) has no apache engine.
        project.env[compose.release_variable("apache")] = default.name
        refused = project.compose(
            apache,
            "run",
            "--rm",
            "--no-deps",
            "--build",
            "proxy",
            check=False,
            capture_output=True,
            text=True,
        )
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert f"Ktor {default.name} does not publish the apache engine" in refused.stderr
    finally:
        project.down()
        assert not compose.wait_gone(project), f"left behind: {project.leftovers()}"


def test_distributed_master_and_two_workers_share_the_load(compose_engine):
    project = new_project("distributed", workers=2)
    try:
        project.up(Case.parse("per-call-cio"))
        web = LocustWeb(project.url("locust"))
        assert wait_until(lambda: web.stats().workers == 2, timeout=30), web.stats().workers
        stats, served = load_through_proxy(project, "per-call-cio", LOAD_SECONDS)
        samples = scrape(project.url("locust"))
    finally:
        project.down()
    assert not compose.wait_gone(project)
    assert stats.failures == 0 and stats.workers == 2
    assert whole_run_counts_agree(stats.requests, served, USERS), (stats.requests, served)
    nodes = samples.label_values("locust_cpu_peak_percent", "node")
    assert len(nodes - {"master"}) == 2, nodes


def headless(project: compose.Project, case: str) -> subprocess.CompletedProcess:
    """The README's headless command: up with headless.yml and --exit-code-from locust."""
    return project.compose(
        Case.parse(case),
        "up",
        "--exit-code-from",
        "locust",
        *project.services(),
        extras=("headless",),
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def results_owned_by():
    """Makes results/ belong to another user for the test (the owner is who runs compose), then
    gives it back and removes the folders the test's runs wrote."""
    results = REPO / "results"
    before = set(results.iterdir())
    st = results.stat()
    other = 4321 if os.geteuid() == 0 else os.geteuid()
    if os.geteuid() == 0:
        os.chown(results, other, other)
    try:
        yield other
    finally:
        if os.geteuid() == 0:
            os.chown(results, st.st_uid, st.st_gid)
        for made in set(results.iterdir()) - before:
            subprocess.run(["rm", "-rf", str(made)], check=False)


def test_readme_headless_command_exits_0_with_its_files_owned_by_results_owner_and_1_on_failures(
    compose_engine, results_owned_by
):
    """One project, two headless runs, as a user runs the README's command again with other
    settings: the second recreates only the proxy and Locust."""
    project = new_project("headless", env={"LOCUST_RUN_TIME": "10s", "LOCUST_USERS": "10"})
    try:
        passed = headless(project, "per-call-okhttp")
        # The proxy gives up after 300 ms on an upstream that answers after 1 s: every request a 504.
        project.env.update(
            {
                "LOCUST_RUN_TIME": "5s",
                "LOCUST_USERS": "5",
                "LOCUST_SCENARIO": "slow",
                "LOCUST_DELAY_MS": "1000",
                "CLIENT_REQUEST_TIMEOUT_MS": "300",
            }
        )
        failed = headless(project, "singleton-cio")
    finally:
        project.down()
    assert not compose.wait_gone(project)
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-2000:]
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-2000:]
    folders = {
        p.name.rsplit("Z-", 1)[-1]: p for p in (REPO / "results").iterdir() if p.name.startswith("compose-")
    }
    assert set(folders) == {"per-call-okhttp", "singleton-cio"}, folders
    folder = folders["per-call-okhttp"]
    assert re.fullmatch(r"compose-\d{8}T\d{6}Z-per-call-okhttp", folder.name)
    files = [folder, *folder.iterdir()]
    assert {"locust_stats.csv", "locust.html"} <= {f.name for f in files}
    assert {(f.stat().st_uid, f.stat().st_gid) for f in files} == {(results_owned_by, results_owned_by)}
    rows = {row["Name"]: row for row in csv.DictReader((folder / "locust_stats.csv").open())}
    assert int(rows["static-small"]["Request Count"]) >= 20  # 10 users with a 1-2 s wait, 10 s
    assert rows["static-small"]["Failure Count"] == "0"
    rows = {
        row["Name"]: row for row in csv.DictReader((folders["singleton-cio"] / "locust_stats.csv").open())
    }
    assert int(rows["slow"]["Failure Count"]) == int(rows["slow"]["Request Count"]) > 0


def test_lab_run_with_the_compose_backend(compose_engine, tmp_path):
    lab_cmd = Path(sys.executable).with_name("lab")
    r = subprocess.run(
        [
            str(lab_cmd),
            "run",
            "--backend",
            "compose",
            "--cases",
            # through compose/network.yml: Toxiproxy stacked on its overlay, 20 ms to nginx (a case
            # without a round trip: the README's stack, the module's fixture)
            "per-call-okhttp rtt 20",
            "--loads",
            f"rate/{RATE}/10",
            *("--warmup", "0", "--duration", "5", "--windows", "1", "--forks", "1", "--aa", "none"),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["backend"]["kind"] == "compose"
    assert "grafana" not in results["backend"]["services"]
    assert [run["case"] for run in results["runs"]] == ["per-call-okhttp"]
    for run in results["runs"]:
        assert run["locust"]["failures"] == 0
        n = run["locust"]["requests"]
        # Locust's and the proxy's counts are read one after the other at each edge: they may
        # differ by what arrives meanwhile (a 5 s window at 100 rps: 0.2 s of edges on a busy
        # machine is 20 requests, 4%), as test_lab_run.py allows.
        gap = run["locust"]["rps"] * run["window"]["edges_s"]
        assert abs(n - run["proxy"]["upstream_requests"]) <= 0.02 * n + gap, (run["proxy"], gap)
        assert run["proxy"]["settings"]["case"] == run["case"]
        # Locust's container found by its command line, its CPU counted apart from the lab's rest
        assert 0 < run["machine"]["generator_cores"] < run["machine"]["lab_cores"], run["machine"]
    (far,) = results["runs"]
    assert far["dims"]["rtt_ms"] == 20 and far["network"]["via"].startswith(
        compose.dotenv()["TOXIPROXY_IMAGE"]
    )
    assert {t["attributes"]["latency"] for t in far["network"]["toxics"]["nginx"]} == {10}
    assert far["locust"]["p50_ms"] >= 20 and far["connections"]["per_1000_requests"] >= 900
    leftovers = subprocess.run(
        [
            "docker",
            "ps",
            "-aq",
            "--filter",
            f"label=com.docker.compose.project={results['backend']['project']}",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert not leftovers
    assert (tmp_path / "report.html").exists()


def test_grafana_entrypoint_never_leaves_admin_admin(compose_engine, tmp_path):
    """grafana/lab-entrypoint.sh in a container (Grafana itself has no stand-in): the password the
    image's /run.sh gets is GRAFANA_ADMIN_PASSWORD, else a random one printed once at first start."""
    fake_run = tmp_path / "run.sh"
    fake_run.write_text(
        '#!/bin/sh\necho "run.sh got GF_SECURITY_ADMIN_PASSWORD=$GF_SECURITY_ADMIN_PASSWORD"\n'
    )
    fake_run.chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    image = compose.dotenv()["NGINX_IMAGE"]  # any image with a shell: the script is plain sh

    def start(*env: str) -> str:
        r = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--entrypoint",
                "/lab-entrypoint.sh",
                "-v",
                f"{REPO / 'grafana' / 'lab-entrypoint.sh'}:/lab-entrypoint.sh:ro",
                "-v",
                f"{fake_run}:/run.sh:ro",
                "-v",
                f"{data}:/var/lib/grafana",
                *env,
                image,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return r.stdout

    first = start()
    made = re.search(r"made at first start \(user admin\): (\w+)", first)
    assert made and len(made[1]) == 24, first
    assert f"GF_SECURITY_ADMIN_PASSWORD={made[1]}\n" in first
    (data / "grafana.db").write_text("")  # Grafana has stored its admin
    again = start()
    assert "made at first start" not in again and "=admin\n" not in again
    assert "GF_SECURITY_ADMIN_PASSWORD=\n" not in again
    chosen = start("-e", "GRAFANA_ADMIN_PASSWORD=s3cret-choice")
    assert "GF_SECURITY_ADMIN_PASSWORD=s3cret-choice\n" in chosen
    # where the UIs ask for a login (swarm, compose/lan.yml): the lab's password, never printed
    secret = tmp_path / "lab-password"
    secret.write_text("the-lab-s-secret\n")
    swarm = start("-e", "LAB_PASSWORD_FILE=/run/secrets/lab-password", "-e", "GF_SECURITY_ADMIN_USER=lab",
                  "-v", f"{secret}:/run/secrets/lab-password:ro")  # fmt: skip
    assert "Grafana's admin: user lab, the lab's password (LAB_PASSWORD_FILE)" in swarm
    assert swarm.count("the-lab-s-secret") == 1 and "GF_SECURITY_ADMIN_PASSWORD=the-lab-s-secret\n" in swarm
    lan = start("-e", "LAB_PASSWORD=from-the-lan-file", "-e", "GRAFANA_ADMIN_PASSWORD=ignored")
    assert lan.count("from-the-lan-file") == 1 and "GF_SECURITY_ADMIN_PASSWORD=from-the-lan-file\n" in lan
    # the lab's password guards every UI: one too weak stops Grafana as it stops Locust
    with pytest.raises(subprocess.CalledProcessError) as weak:
        start("-e", "LAB_PASSWORD=abababababab")
    assert "lab: the lab's password is too weak: use at least 12 characters" in weak.value.stderr


def test_what_a_killed_run_left_is_removed_and_a_live_runs_project_is_not(compose_engine):
    """A run killed with SIGKILL (or a machine stopped under it) cannot `down` its project; the
    next test session or `lab run --backend compose` removes it, and only it: the owner's PID is
    in the project's name, and a project whose owner lives is never touched."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = compose.Project(f"ktor-lab-test-{gone.pid}-orphan", {"nginx": free_port()})
    live = new_project("live")
    try:
        for project in (orphan, live):
            project.compose(
                Case.parse("singleton-cio"), "up", "-d", "--no-deps", "nginx", stdout=subprocess.DEVNULL
            )
        assert orphan.leftovers() and live.leftovers()
        listed = compose.orphaned_projects()
        assert orphan.name in listed and live.name not in listed, listed
        assert orphan.name in compose.remove_orphans()
        assert not compose.wait_gone(orphan), orphan.leftovers()
        assert live.leftovers(), "a live run's project was removed"
    finally:
        orphan.down()
        live.down()
    assert not compose.wait_gone(live)


NETWORK_RTT_MS = 60


def test_the_network_overlay_puts_the_round_trip_between_the_proxy_and_nginx(compose_engine):
    """compose/network.yml on the stand-ins: Toxiproxy's official image (a stand-in built from its Go
    module), its one-shot init, the proxy's link: every request pays the round trip, a per-call
    client's TLS handshake crosses it too, and a bad value stops the stack naming the variable."""
    project = new_project("network", env={"UPSTREAM_RTT_MS": str(NETWORK_RTT_MS)})
    project.ports["toxiproxy"] = free_port()
    project.env["TOXIPROXY_HOST_PORT"] = str(project.ports["toxiproxy"])
    try:
        for protocol, round_trips in (("http", 1), ("https", 2)):
            case = Case.parse(f"per-call-okhttp protocol {protocol}")
            project.up(case, network=True)
            proxy = project.url("proxy")
            samples = scrape(proxy)
            assert samples.labels("lab_network_info")["rtt_ms"] == str(NETWORK_RTT_MS)
            assert samples.labels("lab_proxy_info")["upstream"] == (
                "https://nginx:443" if protocol == "https" else "http://nginx:80"
            )
            toxics = network.read(project.url("toxiproxy"))
            assert {t["attributes"]["latency"] for t in toxics["nginx-tls"]} == {NETWORK_RTT_MS // 2}
            since = time.time()
            times = []
            for _ in range(6):
                started = time.monotonic()
                r = requests.get(f"{proxy}/files/tiny.txt", timeout=10)
                times.append(time.monotonic() - started)
                assert r.text == "Success!\n"
            # One round trip for the request (two with TLS: its handshake crosses Toxiproxy), and a
            # new connection each time, counted on nginx's side through Toxiproxy.
            assert min(times) >= round_trips * NETWORK_RTT_MS / 1000, (protocol, times)
            time.sleep(1.2)
            logged = nginx.parse_connections(
                project.read_file("nginx", compose.CONNECTIONS_LOG), since, time.time()
            )
            assert len(logged) == 6, logged
        # A bad value: the one-shot stops with one line naming it, and the proxy does not start.
        project.env["UPSTREAM_RTT_MS"] = "far"
        with pytest.raises(subprocess.CalledProcessError):
            project.up(Case.parse("per-call-okhttp"), network=True, timeout=60)
        log = project.compose(
            None, "logs", "--no-log-prefix", "toxiproxy-init", capture_output=True, text=True
        )
        expected = (
            "network: configuration error: UPSTREAM_RTT_MS='far' is not valid; valid values: whole milli"
        )
        assert expected in log.stdout + log.stderr, log
    finally:
        project.down()
        assert not compose.wait_gone(project), f"left behind: {project.leftovers()}"


def test_a_failed_image_build_says_why(compose_engine):
    """A build that fails in the proxy's image shows the failing step's own words, not only
    compose's 'failed to solve' (a CI run once lost Maven's reason that way)."""
    from ktor_lab.errors import LabError

    with pytest.raises(LabError) as failed:
        compose.Project(f"ktor-lab-test-{os.getpid()}-badbuild", {}).build(KTOR_VERSION="9.9.9")
    text = str(failed.value)
    assert text.startswith("docker compose build failed (exit "), text[:300]
    assert "KTOR_VERSION=9.9.9 is not in ktor-releases.tsv (known: " in text, text
