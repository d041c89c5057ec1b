"""`lab study io`: Ktor's socket and file I/O against plain JVM I/O, with JMH (bench/io-bench/).

The I/O study found Ktor's socket write 3-6x slower than java.net.Socket and Ktor's file
channel 20x slower than a stream. bench/io-bench/ holds the JMH benchmarks (128 MiB written to a
loopback sink until acknowledged; a 128 MiB file read to its end; the same chunk size both
ways); this runs its jar, reads JMH's JSON and puts each Ktor figure beside its JVM reference.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .. import render, versions
from ..machine import java
from ..paths import MODULE_FOLDERS, REPO
from . import machinery

JAR = REPO / MODULE_FOLDERS["io-bench"] / "target" / "benchmarks.jar"
# (what, Ktor's benchmark, the JVM reference)
PAIRS = [
    ("socket write", "SocketWriteBenchmark.ktorSocket", "SocketWriteBenchmark.javaSocket"),
    ("file read", "FileReadBenchmark.ktorFileChannel", "FileReadBenchmark.javaFileInputStream"),
]
# The benchmarks a run measures: "lab.iobench." matches io-bench's four, those of PAIRS.
BENCHMARKS = len(PAIRS) * 2
# Seconds JMH's own JVM takes to start, list the benchmarks and write its JSON.
JMH_START_S = 2
# Seconds each fork takes beyond its iterations: its JVM's start, its trial set-up (a 128 MiB file
# written, a loopback sink opened) and each iteration's last operation finishing past its time
# (the io study's run: 66.5 s for 64 s of iterations in 4 forks).
FORK_EXTRA_S = 5


@dataclass(frozen=True)
class Jmh:
    """One JMH run over io-bench's benchmarks: its parameters and the jar (a release's build)."""

    size: int
    chunk: int = 8192
    warmup_iterations: int = 3
    iterations: int = 5
    iteration_ms: int = 2000
    forks: int = 3
    timeout: int = 1800
    release: str = ""  # "" for the default build

    KIND: ClassVar[str] = "JMH"  # its dry run's line
    EACH: ClassVar[str] = "io-bench's socket write and file read, Ktor and JVM"

    def planned_seconds(self) -> float:
        """The most it should take: JMH_START_S, then per benchmark (BENCHMARKS) forks x ((warm-up +
        measured iterations) x iteration time + FORK_EXTRA_S); never past the timeout, where it is
        stopped. A release's jar built first, when missing, is not counted."""
        iterations = (self.warmup_iterations + self.iterations) * self.iteration_ms / 1000
        return min(self.timeout, JMH_START_S + BENCHMARKS * self.forks * (iterations + FORK_EXTRA_S))


@dataclass
class OperationRow:
    what: str
    ktor_ms: float
    ktor_ms_error: float | None
    jvm_ms: float
    jvm_ms_error: float | None
    ktor_mb_per_s: float
    jvm_mb_per_s: float
    ktor_over_jvm_time: float
    jmh_version: str
    jvm: str


def measure(d: Path, run: Jmh, args: argparse.Namespace) -> list[OperationRow]:
    """JMH over io-bench's benchmarks (a release's jar built first when missing or older than its
    sources), its JSON and log in `d`; its figures as rows."""
    jar = versions.ensure_jar("io-bench", versions.release(run.release)) if run.release else JAR
    if not jar.exists():
        raise FileNotFoundError(
            f"{jar.relative_to(REPO)} is missing: make build (mvn -f bench/io-bench package)"
        )
    out_json, log = d / "jmh.json", d / "jmh.log"
    argv = [
        java(),
        "-jar",
        str(jar),
        *("-p", f"size={run.size}", "-p", f"chunk={run.chunk}"),
        *("-wi", str(run.warmup_iterations), "-i", str(run.iterations)),
        *("-w", f"{run.iteration_ms}ms", "-r", f"{run.iteration_ms}ms", "-f", str(run.forks)),
        *("-rf", "json", "-rff", str(out_json)),
        "lab.iobench.",
    ]
    with log.open("w") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        r = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=run.timeout)
    if r.returncode != 0 or not out_json.exists():
        raise RuntimeError(f"JMH exited with {r.returncode}; its output is in {log}")
    return rows_from(json.loads(out_json.read_text()), run.size)


def rows_from(results: list[dict], size: int) -> list[OperationRow]:
    by_name = {r["benchmark"].removeprefix("lab.iobench."): r for r in results}
    rows = []
    for what, ktor, jvm in PAIRS:
        k, j = by_name[ktor]["primaryMetric"], by_name[jvm]["primaryMetric"]
        assert k["scoreUnit"] == j["scoreUnit"] == "ms/op", (k["scoreUnit"], j["scoreUnit"])
        rows.append(
            OperationRow(
                what=what,
                ktor_ms=k["score"],
                ktor_ms_error=_error(k),
                jvm_ms=j["score"],
                jvm_ms_error=_error(j),
                ktor_mb_per_s=size / 1e6 / (k["score"] / 1000),
                jvm_mb_per_s=size / 1e6 / (j["score"] / 1000),
                ktor_over_jvm_time=k["score"] / j["score"],
                jmh_version=by_name[ktor]["jmhVersion"],
                jvm=by_name[ktor]["vmVersion"],
            )
        )
    return rows


def _error(metric: dict) -> float | None:
    """JMH's 99.9% error of the score; it writes "NaN" when there was a single iteration."""
    e = float(metric["scoreError"])
    return None if math.isnan(e) else e


def _pm(score: float, error: float | None) -> str:
    return f"{score:,.1f}" if error is None else f"{score:,.1f} ± {error:,.1f}"


COLUMNS = [
    render.Column("operation", lambda r: r.what),
    render.Column("JVM ms/op", lambda r: _pm(r.jvm_ms, r.jvm_ms_error)),
    render.Column("Ktor ms/op", lambda r: _pm(r.ktor_ms, r.ktor_ms_error)),
    render.Column("JVM MB/s", lambda r: r.jvm_mb_per_s),
    render.Column("Ktor MB/s", lambda r: r.ktor_mb_per_s),
    render.Column("Ktor time / JVM time", lambda r: f"{r.ktor_over_jvm_time:.2f}x"),
]


def settings_of(args: argparse.Namespace) -> Jmh:
    return Jmh(
        args.size, args.chunk, args.warmup_iterations, args.iterations, args.iteration_ms, args.forks,
        args.timeout, args.ktor,
    )  # fmt: skip


def plan(args: argparse.Namespace) -> list[Jmh]:
    """The JMH run; a release is checked by name here and built only when measured (a dry run
    builds and downloads nothing)."""
    run = settings_of(args)
    if run.release:
        versions.release(run.release)
    return [run]


def progress(r: OperationRow) -> str:
    return (
        f"{r.what}: JVM {r.jvm_mb_per_s:,.0f} MB/s, Ktor {r.ktor_mb_per_s:,.0f} MB/s "
        f"({r.ktor_over_jvm_time:.2f}x the time)"
    )


def report(rows: list[OperationRow], args: argparse.Namespace) -> machinery.Report:
    run = settings_of(args)
    settings = {
        "bytes per operation": f"{run.size:,} ({run.size / 2**20:g} MiB)",
        "chunk bytes": f"{run.chunk:,} ({run.chunk / 2**10:g} KiB)",
        "JMH": f"{run.warmup_iterations} warm-up + {run.iterations} measured iterations of "
        f"{run.iteration_ms} ms, {run.forks} fork(s), average time",
        "±": "JMH's score error, the half-width of its 99.9% confidence interval",
        "Ktor": run.release or versions.default_release().name,
        "JMH version": rows[0].jmh_version,
        "JVM": rows[0].jvm,
        "fork JVM options": "-Xmx512m",
    }
    chart = render.bars(
        "MB/s (10^6 bytes per second), higher is better",
        [r.what for r in rows],
        {"JVM": [r.jvm_mb_per_s for r in rows], "Ktor": [r.ktor_mb_per_s for r in rows]},
    )
    return machinery.Report(
        "Ktor I/O against plain JVM I/O (JMH)",
        settings,
        [("Per operation", machinery.table(COLUMNS, rows))],
        [("io-mb-per-s.svg", chart)],
    )


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, default=128 << 20, help="bytes per operation (default: 128 MiB)")
    p.add_argument(
        "--chunk", type=int, default=8192, help="bytes per write or read call (default: %(default)s)"
    )
    p.add_argument("--warmup-iterations", type=int, default=3, help="JMH -wi (default: %(default)s)")
    p.add_argument("--iterations", type=int, default=5, help="JMH -i (default: %(default)s)")
    p.add_argument("--iteration-ms", type=int, default=2000, help="JMH -w and -r (default: %(default)s)")
    # Three JVMs by default: one fork's ratios moved between runs of the same jar (1.51x and 2.64x
    # for the socket write), and the lab replicates where the variance is.
    p.add_argument("--forks", type=int, default=3, help="JMH -f, the JVMs (default: %(default)s)")
    p.add_argument("--ktor", default="", help="a Ktor release of ktor-releases.tsv (default: the pom's)")
    p.add_argument("--timeout", type=int, default=1800, help="most seconds for the whole JMH run")


STUDY = machinery.Study(
    name="io",
    help="JMH: 128 MiB socket write and file read, Ktor vs java.net / java.io",
    add_options=add_options,
    plan=plan,
    parts=machinery.nothing,
    measure=measure,
    report=report,
    progress=progress,
    needs="java",  # no upstream, no proxy: the jar's own benchmarks
    claim="An I/O study found Ktor's socket write about 3-6x slower than a plain JVM socket, and reading a "
    "file through Ktor's channel about 20x slower than through a stream.",
)
