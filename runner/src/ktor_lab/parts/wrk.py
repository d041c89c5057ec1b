"""wrk, the fixed-connection generator of `lab bench`: one run, its figures as a dict."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

REPORT_SCRIPT = Path(__file__).with_name("wrk-report.lua")


def missing() -> str | None:
    return None if shutil.which("wrk") else "wrk is missing: apt-get install wrk"


def run(url: str, connections: int, threads: int, seconds: int) -> dict:
    """`wrk` against `url`; requests, rps, p50/p99/max in µs and every kind of error."""
    out = subprocess.run(
        [
            "wrk",
            "-t",
            str(threads),
            "-c",
            str(connections),
            "-d",
            f"{seconds}s",
            "--timeout",
            "10s",
            "-s",
            str(REPORT_SCRIPT),
            url,
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    ).stdout
    r = json.loads(next(ln for ln in out.splitlines() if ln.startswith("{")))
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    r["errors"] = (
        r["connect_errors"] + r["read_errors"] + r["write_errors"] + r["timeouts"] + r["non_2xx_3xx"]
    )
    return r
