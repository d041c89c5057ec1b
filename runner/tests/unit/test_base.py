"""The base layer's helpers: the one wait, free ports never handed out twice, the machine's
figures from psutil, the .env reader, and the one definition of Locust's window totals shared by
the export and `lab run`."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time

import psutil

from ktor_lab import machine
from ktor_lab.parts import compose
from ktor_lab.parts.loadgen import WindowStats
from ktor_lab.processes import free_port, start_time, wait_until
from ktor_lab.results import LocustFigures


def test_wait_until_returns_the_first_true_value_or_the_last_false_one():
    calls = iter([0, [], "ready", "later"])
    assert wait_until(lambda: next(calls), timeout=5, interval=0) == "ready"
    t0 = time.monotonic()
    assert wait_until(lambda: [], timeout=0.3, interval=0.05) == []
    assert 0.3 <= time.monotonic() - t0 < 2


def test_free_ports_are_never_handed_out_twice():
    # The kernel hands a released port out again at random: 500 binds in a row repeat about ten
    # ports, and CI once started a proxy on the port a test had just chosen as "nothing listens".
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)


def test_locust_is_told_by_its_command_line_as_the_lab_starts_it_and_nothing_else_is():
    from ktor_lab.parts import loadgen

    python = "/usr/local/bin/python"
    assert machine.is_generator(
        [sys.executable, *loadgen.argv("--headless")]
    )  # a script: its interpreter first
    assert machine.is_generator([sys.executable, *loadgen.argv(sweep=True)])
    assert machine.is_generator(
        [python, "/usr/local/bin/locust", "--config", "locust/locust.conf"]
    )  # compose
    assert machine.is_generator([python, "/usr/local/bin/locust", "-f", "locust/locustfile.py", "--worker"])
    assert not machine.is_generator([python, "-m", "pytest", "tests/test_locustfile.py"])
    assert not machine.is_generator(["nginx", "-c", "/etc/locust.conf"])
    assert not machine.is_generator([python, "/usr/local/bin/locust", "--version"])
    assert not machine.is_generator([])


def test_the_generator_s_cpu_is_counted_apart_from_the_rest_of_the_lab_s():
    """A child of this process whose command line names a locustfile counts as the generator; with
    none, the generator's CPU is not known (None), not 0."""
    assert machine.cpu_sample().generator_s is None
    spin = (
        "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    )
    child = subprocess.Popen(["locust", "-c", spin, "-f", "locust/locustfile.py"], executable=sys.executable)
    try:
        for _ in range(100):  # bounded: 10 s for 0.3 s of CPU
            sample = machine.cpu_sample()
            if sample.generator_s is not None and sample.generator_s >= 0.3:
                break
            time.sleep(0.1)
        assert sample.generator_s is not None and 0.3 <= sample.generator_s < sample.lab_s
    finally:
        child.kill()
        child.wait()


def test_machine_figures_come_from_psutil():
    busy = sum(range(2_000_000))  # some CPU of this process's own
    sample = machine.cpu_sample()
    assert busy and sample.lab_s > 0 and sample.busy_s >= sample.lab_s * 0.5
    assert machine.process_cpu_seconds(os.getpid()) > 0
    # every thread's count, where psutil reads the main thread's only
    counts = machine.thread_context_switches(os.getpid())
    assert sum(counts.values()) >= psutil.Process().num_ctx_switches().voluntary
    assert machine.load_average() >= 0
    assert start_time(os.getpid()) == start_time(os.getpid()) is not None
    assert start_time(2**22 + 12345) is None


def test_the_env_file_is_read_as_compose_reads_it(tmp_path):
    (tmp_path / ".env").write_text(
        "# a comment\nPLAIN=a b\nQUOTED=\"x # not a comment\"\nSINGLE='$NOT_EXPANDED'\nEMPTY=\n"
    )
    assert compose.dotenv(tmp_path / ".env") == {
        "PLAIN": "a b",
        "QUOTED": "x # not a comment",
        "SINGLE": "$NOT_EXPANDED",
        "EMPTY": "",
    }
    assert compose.dotenv()["KTOR_VERSION"]


def test_the_window_totals_are_one_definition_for_the_export_and_the_results():
    shared = {f.name for f in dataclasses.fields(WindowStats)}
    own = {f.name for f in dataclasses.fields(LocustFigures)}
    assert own - {"rps"} <= shared, own - shared
    stats = WindowStats(
        state="running", now=110.0, start_time=100.0, last_request_timestamp=109.9, requests=500, failures=1,
        p50_ms=2.0, p95_ms=5.0, p99_ms=9.0, max_ms=20.0, avg_ms=2.5, users=10, workers=0, target_rps=50.0,
    )  # fmt: skip
    figures = LocustFigures.from_window(stats)
    assert figures.rps == 50.0 and figures.requests == 500 and figures.p99_ms == 9.0


def test_the_generator_s_share_of_a_window_is_none_unless_both_edges_saw_it_and_it_did_not_shrink():
    from ktor_lab.measure import machine_figures

    def at(generator: float | None) -> machine.CpuSample:
        return machine.CpuSample(busy_s=100.0, steal_s=0.0, lab_s=50.0, generator_s=generator)

    assert machine_figures(at(1.0), at(3.0), 10.0).generator_cores == 0.2
    assert machine_figures(at(None), at(3.0), 10.0).generator_cores is None  # Locust not seen at one edge
    assert machine_figures(at(3.0), at(1.0), 10.0).generator_cores is None  # a Locust process ended


def test_context_switches_never_run_backwards_when_threads_end():
    """A thread that switched a lot and then ended takes its count with it: the switches between
    two readings are a lower bound then, never negative (a per-call client ends its threads)."""
    switched, go = threading.Event(), threading.Event()

    def wait_often():
        for _ in range(300):
            time.sleep(0.0002)
        switched.set()
        go.wait(timeout=10)

    worker = threading.Thread(target=wait_often)
    worker.start()
    assert switched.wait(timeout=10)
    before = machine.thread_context_switches(os.getpid())
    go.set()
    worker.join()
    time.sleep(0.01)  # this thread waits once at least
    after = machine.thread_context_switches(os.getpid())
    assert sum(after.values()) < sum(before.values())  # the plain sum went backwards
    assert machine.switches_between(before, after) >= 1
