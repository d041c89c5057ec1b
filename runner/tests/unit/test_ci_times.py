"""tools/ci-times.py, which docs/testing.md's figures come from: it reads a `.ci/run` log as that
script and pytest print it, and refuses in one line a log of a run that did not finish."""

from __future__ import annotations

import json
import subprocess
import sys

from ktor_lab.paths import REPO

SCRIPT = REPO / "tools" / "ci-times.py"
LOG = """\
ci: commit 0123456789ab
============================= test session starts ==============================
============================= 499 passed in 10.18s =============================
[INFO] BUILD SUCCESS
============================= test session starts ==============================
===================== time per file (those of 6 s or more) =====================
   4.1 min  tests/test_compose_stack.py
   0.1 min  tests/test_fetch_go.py
  29.7 min  in all
================= 675 passed, 30 skipped in 1786.09s (0:29:46) =================
ci: passed in 1860 s
"""


def run(tmp_path, text: str, *args: str) -> subprocess.CompletedProcess:
    log = tmp_path / "ci.log"
    log.write_text(text)
    return subprocess.run([sys.executable, SCRIPT, str(log), *args], capture_output=True, text=True)


def test_a_finished_run_gives_its_commit_tiers_and_time_per_file(tmp_path):
    out = run(tmp_path, LOG)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "commit": "0123456789ab",
        "whole_seconds": 1860.0,
        "unit": {"passed": 499, "seconds": 10.18},
        "suite": {"passed": 675, "skipped": 30, "seconds": 1786.09, "minutes": 29.8},
        "minutes_per_file": {"test_compose_stack": 4.1, "test_fetch_go": 0.1},
    }
    assert json.loads(run(tmp_path, LOG, "--commit", "f6aac9e").stdout)["commit"] == "f6aac9e"


def test_a_run_that_did_not_finish_or_failed_is_refused_in_one_line(tmp_path):
    cut = LOG[: LOG.index("===================== time per file")]
    failed = LOG.replace("675 passed, 30 skipped", "2 failed, 673 passed, 30 skipped")
    for text, why in ((cut, "no suite summary"), (failed, "did not pass")):
        out = run(tmp_path, text)
        assert out.returncode == 1 and out.stdout == ""
        assert out.stderr.count("\n") == 1 and why in out.stderr
