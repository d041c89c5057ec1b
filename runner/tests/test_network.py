"""The network between the proxy and nginx, with real parts: Toxiproxy built from its Go module on
loopback, nginx, the proxy. The round trip is honoured, off means off, a per-call client pays for
its connections, and the connection figures say so. Without parts: unit/test_network_rules.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
import requests

from conftest import wait_until
from ktor_lab.cases import Case
from ktor_lab.metrics import scrape
from ktor_lab.network import Network
from ktor_lab.parts import nginx
from ktor_lab.stack import Stack

LAB = str(Path(sys.executable).with_name("lab"))
RTT_MS = 60
TIMES = 8


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with Stack(tmp_path_factory.mktemp("network"), java_opts=["-Xmx128m"]) as stack:
        stack.nginx()
        yield stack


def timed_gets(url: str, n: int = TIMES) -> list[float]:
    """Seconds each of `n` sequential GETs of a tiny file through the proxy took (each on a new
    connection to the proxy: the proxy's own connection to nginx is what is measured)."""
    out = []
    for _ in range(n):
        started = time.monotonic()
        r = requests.get(f"{url}/files/tiny.txt", timeout=10, headers={"Connection": "close"})
        out.append(time.monotonic() - started)
        assert r.status_code == 200 and r.text == "Success!\n"
    return out


def new_connections(lab: Stack, since: float) -> list[nginx.Connection]:
    """nginx's log of new connections since `since` (it writes its buffer within a second)."""
    time.sleep(1.2)
    return lab.connections(since, time.time())


def test_off_means_off_the_proxy_calls_nginx_itself(lab):
    proxy = lab.proxy(Case.parse("singleton-okhttp"))
    info = scrape(proxy.url).labels("lab_proxy_info")
    assert info["upstream"] == lab.upstream_url  # not Toxiproxy's port
    network_info = scrape(proxy.url).labels("lab_network_info")
    assert (network_info["rtt_ms"], network_info["network"]) == ("0", "none")
    assert lab.toxics == {} and lab.toxiproxy is None  # nothing started, nothing in the path
    timed_gets(proxy.url, 2)


def test_the_round_trip_is_honoured_and_shown(lab):
    proxy = lab.proxy(Case.parse("singleton-okhttp"), network=Network(RTT_MS, 10))
    samples = scrape(proxy.url)
    assert samples.labels("lab_network_info")["rtt_ms"] == str(RTT_MS)
    assert samples.labels("lab_network_info")["jitter_ms"] == "10"
    assert samples.labels("lab_proxy_info")["upstream"] == lab.toxiproxy.url("nginx")
    # Toxiproxy has what was asked: half the round trip each way, on the plain and the TLS proxy alike.
    for toxics in lab.toxics.values():
        latency = {t["stream"]: t["attributes"] for t in toxics if t["type"] == "latency"}
        assert latency == {
            "upstream": {"latency": RTT_MS // 2, "jitter": 5},
            "downstream": {"latency": RTT_MS // 2, "jitter": 5},
        }
    # Every request through the proxy takes at least the round trip less the jitter (its pool
    # keeps one connection: after the first, one round trip each).
    times = timed_gets(proxy.url)
    assert min(times) >= (RTT_MS - 10) / 1000, times


@pytest.mark.parametrize("protocol", ["http", "https"])
def test_a_per_call_client_pays_for_a_new_connection_on_every_request(lab, protocol):
    """Over http the request and answer cross the network once (the TCP handshake with Toxiproxy is
    local), so a per-call request takes one round trip measured and two once its new connection's
    handshake is counted (lab run: new connections x RTT). Over TLS the handshake's own messages
    cross the network: at least two round trips measured."""
    case = f"per-call-okhttp protocol {protocol} rtt {RTT_MS}"
    proxy = lab.proxy(Case.parse(case))
    since = time.time()
    times = timed_gets(proxy.url)
    conns = new_connections(lab, since)
    assert len(conns) == TIMES, conns  # one new connection per request, through Toxiproxy too
    per_request = len(conns) / TIMES
    modelled = [t * 1000 + per_request * RTT_MS for t in times]
    assert min(times) >= RTT_MS / 1000, times
    assert min(modelled) >= 2 * RTT_MS, modelled
    if protocol == "https":
        assert min(times) >= 2 * RTT_MS / 1000, times
    # The proxy closed each connection itself: they wait in TIME_WAIT on its side.
    assert wait_until(lambda: scrape(proxy.url).sum("lab_upstream_sockets", state="time_wait") >= TIMES, 5)


def test_a_singleton_keeps_its_connection_and_its_pool_shows_it(lab):
    proxy = lab.proxy(Case.parse(f"singleton-okhttp rtt {RTT_MS}"))
    timed_gets(proxy.url, 2)
    since = time.time()
    timed_gets(proxy.url)
    assert new_connections(lab, since) == []  # the pooled connection carried every request
    samples = scrape(proxy.url)
    assert samples.sum("lab_client_pool_connections", state="idle") == 1
    # What earlier proxies closed to Toxiproxy's port, still in TIME_WAIT, is not counted: its own is.
    assert samples.sum("lab_upstream_sockets", state="established") == 1
    assert samples.sum("lab_upstream_sockets", state="time_wait") == 0
    # CIO has no pool the proxy can see: no series, and its settings say so.
    cio = lab.proxy(Case.parse(f"singleton-cio rtt {RTT_MS}"))
    samples = scrape(cio.url)
    assert samples.get("lab_client_pool_connections") is None
    assert samples.labels("lab_proxy_info")["pool_metrics"] == "not exposed"


def sockets_in_time_wait_to(port: int) -> int:
    """The host's TCP sockets in TIME_WAIT whose remote port is `port`, whoever closed them."""
    waiting = [c for c in psutil.net_connections("tcp") if c.status == psutil.CONN_TIME_WAIT]
    return sum(1 for c in waiting if c.raddr and c.raddr.port == port)


def test_the_time_wait_count_is_the_proxy_s_own_whatever_ran_before_it(lab):
    """Natively the kernel's table is the host's: a proxy at 0 ms dials nginx's port as the run
    before it did, and as Toxiproxy did behind a networked run. What they closed within the last
    minute waits in TIME_WAIT on that port, and is not the new proxy's."""
    timed_gets(lab.proxy(Case.parse("per-call-okhttp")).url)
    timed_gets(lab.proxy(Case.parse(f"per-call-okhttp rtt {RTT_MS}")).url, 2)
    proxy = lab.proxy(Case.parse("per-call-okhttp"))
    left = sockets_in_time_wait_to(urlsplit(lab.upstream_url).port)
    assert left >= TIMES + 2, left  # the earlier runs' sockets are there...
    assert scrape(proxy.url).sum("lab_upstream_sockets", state="time_wait") == 0  # ...and not counted
    timed_gets(proxy.url)

    # Its own, one per request: one fewer when the kernel reuses a tuple still in TIME_WAIT for a
    # new connection (Linux does on loopback), so an earlier run's socket becomes this proxy's.
    def own() -> float:
        return scrape(proxy.url).sum("lab_upstream_sockets", state="time_wait")

    assert wait_until(lambda: own() >= TIMES - 1, 5), own()
    assert own() <= TIMES


def test_the_network_goes_when_the_next_case_has_none(lab):
    lab.proxy(Case.parse(f"singleton-okhttp rtt {RTT_MS}"))
    proxy = lab.proxy(Case.parse("singleton-okhttp"))
    assert scrape(proxy.url).labels("lab_proxy_info")["upstream"] == lab.upstream_url
    assert lab.toxics == {} and all(toxics == [] for toxics in lab.toxiproxy.set(Network()).values())


@pytest.mark.slow
def test_lab_run_shows_what_the_round_trip_costs(tmp_path):
    """`lab run --rtt 0,20`: every row names its network and its connection figures, and the
    one-dimension-changed lines compare the case with itself at 0 and 20 ms. Per-call OkHttp, which
    opens a connection per request, shows all of it; a singleton's pooled connection is
    test_a_singleton_keeps_its_connection_and_its_pool_shows_it's."""
    out = tmp_path / "results"
    r = subprocess.run(
        [LAB, "run", "--cases", "per-call-okhttp", "--rtt", "0,20", "--loads", "rate/50"]
        + ["--warmup", "0", "--duration", "5", "--windows", "1", "--forks", "1", "--aa", "none"]
        + ["--spare", "0", "--java-opts=-Xmx256m", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    runs = {run["dims"]["rtt_ms"]: run for run in results["runs"]}
    assert set(runs) == {0, 20}
    for rtt, run in runs.items():
        assert run["network"]["rtt_ms"] == rtt
        assert run["network"]["via"].startswith("toxiproxy") if rtt else run["network"]["via"] == "none"
        assert run["locust"]["failures"] == 0
        if rtt:
            assert run["locust"]["p50_ms"] >= rtt, run["locust"]
        # a window counts only what its own proxy put in TIME_WAIT: for per-call OkHttp (it closes
        # each client's connection) one per new connection
        closed, new = run["prometheus"]["time_wait_max"], run["connections"]["new"]
        assert abs(closed - new) <= 0.1 * new + 5, (rtt, closed, new)
    assert runs[20]["connections"]["per_1000_requests"] >= 900
    assert runs[20]["connections"]["connect_rtt_ms_per_request"] >= 18
    md = (out / "report.md").read_text()
    assert re.search(r"^\| per-call-okhttp ktor [\d.]+ jdk \d+ rtt 20 \| 1 \| RTT 20 ms \| ", md, re.M), md
    assert re.search(r"^- per-call-okhttp on Ktor [\d.]+, JDK \d+, RTT 0 ms -> 20 ms: p50 ms ", md, re.M), md
