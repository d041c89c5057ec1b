"""Faults, for every engine: no desynced connection, timeouts hold, retries as set.

(That no cut body passes as whole, both ways, is test_cut_bodies.py's.)

Against the lab's fault server (ktor_lab/parts/faults.py, which logs every request it receives and how
its body ended) and real nginx. Timing is asserted relative to the configured timeouts.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import FAULT_CONNECT_TIMEOUT_MS, FAULT_REQUEST_TIMEOUT_MS, answers, scrape, wait_until
from ktor_lab.parts.raw_http import exchange, get, read_reply

REQUEST_TIMEOUT_MS = FAULT_REQUEST_TIMEOUT_MS
CONNECT_TIMEOUT_MS = FAULT_CONNECT_TIMEOUT_MS
LARGE = 1 << 20  # above the 64 KiB the proxy reads whole: the cut comes after the answer started
DOWN_SECONDS = 4  # the fault server refuses connections this long: three immediate 502s fit in it
REPEATS = 4  # truncations race with the engine's reads: each is tried several times


@pytest.fixture
def at_faults(fault_proxy):
    """The case's proxy in front of the fault server (conftest.fault_proxy, shared with
    test_cut_bodies.py); each test leaves it serving."""
    return fault_proxy


@pytest.fixture
def faulty(at_faults):
    """The engine's singleton case: how a body's fault is met is the engine's; the per-call cases
    meet the same cuts in test_cut_bodies.py."""
    if not at_faults.case.startswith("singleton"):
        pytest.skip("a body's fault is the engine's: its singleton case is tried")
    return at_faults


def test_a_short_fixed_length_body_is_a_502_before_the_answer(faulty):
    for _ in range(REPEATS):
        reply = exchange(faulty.url, get("/truncate-fixed?size=1000&sent=500"))
        assert reply.status == 502, reply
    assert requests.get(f"{faulty.url}/ok", timeout=5).text == "ok\n"


def test_a_slow_body_that_keeps_moving_is_never_cut_by_the_request_timeout(faulty):
    """The request timeout is the longest the exchange may go without progress, not its length: a
    body sent in 6 parts 0.6 s apart takes twice the 1.5 s timeout and passes whole; one whose
    parts are 3 s apart is cut (the answer had started: the connection is dropped)."""
    t0 = time.monotonic()
    reply = exchange(faulty.url, get("/trickle?size=300000&parts=6&gap=0.6"))
    took = time.monotonic() - t0
    assert (reply.status, reply.whole, len(reply.body)) == (200, True, 300000), reply
    assert took > 2 * REQUEST_TIMEOUT_MS / 1000, took
    reply = exchange(faulty.url, get("/trickle?size=300000&parts=2&gap=3"))
    assert not (reply.status == 200 and reply.whole), reply


def test_a_stall_after_the_headers_is_a_504_at_the_request_timeout(faulty):
    # (A stall before the headers, /hang: the silent upstream's test below, for every case.)
    for path in ("/hang-after-headers?size=1000", f"/hang-after-headers?size={LARGE}"):
        t0 = time.monotonic()
        reply = exchange(faulty.url, get(path))
        elapsed = time.monotonic() - t0
        assert reply.status == 504, (path, reply)
        assert 0.9 * REQUEST_TIMEOUT_MS / 1000 <= elapsed <= 3 * REQUEST_TIMEOUT_MS / 1000, (path, elapsed)


def test_get_with_a_body_is_refused_and_desyncs_nothing(at_faults, fault_server):
    """OkHttp dropped a GET's body but kept its Content-Length: nginx then swallowed the start of
    the next request on that pooled connection (400 for an unrelated caller; a request line hidden
    in a header ran). Such a request is refused for every case, and the next one is served."""
    fault_server.clear()
    for _ in range(3):
        reply = exchange(at_faults.url, get("/ok", "Content-Length: 5") + b"hello", probe=True)
        assert (reply.status, reply.closed) == (400, True)
        smuggle = "X: GET /status/418 HTTP/1.1"
        reply = exchange(at_faults.url, get("/ok", f"Content-Length: {len(smuggle)}") + smuggle.encode())
        assert reply.status == 400
        for _ in range(3):
            assert requests.get(f"{at_faults.url}/ok", timeout=5).text == "ok\n"
    assert [e["target"] for e in fault_server.log()] == ["/ok"] * 9


def test_a_refused_upstream_is_a_502_at_once_and_served_again_when_back(at_faults, fault_server):
    """While the upstream refuses connections (and has dropped those the pool held), each request
    is a short 502 well within the connect timeout, counted as a failure and logged without a
    stack trace; once it listens again the next requests are served, from the first."""
    p = at_faults
    failures_before = failed_outcomes(p)
    log_before = p.service.log.stat().st_size
    fault_server.down(DOWN_SECONDS)
    t_down = time.monotonic()
    assert wait_until(lambda: not answers(f"{fault_server.url}/_log", timeout=1), timeout=5, interval=0.05)
    for _ in range(3):
        t0 = time.monotonic()
        r = requests.get(f"{p.url}/ok", timeout=10)
        assert r.status_code == 502 and "502" in r.text and len(r.text) < 300, r.text
        assert time.monotonic() - t0 < CONNECT_TIMEOUT_MS / 1000
    assert time.monotonic() - t_down < DOWN_SECONDS, "the upstream came back before the three tries"
    assert requests.get(f"{p.url}/health", timeout=5).status_code == 200
    assert failed_outcomes(p) - failures_before == 3
    assert wait_until(lambda: answers(f"{fault_server.url}/_log", timeout=1), timeout=DOWN_SECONDS + 10)
    statuses = [requests.get(f"{p.url}/ok", timeout=5).status_code for _ in range(5)]
    assert statuses == [200] * 5
    assert p.open_clients() == (1 if p.case.startswith("singleton") else 0)
    with p.service.log.open("rb") as log:
        log.seek(log_before)
        assert b"\tat " not in log.read(), "a stack trace was logged"


def test_a_silent_upstream_is_a_504_at_the_request_timeout(at_faults):
    """Five callers at once wait on an upstream that took the request and never answers."""
    p = at_faults
    timeouts_before = p.metric("lab_upstream_requests_seconds_count", outcome="timeout")

    def one(_):
        t0 = time.monotonic()
        r = requests.get(f"{p.url}/hang", timeout=15)
        return r.status_code, time.monotonic() - t0, r.text

    with ThreadPoolExecutor(5) as pool:
        results = list(pool.map(one, range(5)))
    for status, elapsed, text in results:
        assert status == 504 and "504" in text, text
        assert 0.9 * REQUEST_TIMEOUT_MS / 1000 <= elapsed <= 3 * REQUEST_TIMEOUT_MS / 1000, elapsed
    assert p.metric("lab_upstream_requests_seconds_count", outcome="timeout") - timeouts_before == 5
    assert requests.get(f"{p.url}/ok", timeout=5).status_code == 200
    assert p.open_clients() == (1 if p.case.startswith("singleton") else 0)


def failed_outcomes(p) -> float:
    """Upstream requests that ended without an answer, whatever the engine calls the cause."""
    samples = p.metrics()
    return sum(
        samples.sum("lab_upstream_requests_seconds_count", outcome=o)
        for o in ("unreachable", "timeout", "failed", "aborted")
    )


# What the proxy says is in force (lab_proxy_info's retry_on_stale), and what the next request on
# a connection the upstream closed as it was reused gets: sent again where a retry is in force; a
# 502 where none is; no stale connection at all where the engine keeps none (CIO: one per request).
AFTER_STALE = {"on": 200, "always": 200, "off": 502, "none": 502, "n/a": 200}


@pytest.fixture
def pooled(at_faults):
    """The engine's singleton case: a per-call client is closed after its call, so no connection of
    its pool is ever reused, stale or not."""
    if not at_faults.case.startswith("singleton"):
        pytest.skip("a stale pooled connection needs a client that outlives its call: singleton only")
    return at_faults


def test_a_stale_pooled_connection_is_retried_as_the_setting_says(pooled, fault_server, start_proxy):
    """The upstream closes a keep-alive connection just as it is reused: engines with a retry send
    the request again on a new connection when CLIENT_RETRY_ON_STALE is on (the default: the
    session's proxy), and not when it is off (a proxy of its own); each proxy says which is in force."""

    def in_force(p) -> str:
        (value,) = scrape(p.url).label_values("lab_proxy_info", "retry_on_stale")
        return value

    retry = in_force(pooled)
    # on by default (CLIENT_RETRY_ON_STALE=on), where the engine has the knob
    assert retry in AFTER_STALE and retry != "off", retry
    for _ in range(3):
        assert requests.get(f"{pooled.url}/stale", timeout=5).status_code == 200
        assert requests.get(f"{pooled.url}/ok", timeout=5).status_code == AFTER_STALE[retry], retry
    if retry != "on":
        return  # no knob: none ("none", "n/a"), or the JDK's own that cannot be turned off ("always")
    with start_proxy(pooled.case, fault_server.url, CLIENT_RETRY_ON_STALE="off") as p:
        assert in_force(p) == "off"
        assert requests.get(f"{p.url}/stale", timeout=5).status_code == 200
        assert requests.get(f"{p.url}/ok", timeout=5).status_code == AFTER_STALE["off"]


@pytest.fixture(scope="module")
def guarded(upstream, start_proxy) -> Iterator:
    with start_proxy(
        "singleton-cio", upstream.url, SERVER_HEADER_TIMEOUT_MS="1000", SERVER_IDLE_TIMEOUT_MS="1500"
    ) as p:
        yield p


def test_half_sent_headers_are_closed_after_the_header_timeout_and_the_proxy_serves_on(guarded):
    host, port = guarded.url.removeprefix("http://").split(":")
    socks = []
    for _ in range(300):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(b"GET /files/tiny.txt HTTP/1.1\r\nHo")
        socks.append(s)
    t0 = time.monotonic()
    assert requests.get(f"{guarded.url}/files/tiny.txt", timeout=5).text == "Success!\n"

    def closed(s: socket.socket) -> float:
        s.settimeout(10)
        try:
            s.recv(1)
        except OSError:
            pass
        return time.monotonic() - t0

    with ThreadPoolExecutor(50) as pool:
        times = list(pool.map(closed, socks))
    for s in socks:
        s.close()
    assert min(times) >= 0.5, min(times)  # not before the timeout (1 s, less the time to open them)
    assert max(times) <= 4.0, max(times)  # all of them, soon after it


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(guarded):
    host, port = guarded.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        t0 = time.monotonic()  # the answer takes milliseconds; the idle time starts after it
        s.sendall(get("/files/tiny.txt"))
        assert read_reply(s).status == 200
        s.settimeout(10)
        assert s.recv(1) == b""
        assert 1.4 <= time.monotonic() - t0 <= 4.0


def test_a_slow_request_is_not_cut_by_the_server_timeouts(guarded):
    t0 = time.monotonic()
    r = requests.get(f"{guarded.url}/delay?ms=2500", timeout=10)  # longer than both timeouts
    assert r.status_code == 200 and time.monotonic() - t0 >= 2.5


def test_fault_server_logs_what_it_received(fault_server):
    fault_server.clear()
    assert requests.put(f"{fault_server.url}/upload", data=b"abc", timeout=5).json() == {
        "bytes": 3,
        "complete": True,
    }
    assert wait_until(lambda: len(fault_server.log()) == 1)
    [entry] = fault_server.log()
    assert (entry["method"], entry["target"], entry["body_bytes"], entry["body_complete"]) == (
        "PUT",
        "/upload",
        3,
        True,
    )


@pytest.mark.parametrize("cut", ["", "&cut=mid"], ids=["at-a-chunks-start", "mid-chunk"])
def test_fault_server_cuts_a_chunked_body_where_it_says(fault_server, cut):
    host, port = fault_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(get(f"/truncate-chunked?size=100000&sent=40000{cut}"))
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head
    sizes, data = [], 0
    while body:
        line, _, body = body.partition(b"\r\n")
        sizes.append(int(line, 16))
        data += len(body[: sizes[-1]])
        body = body[sizes[-1] + 2 :]
    assert 0 not in sizes and data == 40000  # never the last chunk; all of SENT
    # 16 KiB chunks; the last one's size line says one byte more than follows when cut mid-chunk
    assert sizes == [16384, 16384, 7232 + (1 if cut else 0)], sizes
