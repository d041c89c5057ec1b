"""The warm-up with a real proxy: its JIT compiler threads get the CPU first while it warms and their
own nice when measured. (The rule itself, on a scripted load and a fake /proc: unit/test_warmup_rules.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import requests

from ktor_lab.warmup import JIT_NICE, WINDOW_S, warm_up


def compiler_nices(pid: int) -> list[int]:
    """The nice value of each C1/C2 compiler thread of `pid` (/proc/PID/task/TID/stat, field 19)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().startswith(("C1 Compiler", "C2 Compiler")):
            out.append(int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]))
    return out


def test_the_jit_is_served_first_while_warming_and_at_its_own_nice_when_measured(start_proxy, upstream):
    with start_proxy("singleton-cio", upstream.url) as proxy:
        pid = proxy.service.pid
        own = os.getpriority(os.PRIO_PROCESS, pid)  # the JVM's, inherited from this session
        assert compiler_nices(pid) and set(compiler_nices(pid)) == {own}
        during = []

        def window(seconds: int) -> float:
            during.append(compiler_nices(pid))
            assert requests.get(proxy.url + "/files/tiny.txt", timeout=10).text == "Success!\n"
            return 100.0

        w = warm_up(window, 3 * WINDOW_S, pid)
        after = compiler_nices(pid)
    assert w.window_rates == [100.0] * len(during) and len(during) >= 2
    if os.geteuid() == 0:  # CI and this machine: root may lower a nice value
        assert w.jit_nice == JIT_NICE < 0
        assert all(set(nices) == {JIT_NICE} for nices in during)
    else:
        assert w.jit_nice is None and all(set(nices) == {own} for nices in during)
    assert set(after) == {own}
