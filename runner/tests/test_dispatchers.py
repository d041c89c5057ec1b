"""The client's dispatcher (CLIENT_DISPATCHER) as each engine takes it, with real proxies and nginx:
the threads the proxy runs change as said, the refusals come in one line, and the JDK's own count
of pinned virtual threads is exported. Threads are read from the kernel (/proc/PID/task/*/comm:
names cut at 15 characters), whichever JDK runs the proxy."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import requests

from ktor_lab import versions
from ktor_lab.cases import ENGINES, OWN_IO_THREADS, VIRTUAL_THREADS_JDK, Case
from ktor_lab.metrics import scrape
from ktor_lab.processes import free_port

JDK = next((j for j in versions.jdks() if int(j.major) >= VIRTUAL_THREADS_JDK), None)
needs_jdk = pytest.mark.skipif(JDK is None, reason=f"needs a JDK {VIRTUAL_THREADS_JDK}+ in /usr/lib/jvm")
IN_FLIGHT = 100  # requests at once, each DELAY_MS at nginx: a thread each where the engine blocks one
# Long enough that the first of them still waits when the last arrives: a slow machine's Python
# took more than 400 ms to send all 100 (a CI saw 82 of OkHttp's 100 threads, io:256 at 74).
DELAY_MS = 1500


def thread_names(pid: int) -> Counter:
    """The process's threads by the kernel's name for them (their first 15 characters)."""
    out = Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[(task / "comm").read_text().strip()] += 1
        except OSError:
            continue  # ended meanwhile
    return out


def okhttp_call_threads(names: Counter) -> int:
    """OkHttp's dispatcher threads: named `OkHttp Dispatcher` idle, and after the call's URL while
    they run one (`OkHttp http://...`)."""
    return sum(n for name, n in names.items() if name.startswith(("OkHttp Dispatch", "OkHttp http")))


def loaded(start_proxy, upstream, case: str, **env: str) -> tuple[Counter, dict, float | None]:
    """`case`'s proxy with IN_FLIGHT slow requests in flight: its threads at their peak (sampled
    while they wait), its lab_proxy_info, and the pinned virtual threads it counted."""
    with start_proxy(case, upstream.url, **env) as p:
        peak: Counter = Counter()
        with concurrent.futures.ThreadPoolExecutor(IN_FLIGHT) as pool:
            futures = [
                pool.submit(requests.get, f"{p.url}/delay?ms={DELAY_MS}", timeout=30)
                for _ in range(IN_FLIGHT)
            ]
            for _ in range(DELAY_MS // 100 * 2):  # bounded: samples until the requests are answered
                names = thread_names(p.service.pid)
                if sum(names.values()) > sum(peak.values()):
                    peak = names
                done, _ = concurrent.futures.wait(futures, timeout=0.1)
                if len(done) == IN_FLIGHT:
                    break
            assert all(f.result().status_code == 200 for f in futures)
        samples = scrape(p.url)
        return peak, samples.labels("lab_proxy_info"), samples.get("lab_virtual_threads_pinned_total")


@needs_jdk
def test_okhttp_on_virtual_threads_has_no_dispatcher_threads_and_counts_its_pinned(start_proxy, upstream):
    case = f"singleton-okhttp jdk {JDK.major}"
    platform, info_io, pinned_io = loaded(start_proxy, upstream, case)
    virtual, info, pinned = loaded(start_proxy, upstream, f"{case} dispatcher virtual")
    # OkHttp blocks a thread of its dispatcher per request in flight: about IN_FLIGHT of them...
    assert okhttp_call_threads(platform) >= IN_FLIGHT * 0.8, platform
    # ...which on virtual threads are none: its calls run on virtual threads, on a few carriers.
    assert okhttp_call_threads(virtual) == 0, virtual
    assert sum(virtual.values()) < sum(platform.values()) - IN_FLIGHT * 0.5, (virtual, platform)
    assert (info_io["dispatcher"], info["dispatcher"]) == ("io", "virtual")
    assert pinned_io is None and pinned is not None  # counted only where virtual threads run the client


# The engines a dispatcher applies to (cases.py: none of I/O threads of their own), but OkHttp, whose
# own dispatcher's threads the test above follows.
ON_THE_DISPATCHER = [e for e in ENGINES if e not in OWN_IO_THREADS and e != "okhttp"]


@needs_jdk
@pytest.mark.parametrize("engine", ON_THE_DISPATCHER)
def test_the_engines_on_the_dispatcher_run_their_coroutines_on_virtual_threads(engine, start_proxy, upstream):
    case = f"per-call-{engine} jdk {JDK.major}"
    platform, _, _ = loaded(start_proxy, upstream, case)
    virtual, info, pinned = loaded(start_proxy, upstream, f"{case} dispatcher virtual")
    # Ktor's IO pool (DefaultDispatcher-worker) does the engine's work on platform threads; on virtual
    # threads it is left to the server's side (Ktor's handlers), and virtual threads run on carriers
    # (ForkJoinPool-1-worker).
    assert virtual["DefaultDispatch"] < platform["DefaultDispatch"] / 2, (virtual, platform)
    assert virtual["ForkJoinPool-1-"] >= 1 and platform["ForkJoinPool-1-"] == 0, (virtual, platform)
    assert info["dispatcher"] == "virtual" and pinned is not None


def test_a_larger_io_pool_lets_per_call_cio_past_64_clients(start_proxy, upstream):
    """Per-call CIO holds one of Dispatchers.IO's threads per open client (its selector): 64 by
    default, so at IN_FLIGHT clients the pool is full; io:256 gives it more."""
    default, info_io, _ = loaded(start_proxy, upstream, "per-call-cio")
    raised, info, _ = loaded(start_proxy, upstream, "per-call-cio dispatcher io:256")
    # Fewer pool threads than clients by default (IO's 64, with Dispatchers.Default's and the workers
    # the scheduler keeps: 88 seen once on a busy CI); with io:256 a thread for about every client.
    print("io:", default["DefaultDispatch"], "io:256:", raised["DefaultDispatch"])
    assert default["DefaultDispatch"] < raised["DefaultDispatch"], (default, raised)
    assert default["DefaultDispatch"] < IN_FLIGHT, default
    assert raised["DefaultDispatch"] >= 0.9 * IN_FLIGHT, raised
    assert (info_io["io_threads"], info["io_threads"]) == ("64", "256")


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {"CLIENT_ENGINE": "apache5", "CLIENT_DISPATCHER": "virtual"},
            "its I/O reactor runs its own threads",
        ),
        ({"CLIENT_ENGINE": "okhttp", "CLIENT_DISPATCHER": "io:0"}, "CLIENT_DISPATCHER='io:0' is not valid"),
        (
            {"CLIENT_ENGINE": "okhttp", "CLIENT_DISPATCHER": "virtual"},
            "needs JDK 21 or later; this JVM is 17",
        ),
    ],
    ids=["apache5", "bad-value", "jdk-17"],
)
def test_a_dispatcher_that_cannot_apply_stops_the_proxy_in_one_line(env, message):
    jar, _ = versions.program(Case("singleton", env["CLIENT_ENGINE"]))
    java17 = versions.jdk("17").java
    r = subprocess.run(
        [java17, "-jar", str(jar)],
        env={**os.environ, "HOST": "127.0.0.1", "PORT": str(free_port()), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [line for line in r.stderr.splitlines() if line.startswith("proxy:")]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr[-1000:]
