"""prometheus/: the config as compose uses it, and a real Prometheus scraping the real parts natively."""

from __future__ import annotations

import http.server
import math
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from conftest import wait_until
from ktor_lab.metrics import query, scalar
from ktor_lab.parts import grafana, loadgen
from ktor_lab.parts import prometheus as prom
from ktor_lab.paths import REPO
from ktor_lab.processes import Service, free_port


def test_config_passes_promtool_as_compose_uses_it():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    r = subprocess.run(
        [promtool, "check", "config", str(REPO / "prometheus" / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def value(base: str, q: str, at: float | None = None) -> float:
    v = scalar(base, q, at)
    assert v is not None, f"empty result for {q}"
    return v


@dataclass
class Observed:
    """A Prometheus that scraped the proxy, Locust and nginx's exporter under steady load.

    `at` is a moment with a full 10 s of steady load before it: queries are evaluated there.
    """

    base: str
    at: float


@pytest.fixture(scope="module")
def observed(upstream, start_proxy, tmp_path_factory) -> Iterator[Observed]:
    run = tmp_path_factory.mktemp("observed")
    # OkHttp: one of the engines that expose their pool, so the dashboard's pool panel has data too.
    with start_proxy("singleton-okhttp", upstream.url) as proxy:
        services: list[Service] = []
        try:
            exporter_port, locust_port, prom_port = free_port(), free_port(), free_port()
            services.append(
                prom.start_nginx_exporter(run, exporter_port, f"{upstream.status_url}/stub_status")
            )
            services.append(
                Service(
                    "locust",
                    loadgen.argv(
                        "--autostart",
                        "--autoquit",
                        "60",
                        "-t",
                        "40s",
                        "-u",
                        "20",
                        "-r",
                        "20",
                        "--load-model",
                        "rate",
                        "--target-rps",
                        "100",
                        "-H",
                        proxy.url,
                        "--web-host",
                        "127.0.0.1",
                        "--web-port",
                        str(locust_port),
                        "--lab-case",
                        "singleton-okhttp",
                    ),
                    run / "locust.log",
                )
            )
            targets = {
                "proxy": proxy.url.removeprefix("http://"),
                "locust": f"127.0.0.1:{locust_port}",
                "nginx": f"127.0.0.1:{exporter_port}",
            }
            services.append(prom.start(run, prom_port, targets, scrape_interval="1s"))
            base = f"http://127.0.0.1:{prom_port}"

            assert wait_until(lambda: len(query(base, "up == 1")) == 3, timeout=30), query(base, "up")
            assert wait_until(lambda: bool(query(base, "rate(locust_requests_total[10s]) > 50")), timeout=30)
            time.sleep(12)  # a full 10 s window of steady load, plus a scrape
            yield Observed(base, time.time() - 1)
        finally:
            for s in reversed(services):
                s.stop()


@pytest.mark.slow
def test_prometheus_scrapes_proxy_locust_and_nginx(observed):
    base, at = observed.base, observed.at
    # What the dashboards ask for, in short: every query answers, with data.
    for q in [
        'sum by (engine, lifetime) (rate(ktor_http_server_requests_seconds_count{status="200"}[10s]))',
        "histogram_quantile(0.95, sum by (le) (rate(ktor_http_server_requests_seconds_bucket[10s])))",
        "histogram_quantile(0.99, sum by (le, engine, outcome) "
        '(rate(lab_upstream_requests_seconds_bucket{outcome="success"}[10s])))',
        "histogram_quantile(0.5, sum by (le) (rate(locust_response_time_seconds_bucket[10s])))",
        "lab_threads_active_unparked",
        "jvm_threads_live_threads",
        'jvm_threads_states_threads{state="runnable"}',
        "rate(process_cpu_time_ns_total[10s])",
        "process_files_open_files",
        'sum(jvm_memory_used_bytes{area="heap"})',
        "lab_clients_opened_total",
        "lab_proxy_info",
        "locust_users",
        "locust_cpu_percent",
        "locust_lab_generator_saturated",
        "locust_lab_info",
        "nginx_connections_active",
        "rate(nginx_http_requests_total[10s])",
        'lab_network_info{network="none", rtt_ms="0"}',
        'lab_client_pool_connections{state="idle"}',
        'lab_upstream_sockets{state="established"}',
    ]:
        assert query(base, q, at), f"no data for {q}"

    # The generator's rate and the proxy's, as Prometheus sees them, agree.
    sent = value(base, "sum(rate(locust_requests_total[10s]))", at)
    served = value(base, 'sum(rate(ktor_http_server_requests_seconds_count{status="200"}[10s]))', at)
    # The rate is the counter's own increase over those 10 s, and no more than the load's target
    # (100 rps; on a busy machine Locust may send fewer, so the floor is relative, not 80 rps).
    counted = value(base, "sum(locust_requests_total)", at) - value(
        base, "sum(locust_requests_total)", at - 10
    )
    assert 0 < sent <= 120 and abs(counted / 10 - sent) <= 0.15 * sent, (sent, counted)
    assert abs(served - sent) <= 0.15 * sent, (sent, served)
    assert value(base, 'lab_proxy_info{case="singleton-okhttp"}', at) == 1
    # One pooled connection to nginx (the pool keeps it), none in TIME_WAIT.
    assert value(base, 'sum(lab_upstream_sockets{state="established"})', at) >= 1


def variable_values(base: str, variable: dict) -> list[str]:
    """The values Grafana offers for a `label_values(metric, label)` variable."""
    m = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["definition"])
    assert m, f"variable {variable['name']}: unsupported query {variable['definition']}"
    body = requests.get(f"{base}/api/v1/label/{m[2]}/values", params={"match[]": m[1]}, timeout=5).json()
    assert body["status"] == "success", body
    return body["data"]


@pytest.mark.slow
@pytest.mark.parametrize("path", grafana.dashboards(), ids=lambda p: p.name)
def test_every_dashboard_panel_query_returns_data(observed, path):
    dashboard = grafana.dashboards()[path]
    variables = dashboard["templating"]["list"]
    offered = {v["name"]: variable_values(observed.base, v) for v in variables}
    assert offered == {"engine": ["okhttp"], "lifetime": ["singleton"]}
    # Each variable as one value, then as "All" (the allValue regex).
    choices = [
        {name: values[0] for name, values in offered.items()},
        {v["name"]: v["allValue"] for v in variables},
    ]
    # Grafana's $__rate_interval for a 1 s scrape is 4 s at least; 10 s gives every rate 10 points.
    # The hosts' row has data on Docker Swarm only (test_swarm_stack.py asks it there).
    queries = [
        q for q in grafana.panel_queries(dashboard) if not any(m in q.expr for m in grafana.SWARM_ONLY)
    ]
    assert len(queries) >= 30
    for values in choices:
        for q in queries:
            expr = grafana.substitute(q.expr, values, "10s")
            result = query(observed.base, expr, observed.at)
            assert result, f"{q.panel} {q.ref_id}: no data for {expr}"
            numbers = [float(r["value"][1]) for r in result]
            assert any(math.isfinite(n) for n in numbers), f"{q.panel} {q.ref_id}: only NaN for {expr}"


def test_a_relative_results_folder_still_finds_the_proxies_by_their_file(tmp_path, monkeypatch):
    """`lab run --out results/x` (or a study's) renders Prometheus' config into a relative folder;
    Prometheus reads a discovery file's relative path from the config's folder, so the lab must
    hand it one that holds from there. Prometheus scrapes itself as the `proxy` job here."""
    monkeypatch.chdir(tmp_path)
    run = Path("results") / "x" / "logs"
    run.mkdir(parents=True)
    targets = run / "proxy-targets.json"
    port = free_port()
    prom.write_targets(targets, [f"127.0.0.1:{port}"])
    service = prom.start(run, port, {}, scrape_interval="1s", files={"proxy": targets})
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: bool(query(base, 'up{job="proxy"} == 1')), timeout=30), (
            run / "prometheus.log"
        ).read_text()[-2000:]
    finally:
        service.stop()


class CountedTarget:
    """A /metrics on loopback that counts the scrapes that reach it (when, by time.time())."""

    def __init__(self):
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                hits.append(time.time())
                body = b"lab_gate_test 1\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_the_scrape_gate_switches_the_scraped_proxy_at_its_next_scrape_and_spares_the_others(tmp_path):
    """lab run's proxies are Prometheus targets through the gate (prometheus.ScrapeGate), each under
    its own instance: the one opened is scraped, the others never reached, and opening another
    reaches it at its next scrape with the discovery file left as it was (a change of it would
    wait for Prometheus' discovery, up to 10 s)."""
    a, b = CountedTarget(), CountedTarget()
    gate = prom.ScrapeGate(timeout_s=5)
    targets = tmp_path / "proxy-targets.json"
    port = free_port()
    service = None
    try:
        gate.open_only([a.address])
        prom.write_targets(targets, [a.address, b.address], gate)
        written = targets.stat().st_mtime_ns
        service = prom.start(tmp_path, port, {}, scrape_interval="1s", files={"proxy": targets})
        base = f"http://127.0.0.1:{port}"

        def up(instance: str) -> float | None:
            return scalar(base, f'up{{job="proxy", instance="{instance}"}}')

        assert wait_until(lambda: up(a.address) == 1 and up(b.address) == 0, timeout=30)
        assert not b.hits, "a closed proxy was reached"
        switched = time.time()
        gate.open_only([b.address])
        prom.write_targets(targets, [a.address, b.address], gate)  # what lab run writes: the same
        assert targets.stat().st_mtime_ns == written, "the discovery file was rewritten for nothing"

        def since_switch(instance: str) -> list[float]:
            """Its `up` samples of the scrapes that began after the switch."""
            result = query(base, f'up{{job="proxy", instance="{instance}"}}[60s]')
            return [float(v) for t, v in (result[0]["values"] if result else []) if float(t) > switched]

        assert wait_until(lambda: len(since_switch(b.address)) >= 3, timeout=30)
        # Every scrape begun after the switch reached b (the first one too: no discovery delay)
        # and none reached a (at most one begun before it may land just after).
        assert since_switch(b.address) and set(since_switch(b.address)) == {1.0}, since_switch(b.address)
        assert set(since_switch(a.address)) == {0.0}, since_switch(a.address)
        assert len([t for t in a.hits if t > switched]) <= 1, "a closed proxy was reached"
    finally:
        if service is not None:
            service.stop()
        gate.close()
        a.close()
        b.close()
