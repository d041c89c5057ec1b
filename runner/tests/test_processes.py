"""The lab's child processes: a `lab` killed at any moment leaves none of them behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from conftest import marked_processes, wait_until
from ktor_lab.processes import busy_cores

# Starts Services (each a `sleep`, as lab up starts its parts) one after another, saying each.
STARTER = r"""
import sys
from pathlib import Path
from ktor_lab.processes import Service
run_dir = Path(sys.argv[1])
for i in range(200):
    Service(f"part-{i}", ["sleep", "60"], run_dir / f"part-{i}.log")
    print(i, flush=True)
"""


def test_a_lab_killed_while_it_starts_its_parts_leaves_none_of_them(tmp_path: Path):
    """SIGKILL can land between a part's start and the moment the guardian hears of it (CI found a
    proxy's JVM left behind by `lab up` killed as it started the proxy). Tried where that race
    lives: both cores busy, the kill at a random moment among the starts, 15 times."""
    rng = random.Random(7)
    left: list[int] = []
    with busy_cores(2, tmp_path):
        for attempt in range(15):
            mark = uuid.uuid4().hex
            run_dir = tmp_path / f"try-{attempt}"
            proc = subprocess.Popen(
                [sys.executable, "-c", STARTER, str(run_dir)],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "LAB_TEST_TRY": mark},
            )
            try:
                # Into the loop (the guardian is up), then a kill at a random moment of it.
                assert proc.stdout.readline().strip() == "0"
                wait_until(lambda: False, timeout=rng.uniform(0, 0.3), interval=0.01)
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            proc.stdout.close()
            # The guardian ends what it knows of: TERM, then KILL after 5 s.
            wait_until(lambda m=mark: not marked_processes("LAB_TEST_TRY", m), timeout=15, interval=0.2)
            survivors = marked_processes("LAB_TEST_TRY", mark)
            for pid, _ in survivors:
                os.kill(pid, signal.SIGKILL)  # ours: they carry this try's marker
            left += survivors
    assert not left, f"{len(left)} parts outlived their killed lab: {left}"
