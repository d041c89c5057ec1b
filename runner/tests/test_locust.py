"""The lab's Locust (locust/): real Locust runs against real nginx on loopback, a few seconds each."""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from conftest import answers, scrape, wait_until
from ktor_lab.cases import SCENARIOS  # noqa: E402  (read from the locustfile itself)
from ktor_lab.parts import loadgen
from ktor_lab.processes import Service, free_port, local_url


def headless(host: str, *options: str, seconds: int = 4, sweep: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        loadgen.argv("--headless", "-H", host, "-t", f"{seconds}s", "--json", *options, sweep=sweep),
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )


def stats(run: subprocess.CompletedProcess) -> dict[str, dict]:
    """Locust's --json output: {name: entry}."""
    return {e["name"]: e for e in json.loads(run.stdout)}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_runs_against_nginx_without_failures(upstream, scenario):
    run = headless(
        upstream.url,
        "--scenario",
        scenario,
        "-u",
        "8",
        "-r",
        "8",
        "--wait-min",
        "0",
        "--wait-max",
        "0.05",
        "--delay-ms",
        "200",
        "--large-size",
        "1m",
        "--upload-size",
        "100k",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    entries = stats(run)
    assert entries, run.stderr[-2000:]
    assert sum(e["num_requests"] for e in entries.values()) > 0
    assert sum(e["num_failures"] for e in entries.values()) == 0, run.stderr[-2000:]
    expected = {"mix": {"static-small", "static-large", "upload", "slow"}}.get(scenario, {scenario})
    assert set(entries) <= expected
    assert f"scenario={scenario}" in run.stderr  # the model in force is in the output


def test_a_class_named_on_the_command_line_wins_over_the_scenario(upstream):
    run = headless(
        upstream.url, "SlowUser", "--scenario", "upload", "--delay-ms", "50", "-u", "2", "-r", "2", seconds=2
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert set(stats(run)) == {"slow"}
    assert "scenario=slow" in run.stderr


class WrongDigestSink(BaseHTTPRequestHandler):
    """An upload sink that counts right and hashes wrong, as a corrupting proxy would look."""

    def do_PUT(self):  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = {"bytes": len(body), "sha256": hashlib.sha256(body + b"x").hexdigest()}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_upload_detects_a_corrupted_digest():
    server = ThreadingHTTPServer(("127.0.0.1", 0), WrongDigestSink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run = headless(
            f"http://127.0.0.1:{server.server_port}",
            "--scenario",
            "upload",
            "-u",
            "2",
            "-r",
            "2",
            "--wait-min",
            "0",
            "--wait-max",
            "0.1",
            "--upload-size",
            "1k",
            seconds=3,
        )
    finally:
        server.shutdown()
    entry = stats(run)["upload"]
    assert entry["num_requests"] > 0
    assert entry["num_failures"] == entry["num_requests"]
    assert "digest mismatch" in run.stderr


def test_rate_model_holds_the_target_rate(upstream):
    run = headless(
        upstream.url, "--load-model", "rate", "--target-rps", "300", "-u", "30", "-r", "30", seconds=6
    )
    entry = stats(run)["static-small"]
    rps = entry["num_requests"] / 6
    assert 0.9 * 300 <= rps <= 1.1 * 300, rps
    assert "fixed rate, 300 requests/s" in run.stderr


def test_closed_model_rate_is_users_over_wait(upstream):
    run = headless(
        upstream.url,
        "--load-model",
        "closed",
        "-u",
        "20",
        "-r",
        "20",
        "--wait-min",
        "0.5",
        "--wait-max",
        "0.5",
        seconds=6,
    )
    rps = stats(run)["static-small"]["num_requests"] / 6
    assert 0.8 * 40 <= rps <= 1.1 * 40, rps  # 20 users / (0.5 s + ~1 ms)
    assert "closed loop, wait 0.5-0.5 s" in run.stderr


def test_sweep_steps_the_rate_and_reports_a_capacity(upstream):
    run = headless(
        upstream.url,
        "--sweep-start-rps",
        "50",
        "--sweep-step-rps",
        "50",
        "--sweep-step-seconds",
        "3",
        "--sweep-max-rps",
        "150",
        "--sweep-users",
        "20",
        seconds=30,
        sweep=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "model=sweep" in run.stderr
    assert "step 0: target 50 rps" in run.stderr
    assert "lab sweep: reached --sweep-max-rps; capacity at least 150 rps" in run.stderr


@pytest.mark.parametrize(
    "options,message",
    [
        (
            ["--scenario", "nope"],
            "--scenario: invalid choice: 'nope' (choose from 'static-small', 'static-large', 'upload'",
        ),
        (
            ["--load-model", "open"],
            "--load-model: invalid choice: 'open' (choose from 'closed', 'rate', 'sweep')",
        ),
        (["--load-model", "rate"], "--load-model rate needs --target-rps > 0"),
        (["--load-model", "sweep"], "--load-model sweep needs the shape"),
        (["--wait-min", "3", "--wait-max", "1"], "need 0 <= min <= max"),
        (
            ["--large-size", "2g"],
            "--large-size: invalid choice: '2g' (choose from '1k', '100k', '1m', '15m', '100m')",
        ),
    ],
    ids=["scenario", "model", "rate-without-target", "sweep-without-shape", "wait", "size"],
)
def test_bad_settings_give_a_clear_error(options, message):
    run = headless("http://127.0.0.1:9", *options, seconds=1)
    assert run.returncode == 2
    assert message in run.stderr


def test_export_parses_and_equals_locusts_own_stats(upstream, tmp_path):
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    svc = Service(
        "locust",
        loadgen.argv(
            "--autostart",
            "--autoquit",
            "20",
            "-t",
            "4s",
            "-u",
            "10",
            "-r",
            "10",
            "--wait-min",
            "0",
            "--wait-max",
            "0.05",
            "-H",
            upstream.url,
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--lab-case",
            "direct",
        ),
        tmp_path / "locust.log",
    )
    try:
        assert wait_until(lambda: loadgen.run_finished(web), timeout=30), svc.tail()
        own = {e["name"]: e for e in requests.get(f"{web}/stats/requests", timeout=5).json()["stats"]}
        samples = scrape(web)
    finally:
        svc.stop()
    n = own["static-small"]["num_requests"]
    assert n > 0
    labels = {"name": "static-small", "method": "GET"}
    assert samples.sum("locust_requests_total", **labels) == n
    assert samples.sum("locust_failures_total", **labels) == own["static-small"]["num_failures"]
    assert samples.sum("locust_response_time_seconds_count", **labels) == n
    assert samples.sum("locust_response_time_seconds_bucket", le="+Inf", **labels) == n
    assert samples.sum("locust_response_time_seconds_bucket", le="0.001", **labels) <= n
    assert samples.sum("locust_lab_info", scenario="static-small", load_model="closed", case="direct") == 1
    assert samples.sum("locust_cpu_peak_percent", node="local") > 0
    assert samples.get("locust_lab_generator_saturated") is not None
    # The lab's own histograms (lab_latency): every request from its send, and in the closed model
    # (no schedule) from its "intended" start alike; no start late.
    for start in ("sent", "intended"):
        assert samples.sum("locust_lab_latency_seconds_count", start=start) == n
        assert samples.sum("locust_lab_latency_seconds_bucket", start=start, le="+Inf") == n
        assert 0 < samples.sum("locust_lab_latency_seconds_bucket", start=start, le="0.01") <= n
    assert samples.sum("locust_lab_starts_total", kind="all") == n
    assert samples.sum("locust_lab_starts_total", kind="late") == 0


def test_master_and_two_workers_aggregate_in_the_export(upstream, tmp_path):
    """The master's settings reach the workers, and the master's export holds both workers' work."""
    port = free_port()
    web = local_url(port)
    # loadgen.start gives the workers no scenario or wait options of their own: those come
    # from the master.
    services = loadgen.start(
        tmp_path,
        "locust",
        port,
        ["-H", upstream.url, "--autostart", "--autoquit", "20", "-t", "5s", "-u", "10", "-r", "10"]
        + ["--scenario", "upload", "--upload-size", "1k", "--wait-min", "0", "--wait-max", "0"],
        workers=2,
    )
    master, workers = services[0], services[1:]
    try:
        assert wait_until(lambda: loadgen.run_finished(web), timeout=40), master.tail()
        own = {e["name"]: e for e in requests.get(f"{web}/stats/requests", timeout=5).json()["stats"]}
        samples = scrape(web)
    finally:
        for s in reversed(services):
            s.stop()
    assert samples.sum("locust_workers") == 2
    worker_nodes = samples.label_values("locust_cpu_peak_percent", "node") - {"master"}
    assert len(worker_nodes) == 2, worker_nodes
    assert set(own) == {"upload", "Aggregated"}, own.keys()
    n = own["upload"]["num_requests"]
    assert n > 10 * 5 * 2, n  # with a 1-2 s wait it would be about 10 a second
    assert own["upload"]["num_failures"] == 0
    assert samples.sum("locust_requests_total", name="upload") == n
    # Each worker's latencies reached the master with its stats: as many as Locust counted.
    assert samples.sum("locust_lab_latency_seconds_count", start="sent") == n
    for w in workers:
        assert "Traceback" not in w.tail(200)


def test_a_scenario_chosen_in_the_web_ui_is_the_one_that_runs(upstream, tmp_path):
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    svc = Service(
        "locust-ui",
        loadgen.argv("-H", upstream.url, "--web-host", "127.0.0.1", "--web-port", str(port)),
        tmp_path / "ui.log",
    )
    try:
        assert wait_until(lambda: answers(web) or not svc.alive(), timeout=30) and svc.alive(), svc.tail()
        # What the UI's start form sends, with the lab's custom parameters changed.
        form = {
            "user_count": "4",
            "spawn_rate": "4",
            "host": upstream.url,
            "scenario": "slow",
            "delay_ms": "50",
            "wait_min": "0",
            "wait_max": "0.01",
        }
        assert requests.post(f"{web}/swarm", data=form, timeout=5).json()["success"]
        assert wait_until(lambda: scrape(web).sum("locust_requests_total", name="slow") >= 20, timeout=20)
        requests.get(f"{web}/stop", timeout=5)
        own = {e["name"] for e in requests.get(f"{web}/stats/requests", timeout=5).json()["stats"]}
        samples = scrape(web)
    finally:
        svc.stop()
    assert own == {"slow", "Aggregated"}
    assert samples.sum("locust_lab_info", scenario="slow", delay_ms="50") == 1


def test_headless_run_writes_csv_and_html(upstream, tmp_path):
    run = headless(
        upstream.url,
        "-u",
        "2",
        "-r",
        "2",
        "--csv",
        str(tmp_path / "run"),
        "--html",
        str(tmp_path / "report.html"),
        seconds=2,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "run_stats.csv").read_text().count("static-small") >= 1
    assert "static-small" in (tmp_path / "report.html").read_text()


def test_the_web_ui_refuses_other_origins_and_listens_on_loopback(tmp_path):
    """A page on another site must not start, stop or reset a run through the operator's browser;
    locust.conf keeps the UI on 127.0.0.1 when Locust is run by hand."""
    import psutil

    port = free_port()
    web = f"http://127.0.0.1:{port}"
    svc = Service(
        "locust-ui", loadgen.argv("-H", "http://127.0.0.1:9", "--web-port", str(port)), tmp_path / "ui.log"
    )
    try:
        assert wait_until(lambda: answers(web) or not svc.alive(), timeout=30) and svc.alive(), svc.tail()
        listening = {
            c.laddr.ip
            for c in psutil.Process(svc.pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN
        }
        assert listening == {"127.0.0.1"}, listening
        form = {"user_count": "1", "spawn_rate": "1", "host": "http://127.0.0.1:9"}
        evil = {"Origin": "http://evil.example"}
        r = requests.post(f"{web}/swarm", data=form, headers=evil, timeout=5)
        assert r.status_code == 403
        preflight = requests.options(
            f"{web}/swarm", headers={**evil, "Access-Control-Request-Method": "POST"}, timeout=5
        )
        assert preflight.status_code == 403
        assert "Access-Control-Allow-Origin" not in preflight.headers
        cross_site = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
        assert requests.post(f"{web}/stop", headers=cross_site, timeout=5).status_code == 403
        assert requests.get(f"{web}/lab/stats", timeout=5).json()["state"] == "ready"
        # The UI's own page, and tools that send no Origin, are served.
        same = {"Origin": web}
        assert requests.post(f"{web}/swarm", data=form, headers=same, timeout=5).json()["success"]
        assert requests.post(f"{web}/stop", timeout=5).ok
    finally:
        svc.stop()


def start_form(host: str) -> dict[str, str]:
    """What Locust's start form posts for a short run of 2 users at `host`."""
    return {"user_count": "2", "spawn_rate": "2", "host": host, "wait_min": "0", "wait_max": "0.05"}


def test_with_a_password_every_route_but_metrics_asks_for_the_login(upstream, tmp_path):
    """locust/lab_guard.py in a real Locust (the stacks set LAB_PASSWORD_FILE to their secret):
    anonymous and wrong logins are refused, user lab with the password drives a run, Prometheus'
    /metrics stays open; a start aimed at another host is refused with Locust's answer and runs nothing."""
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    secret = tmp_path / "lab-password"
    secret.write_text("s3cret-of-the-test\n")
    svc = Service(
        "locust-login",
        loadgen.argv("-H", upstream.url, "--web-host", "127.0.0.1", "--web-port", str(port)),
        tmp_path / "ui.log",
        env={"LAB_PASSWORD_FILE": str(secret)},
    )
    login = ("lab", "s3cret-of-the-test")
    try:
        assert wait_until(lambda: answers(f"{web}/metrics") or not svc.alive(), timeout=30), svc.tail()
        form = start_form(upstream.url)
        anonymous = requests.post(f"{web}/swarm", data=form, timeout=5)
        assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].startswith("Basic ")
        for path in ("/", "/lab/stats", "/stats/requests", "/lab/proxy-metrics"):
            assert requests.get(f"{web}{path}", timeout=5).status_code == 401, path
        assert requests.get(f"{web}/", auth=("lab", "wrong"), timeout=5).status_code == 401
        assert requests.get(f"{web}/", auth=("admin", login[1]), timeout=5).status_code == 401
        assert requests.get(f"{web}/metrics", timeout=5).status_code == 200
        # another host: refused in words (what the UI's form shows), before anything starts
        elsewhere = {**form, "host": "http://192.0.2.1:8080"}
        refused = requests.post(f"{web}/swarm", data=elsewhere, auth=login, timeout=5).json()
        assert refused["success"] is False, refused
        assert refused["message"].startswith("refused: http://192.0.2.1:8080 is not the lab's proxy")
        assert "LAB_ALLOWED_HOSTS" in refused["message"]
        client = loadgen.LocustWeb(web, auth=login)
        assert client.stats().state == "ready"
        # the target's /metrics as the master reads them (lab swarm run's window edges): here the
        # target is nginx, which has none, and its answer is passed on as a failure
        with pytest.raises(requests.HTTPError) as read:
            client.proxy_metrics(timeout=10)
        assert read.value.response.status_code == 502 and "nginx" in read.value.response.text
        # the lab's own calls, with the login
        client.swarm(upstream.url, 2, 2, wait_min=0, wait_max=0.05)
        assert wait_until(lambda: client.stats().requests >= 10, timeout=20)
        client.stop()
        assert client.stats().failures == 0
        assert "lab: the web UI asks for a login (user lab)" in svc.log.read_text()
    finally:
        svc.stop()


def test_a_worker_s_users_refuse_a_host_that_is_not_the_lab_s(upstream, tmp_path):
    """The last check, in every process that loads: a worker whose own settings do not allow the
    master's host makes no request (here the master allows a loopback port the worker does not)."""
    port, master_port = free_port(), free_port()
    web = f"http://127.0.0.1:{port}"
    master = Service(
        "locust-master",
        loadgen.argv(
            "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port),
            "--expect-workers", "1", "-H", upstream.url, "--web-host", "127.0.0.1", "--web-port", str(port),
        ),
        tmp_path / "master.log",
    )  # fmt: skip
    # A worker as the stacks start one: its UI address not on loopback, its own host another port.
    worker = Service(
        "locust-worker",
        loadgen.argv(
            "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port),
            "--web-host", "0.0.0.0", "-H", "http://127.0.0.1:9",
        ),
        tmp_path / "worker.log",
    )  # fmt: skip
    try:
        client = loadgen.LocustWeb(web)
        assert wait_until(lambda: answers(f"{web}/metrics") and client.stats().workers == 1, timeout=60)
        client.swarm(upstream.url, 2, 2, wait_min=0, wait_max=0.05)
        assert wait_until(lambda: "lab: refused to load" in worker.log.read_text(), timeout=20), worker.tail()
        time.sleep(4)  # a worker reports every 3 s
        assert client.stats().requests == 0
        assert f"refused to load: {upstream.url} is not the lab's proxy" in worker.log.read_text()
        client.stop()
    finally:
        worker.stop()
        master.stop()


def test_the_ui_behind_the_login_shows_why_a_start_at_another_host_is_refused(upstream, tmp_path, browser):
    """In Chromium, logged in as the stacks' users are (HTTP Basic auth): the page and its calls
    work, and a start whose host is not the lab's shows the refusal's message in the form."""
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    svc = Service(
        "locust-ui-login",
        loadgen.argv("-H", upstream.url, "--web-host", "127.0.0.1", "--web-port", str(port)),
        tmp_path / "ui.log",
        env={"LAB_PASSWORD": "ui-secret-of-the-test"},
    )
    try:
        assert wait_until(lambda: answers(f"{web}/metrics") or not svc.alive(), timeout=30), svc.tail()
        context = browser.new_context(
            http_credentials={"username": "lab", "password": "ui-secret-of-the-test"}
        )
        page = context.new_page()
        page.goto(web + "/")
        page.locator("input[name=userCount]").fill("1")
        page.locator("input[name=spawnRate]").fill("1")
        page.locator("input[name=host]").fill("http://192.0.2.1:8080")
        page.get_by_role("button", name="Start").click()
        page.get_by_text("refused: http://192.0.2.1:8080 is not the lab's proxy", exact=False).wait_for(
            timeout=10_000
        )
        assert loadgen.LocustWeb(web, auth=("lab", "ui-secret-of-the-test")).stats().state == "ready"
        context.close()
    finally:
        svc.stop()


class Listener:
    """A loopback port that counts the connections it accepts and answers each request with
    `answer` (bytes) or, by default, nothing (a listener the load must never reach)."""

    def __init__(self, answer: bytes = b""):
        import socket

        self.accepted = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(self.answer)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def test_no_attribute_a_caller_sets_sends_the_load_elsewhere(upstream, tmp_path):
    """As an attacker would, through the UI's HTTP only, on a Locust as `lab up` runs it: /user
    with a forward proxy, default headers or redirects is refused, naming the keys; a start then
    loads the lab's upstream alone, and the listener the proxy settings named is never reached.
    A page that rebinds its name to 127.0.0.1 (Host and Origin its own) cannot start a run."""
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    elsewhere = Listener()
    svc = Service(
        "locust-doors",
        loadgen.argv("-H", upstream.url, "--web-host", "127.0.0.1", "--web-port", str(port)),
        tmp_path / "ui.log",
        env=loadgen.NO_LOGIN,
    )
    try:
        assert wait_until(lambda: answers(f"{web}/metrics") or not svc.alive(), timeout=30), svc.tail()
        for sneaky in (
            {"proxy_host": "127.0.0.1", "proxy_port": elsewhere.port},
            {"default_headers": {"Host": "elsewhere.example"}},
            {"max_redirects": 30, "insecure": False},
        ):
            r = requests.post(f"{web}/user", json={"user_class_name": "StaticSmallUser", **sneaky}, timeout=5)
            body = r.json()
            assert body.get("success") is False, (sneaky, r.status_code, body)
            assert all(key in body["message"] for key in sneaky), body
        rebound = {
            "Host": f"rebind.attacker.example:{port}",
            "Origin": f"http://rebind.attacker.example:{port}",
        }
        form = start_form(upstream.url)
        assert requests.post(f"{web}/swarm", data=form, headers=rebound, timeout=5).status_code == 403
        assert (
            requests.post(
                f"{web}/user", json={"user_class_name": "StaticSmallUser"}, headers=rebound, timeout=5
            ).status_code
            == 403
        )
        client = loadgen.LocustWeb(web)
        assert client.stats().state == "ready"  # the rebound start ran nothing
        client.swarm(upstream.url, 2, 2, wait_min=0, wait_max=0.05)
        assert wait_until(lambda: client.stats().requests >= 20, timeout=20)
        client.stop()
        assert client.stats().failures == 0 and elsewhere.accepted == 0
    finally:
        svc.stop()
        elsewhere.close()


REDIRECT_CHECK = """
import sys
import lab_guard
from locust.contrib.fasthttp import FastHttpSession
from locust.event import EventHook

lab, target = sys.argv[1], sys.argv[2]
guard = lab_guard.Guard(allowed=[lab_guard.origin(lab)])
forward = {"proxy_host": "127.0.0.1", "proxy_port": int(target.rsplit(":", 1)[1])}
for name, more in (("redirect", {"max_redirects": 5}), ("forward proxy", forward)):
    session = FastHttpSession(lab, request_event=EventHook(), user=None, max_retries=0, **more)
    lab_guard.check_connections(session, guard)
    try:
        session.client.urlopen(lab + "/files/tiny.txt")
        print(name, "followed")
    except lab_guard.LoadRefused as e:
        print(name, "refused:", e)
"""


def test_a_redirect_or_a_forward_proxy_the_guard_does_not_admit_is_never_reached(tmp_path):
    """Each user's session checks every connection it opens (lab_guard.check_connections), a
    redirect's too: the lab's host answers 302 to another port, and that port is never reached;
    nor is a forward proxy. In a process of its own: Locust patches the interpreter (gevent)."""
    import sys

    target = Listener()
    location = f"http://127.0.0.1:{target.port}/x"
    redirecting = Listener(
        f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode()
    )
    lab = f"http://127.0.0.1:{redirecting.port}"
    try:
        r = subprocess.run(
            [sys.executable, "-c", REDIRECT_CHECK, lab, f"http://127.0.0.1:{target.port}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        lines = r.stdout.splitlines()
        assert lines[0].startswith(
            f"redirect refused: http://127.0.0.1:{target.port} is not the lab's proxy"
        ), r.stdout
        assert lines[1].startswith("forward proxy refused: a forward proxy (proxy_host)"), r.stdout
        assert (redirecting.accepted, target.accepted) == (1, 0)
    finally:
        target.close()
        redirecting.close()
