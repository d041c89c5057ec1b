"""Where the proxy under load runs (lab run --cpus), and what a window records of it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from ktor_lab import machine


def test_cpus_auto_gives_the_proxy_the_upper_half_and_a_list_its_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: nothing to place apart")
    assert machine.cpu_sets("none") is None
    proxy, rest = machine.cpu_sets("auto")
    assert proxy | rest == set(cpus) and not proxy & rest and max(rest) < min(proxy)
    assert machine.cpu_sets(str(cpus[-1])) == (frozenset({cpus[-1]}), frozenset(cpus[:-1]))
    assert machine.cpu_sets(str(cpus[0]))[0] == {cpus[0]}
    for bad, said in (
        ("x", "give auto, none"),
        (str(cpus[-1] + 1), "give some of CPUs"),
        (f"{cpus[0]}-{cpus[-1]}", "leaving one"),
    ):
        with pytest.raises(ValueError, match=said):
            machine.cpu_sets(bad)


def test_a_process_and_every_thread_of_it_are_placed_and_a_window_reads_where():
    """pin sets each thread's own mask (a JVM's threads exist before it is placed), and its children's."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: nothing to place apart")
    code = (
        "import threading, time\n"
        "for _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        threading.Event().wait(0.5)
        machine.pin(child.pid, frozenset({cpus[0]}))
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) >= 4 and all(os.sched_getaffinity(t) == {cpus[0]} for t in tids)
        assert machine.placed(child.pid) == str(cpus[0])
        machine.pin(child.pid, frozenset(cpus))
        assert machine.placed(child.pid) == f"{cpus[0]}-{cpus[-1]}"
    finally:
        child.kill()
        child.wait()
    assert machine.placed(child.pid) == ""
