"""`lab study io`: Ktor's socket and file I/O against plain JVM I/O, with JMH (io-bench/).

The I/O study found Ktor's socket write 3-6x slower than java.net.Socket and Ktor's file
channel 20x slower than a stream. io-bench/ holds the JMH benchmarks (128 MiB written to a
loopback sink until acknowledged; a 128 MiB file read to its end; the same chunk size both
ways); this runs its jar, reads JMH's JSON and puts each Ktor figure beside its JVM reference.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

from .. import render, versions
from ..machine import java
from ..paths import REPO
from ..rundirs import results_dir
from . import common

NAME = "io"
NEEDS = "java"  # no upstream, no proxy: the jar's own benchmarks
JAR = REPO / "io-bench" / "target" / "benchmarks.jar"
# (what, Ktor's benchmark, the JVM reference)
PAIRS = [
    ("socket write", "SocketWriteBenchmark.ktorSocket", "SocketWriteBenchmark.javaSocket"),
    ("file read", "FileReadBenchmark.ktorFileChannel", "FileReadBenchmark.javaFileInputStream"),
]


def jmh(args, out_json: Path, log: Path, jar: Path = JAR) -> list[dict]:
    """JMH over io-bench's benchmarks; `jar` another release's build (lab study versions)."""
    if not jar.exists():
        raise FileNotFoundError(f"{jar.relative_to(REPO)} is missing: make build (mvn -f io-bench package)")
    argv = [
        java(),
        "-jar",
        str(jar),
        *("-p", f"size={args.size}", "-p", f"chunk={args.chunk}"),
        *("-wi", str(args.warmup_iterations), "-i", str(args.iterations)),
        *("-w", f"{args.iteration_ms}ms", "-r", f"{args.iteration_ms}ms", "-f", str(args.forks)),
        *("-rf", "json", "-rff", str(out_json)),
        "lab.iobench.",
    ]
    with log.open("w") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        r = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout)
    if r.returncode != 0 or not out_json.exists():
        raise RuntimeError(f"JMH exited with {r.returncode}; its output is in {log}")
    return json.loads(out_json.read_text())


def rows_from(results: list[dict], size: int) -> list[dict]:
    by_name = {r["benchmark"].removeprefix("lab.iobench."): r for r in results}
    rows = []
    for what, ktor, jvm in PAIRS:
        k, j = by_name[ktor]["primaryMetric"], by_name[jvm]["primaryMetric"]
        assert k["scoreUnit"] == j["scoreUnit"] == "ms/op", (k["scoreUnit"], j["scoreUnit"])
        rows.append(
            {
                "what": what,
                "ktor_ms": k["score"],
                "ktor_ms_error": _error(k),
                "jvm_ms": j["score"],
                "jvm_ms_error": _error(j),
                "ktor_mb_per_s": size / 1e6 / (k["score"] / 1000),
                "jvm_mb_per_s": size / 1e6 / (j["score"] / 1000),
                "ktor_over_jvm_time": k["score"] / j["score"],
                "jmh_version": by_name[ktor]["jmhVersion"],
                "jvm": by_name[ktor]["vmVersion"],
            }
        )
    return rows


def _error(metric: dict) -> float | None:
    """JMH's 99.9% error of the score; it writes "NaN" when there was a single iteration."""
    e = float(metric["scoreError"])
    return None if math.isnan(e) else e


def _pm(score: float, error: float | None) -> str:
    return f"{score:,.1f}" if error is None else f"{score:,.1f} ± {error:,.1f}"


COLUMNS = [
    render.Column("operation", lambda r: r["what"]),
    render.Column("JVM ms/op", lambda r: _pm(r["jvm_ms"], r["jvm_ms_error"])),
    render.Column("Ktor ms/op", lambda r: _pm(r["ktor_ms"], r["ktor_ms_error"])),
    render.Column("JVM MB/s", lambda r: r["jvm_mb_per_s"]),
    render.Column("Ktor MB/s", lambda r: r["ktor_mb_per_s"]),
    render.Column("Ktor time / JVM time", lambda r: f"{r['ktor_over_jvm_time']:.2f}x"),
]


def run(args) -> Path:
    started = time.time()
    d = results_dir(args.out, NAME)
    jar = versions.ensure_jar("io-bench", versions.release(args.ktor)) if args.ktor else JAR
    results = jmh(args, d / "jmh.json", d / "jmh.log", jar=jar)
    rows = rows_from(results, args.size)
    for r in rows:
        print(
            f"{r['what']}: JVM {r['jvm_mb_per_s']:,.0f} MB/s, Ktor {r['ktor_mb_per_s']:,.0f} MB/s "
            f"({r['ktor_over_jvm_time']:.2f}x the time)",
            flush=True,
        )
    settings = {
        "bytes per operation": f"{args.size:,}",
        "chunk bytes": args.chunk,
        "JMH": f"{args.warmup_iterations} warm-up + {args.iterations} measured iterations of "
        f"{args.iteration_ms} ms, {args.forks} fork(s), average time",
        "Ktor": args.ktor or versions.default_release().name,
        "JMH version": rows[0]["jmh_version"],
        "JVM": rows[0]["jvm"],
        "fork JVM options": "-Xmx512m",
    }
    chart = render.bars(
        "MB/s (10^6 bytes per second), higher is better",
        [r["what"] for r in rows],
        {"JVM": [r["jvm_mb_per_s"] for r in rows], "Ktor": [r["ktor_mb_per_s"] for r in rows]},
    )
    return common.write(
        d,
        NAME,
        "Ktor I/O against plain JVM I/O (JMH)",
        "lab study io " + args.argv_text,
        settings,
        rows,
        [("Per operation", common.table(COLUMNS, rows))],
        [("io-mb-per-s.svg", chart)],
        started,
    )


def add_parser(sub) -> None:
    p = sub.add_parser("io", help="JMH: 128 MiB socket write and file read, Ktor vs java.net / java.io")
    p.add_argument("--size", type=int, default=128 << 20, help="bytes per operation (default: 128 MiB)")
    p.add_argument(
        "--chunk", type=int, default=8192, help="bytes per write or read call (default: %(default)s)"
    )
    p.add_argument("--warmup-iterations", type=int, default=3, help="JMH -wi (default: %(default)s)")
    p.add_argument("--iterations", type=int, default=5, help="JMH -i (default: %(default)s)")
    p.add_argument("--iteration-ms", type=int, default=2000, help="JMH -w and -r (default: %(default)s)")
    p.add_argument("--forks", type=int, default=1, help="JMH -f (default: %(default)s)")
    p.add_argument("--ktor", default="", help="a Ktor release of ktor-releases.tsv (default: the pom's)")
    p.add_argument("--timeout", type=int, default=1800, help="most seconds for the whole JMH run")
    p.add_argument("--out", type=Path, default=None, help="results folder (default: results/study-io-<time>)")
