"""Latency from the intended start sees a stall that the time from the send misses (issue 82): real
Locust at a fixed rate through the real proxy to real nginx, the proxy stopped (SIGSTOP) for 300 ms
every 2 s, and the same run without the stops as the reference measured beside it."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from lab_latency import merged, percentile_ms

from conftest import wait_until
from ktor_lab.parts import loadgen
from ktor_lab.processes import free_port, local_url

RATE, USERS, SECONDS = 400, 4, 12
STALL_S, EVERY_S = 0.3, 2.0


def stalled(pid: int, stop: threading.Event) -> int:
    """SIGSTOP `pid` for STALL_S every EVERY_S until `stop`; the stalls made (bounded by the run)."""
    made = 0
    while not stop.wait(EVERY_S - STALL_S) and made < SECONDS:
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(STALL_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        made += 1
    return made


def measure(proxy_url: str, tmp_path, name: str, pid: int | None, warm_s: float = 2) -> dict:
    port = free_port()
    web = loadgen.LocustWeb(local_url(port))
    options = ["-H", proxy_url, "--load-model", "rate", "--target-rps", str(RATE)]
    services = loadgen.start(tmp_path, name, port, options)
    stop, stalls = threading.Event(), []
    try:
        web.swarm(proxy_url, USERS, USERS, load_model="rate", target_rps=RATE)
        assert wait_until(lambda: web.stats().requests > 50, timeout=30), services[0].tail()
        time.sleep(warm_s)  # the JIT's first compiles out of the measured seconds
        web.reset()
        thread = None
        if pid is not None:
            thread = threading.Thread(target=lambda: stalls.append(stalled(pid, stop)))
            thread.start()
        time.sleep(SECONDS)
        stop.set()
        if thread is not None:
            thread.join()
        s = web.stats()
        web.stop()
    finally:
        stop.set()
        for svc in services:
            svc.stop()
    intended, sent = merged([s.latency_intended]), merged([s.latency_sent])
    return {
        "intended_p99": percentile_ms(intended, 99),
        "sent_p99": percentile_ms(sent, 99),
        "sent_max": percentile_ms(sent, 100),
        "requests": s.requests,
        "sent": sent.get_total_count(),
        "starts": s.starts,
        "missed": s.missed_starts,
        "late": s.late_starts,
        "stalls": stalls[0] if stalls else 0,
    }


@pytest.mark.slow
def test_the_intended_start_sees_a_stall_the_send_misses(upstream, start_proxy, tmp_path):
    with start_proxy("singleton-okhttp", upstream.url) as proxy:
        calm = measure(proxy.url, tmp_path / "calm", "locust-calm", None, warm_s=20)
        stall = measure(proxy.url, tmp_path / "stall", "locust-stall", proxy.service.pid)
    print(f"calm {calm}\nstalled {stall}")
    assert stall["stalls"] >= SECONDS / EVERY_S - 1
    # Every request Locust counted is in the histogram from the send; every start it was meant to
    # make, sent or not, in the one from the intended start.
    for run in (calm, stall):
        assert run["sent"] == run["requests"] and run["starts"] == run["requests"] + run["missed"]
    # The stalls held requests for most of STALL_S: the send's maximum sees one...
    assert stall["sent_max"] >= STALL_S * 1000 * 0.8
    # ...but at 4 users and 100 requests a second each, at most 4 of some 700 sent in a cycle wait
    # through a stall: under 1%, so the p99 from the send stays near the calm run's, while some 15%
    # of the starts fall in a stall, and the p99 from the intended start is most of one.
    assert stall["missed"] > 20 * stall["stalls"]
    assert stall["sent_p99"] < STALL_S * 1000 / 3
    assert stall["intended_p99"] >= STALL_S * 1000 / 2
    assert stall["intended_p99"] > 3 * stall["sent_p99"]
    assert calm["intended_p99"] < STALL_S * 1000 / 3
