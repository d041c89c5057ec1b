"""`lab study streaming`: large bodies up and down through the proxy, per engine.

The upload study sent 15 MB to S3 and found OkHttp 5x slower than CIO. Here each engine
(singleton, fair limits, a fresh proxy with a small heap) moves the upstream's 15 MB and
100 MB files down (GET /files/N.bin) and up (PUT /upload, the same file from disk with its
Content-Length), every body checked by SHA-256 against nginx's manifest or the sink's
answer. The same transfers straight to nginx are the reference: they show what the
measuring client itself manages. Per transfer: MB/s (10^6 bytes), the proxy's highest heap
used (sampled every 100 ms from its /metrics) and its CPU seconds (process counter).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import requests

from .. import render, versions
from ..backends import Backend
from ..cases import BY_FIELD, HTTP1_ONLY, Case, engine_list
from ..commands import options
from ..parts import nginx
from . import machinery

DIRECT = "nginx direct"
DIRECTIONS = ("download", "upload")
CHUNK = 1 << 20
# The upstream's files by the unit of their names: 15m is 15 MiB (nginx/docker-entrypoint.d/40-lab-files.sh).
UNITS = {"k": 1 << 10, "m": 1 << 20}
# The slowest a transfer should go, in MB/s (10^6 bytes), for a dry run's estimate: the slowest
# measured was CIO's 15 MiB upload over HTTPS at 64 MB/s (docs/studies/protocols.md), 95 MB/s over
# plain http (docs/studies/streaming.md); half of the slowest.
TRANSFER_MIN_MB_PER_S = 30
# Seconds a transfer takes beyond its bytes: a fresh connection, the proxy's heap and CPU read
# before and after it.
TRANSFER_OVERHEAD_S = 0.3


@contextlib.contextmanager
def probed(url: str | None) -> Iterator[dict[str, float | None]]:
    """What the proxy at `url` uses while the block runs (a transfer): `heap_max`, the highest heap
    used (sampled every 100 ms from its /metrics), and `cpu_seconds`, its CPU seconds; both filled
    once the block ends, both None without a proxy (nginx direct)."""
    used: dict[str, float | None] = {"heap_max": None, "cpu_seconds": None}
    if url is None:
        yield used
        return

    def read() -> tuple[float, float]:
        heap, cpu_ns = machinery.proxy_figures(
            url, ("jvm_memory_used_bytes", {"area": "heap"}), ("process_cpu_time_ns_total", {})
        )
        return heap, cpu_ns / 1e9

    heap_max, cpu_start = read()
    stop = threading.Event()

    def sample() -> None:
        nonlocal heap_max
        while not stop.wait(0.1):
            heap_max = max(heap_max, read()[0])

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield used
    finally:
        stop.set()
        thread.join()
        heap, cpu = read()
        used.update(heap_max=max(heap_max, heap), cpu_seconds=cpu - cpu_start)


def label(size: str) -> str:
    """`15m` -> `15 MiB` (the upstream's files are binary sizes)."""
    return size[:-1] + {"k": " KiB", "m": " MiB"}[size[-1]]


def size_bytes(size: str) -> int:
    """`15m` -> 15 MiB in bytes; a ValueError for a name no upstream file could have."""
    if size[:-1].isdigit() and size[-1:] in UNITS:
        return int(size[:-1]) * UNITS[size[-1]]
    raise ValueError(f"--sizes: {size!r} is not a file's size, such as 1k, 100k, 1m, 15m or 100m")


def download(base: str, name: str) -> tuple[int, str, float]:
    """(bytes, sha256, seconds) of GET /files/name, read in 1 MiB pieces."""
    h = hashlib.sha256()
    size = 0
    t0 = time.perf_counter()
    with requests.get(f"{base}/files/{name}", stream=True, timeout=120) as r:
        r.raise_for_status()
        for piece in r.iter_content(CHUNK):
            h.update(piece)
            size += len(piece)
    return size, h.hexdigest(), time.perf_counter() - t0


def upload(base: str, path: Path) -> tuple[int, str, float]:
    """(bytes, sha256, seconds) of PUT /upload with the file as body; the sink's own count and hash."""
    t0 = time.perf_counter()
    with path.open("rb") as f:
        r = requests.put(f"{base}/upload", data=f, timeout=120)
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    answer = r.json()
    return answer["bytes"], answer["sha256"], elapsed


@dataclass(frozen=True)
class Transfers:
    """What each target gets: every size both ways, `repeats` measured transfers after `warmup`
    unmeasured rounds (this study's options; the protocols study passes its own)."""

    sizes: tuple[str, ...]
    repeats: int
    warmup: int

    @classmethod
    def parse(cls, sizes: str, repeats: int, warmup: int) -> Transfers:
        """The transfers; a ValueError for a size that is not a file's size (1k, 15m, ...)."""
        made = cls(tuple(s.strip() for s in sizes.split(",") if s.strip()), repeats, warmup)
        for size in made.sizes:
            size_bytes(size)
        return made

    def planned_seconds(self) -> float:
        """The most these transfers should take through one target: every size down and up, in
        `warmup` unmeasured rounds and `repeats` measured ones, each its bytes at
        TRANSFER_MIN_MB_PER_S plus TRANSFER_OVERHEAD_S."""
        each = sum(size_bytes(s) / 1e6 / TRANSFER_MIN_MB_PER_S + TRANSFER_OVERHEAD_S for s in self.sizes)
        return (self.warmup + self.repeats) * 2 * each


def warm_up(base: str, files: Path, plan: Transfers) -> None:
    """Unmeasured transfers of every size both ways: a cold proxy's first bodies run interpreted."""
    for _ in range(plan.warmup):
        for size in plan.sizes:
            download(base, f"{size}.bin")
            upload(base, files / f"{size}.bin")


@dataclass
class Transfer:
    """One transfer: its time, its rate, whether its body arrived intact, what the proxy used."""

    seconds: float
    mb_per_s: float
    intact: bool
    heap_max_bytes: float | None
    cpu_seconds: float | None


@dataclass
class TransferRow:
    """Every transfer of one size in one direction through one target, and their median."""

    target: str  # DIRECT or an engine
    size: str
    bytes: int
    direction: str
    runs: list[Transfer]
    mb_per_s: float
    mb_per_s_min: float
    mb_per_s_max: float
    intact: bool
    heap_max_mib: float | None
    cpu_seconds: float | None
    of_direct: float | None = None  # filled by the report, beside nginx direct's same cell

    @classmethod
    def from_runs(
        cls, target: str, size: str, bytes: int, direction: str, runs: list[Transfer], proxied: bool
    ) -> TransferRow:
        """The transfers' row: their median rate and its range, and (`proxied`) what the proxy used."""
        rates = [r.mb_per_s for r in runs]
        return cls(
            target, size, bytes, direction, runs, statistics.median(rates), min(rates), max(rates),
            intact=all(r.intact for r in runs),
            heap_max_mib=max(r.heap_max_bytes / (1 << 20) for r in runs) if proxied else None,
            cpu_seconds=statistics.median(r.cpu_seconds for r in runs) if proxied else None,
        )  # fmt: skip


@dataclass(frozen=True)
class Target:
    """One run of the plan: every transfer through one target, nginx direct or an engine's proxy."""

    name: str  # DIRECT or an engine's case, e.g. `singleton-okhttp protocol h2`
    transfers: Transfers
    case: Case | None = None  # None: nginx direct

    KIND: ClassVar[str] = "transfer"  # its dry run's line
    EACH: ClassVar[str] = "nginx direct and each engine, every size both ways"

    def planned_seconds(self) -> float:
        """The most it should take: its transfers, and an engine's fresh proxy (PROXY_START_S)."""
        return self.transfers.planned_seconds() + (0 if self.name == DIRECT else machinery.PROXY_START_S)


def plan(args: argparse.Namespace) -> list[Target]:
    """The targets: nginx direct over http (what the measuring client itself manages), then each
    engine (singleton) over each protocol it speaks (h2 not for CIO and Apache 4)."""
    transfers = Transfers.parse(args.sizes, args.repeats, args.warmup)
    d = BY_FIELD["protocol"]
    protocols = d.values(getattr(args, d.dest))
    cases = [
        Case("singleton", engine, protocol=protocol)
        for protocol in protocols
        for engine in engine_list(args.engines)
        if not (protocol == "h2" and engine in HTTP1_ONLY)
    ]
    if not cases:
        raise ValueError("--protocols: no engine of --engines speaks h2 (CIO and Apache 4 do not)")
    one = protocols == ["http"]
    return [
        Target(DIRECT, transfers),
        *(Target(c.engine if one else f"{c.engine} {c.protocol}", transfers, c) for c in cases),
    ]


def measure(backend: Backend, target: Target, args: argparse.Namespace) -> list[TransferRow]:
    files = nginx.shared_files_dir()
    if target.case is None:
        return transfers(target.name, backend.upstream_url, None, files, target.transfers)
    with machinery.proxy_up(backend, target.case) as url:
        return transfers(target.name, url, url, files, target.transfers)


def transfers(
    target: str, base: str, probe_url: str | None, files: Path, plan: Transfers
) -> list[TransferRow]:
    """Every size both ways through `base` (the proxy at `probe_url`, or nginx direct), each body
    checked against the upstream's manifest: a row per size and direction."""
    manifest = json.loads((files / "manifest.json").read_text())
    warm_up(base, files, plan)
    rows = []
    for size in plan.sizes:
        name, path = f"{size}.bin", files / f"{size}.bin"
        if name not in manifest:
            raise ValueError(f"--sizes: no {name} upstream; it serves {', '.join(sorted(manifest))}")
        want = manifest[name]
        for direction in DIRECTIONS:
            runs = []
            for _ in range(plan.repeats):
                with probed(probe_url) as used:
                    got, sha, secs = download(base, name) if direction == "download" else upload(base, path)
                intact = got == want["bytes"] and sha == want["sha256"]
                runs.append(Transfer(secs, got / secs / 1e6, intact, used["heap_max"], used["cpu_seconds"]))
            rows.append(
                TransferRow.from_runs(
                    target, size, want["bytes"], direction, runs, proxied=probe_url is not None
                )
            )
    return rows


def progress(r: TransferRow) -> str:
    return f"{r.target:13} {r.direction:8} {r.size:>5}: {r.mb_per_s:7.1f} MB/s, intact {r.intact}"


COLUMNS = [
    render.Column("through", lambda r: r.target),
    render.Column("MB/s (median)", lambda r: r.mb_per_s, 1),
    render.Column("range", lambda r: f"{r.mb_per_s_min:,.0f}-{r.mb_per_s_max:,.0f}"),
    render.Column("of direct", lambda r: r.of_direct, 2),
    render.Column("proxy heap max MiB", lambda r: r.heap_max_mib, 0),
    render.Column("proxy CPU s", lambda r: r.cpu_seconds, 2),
    render.Column("checksums", lambda r: "all match" if r.intact else "MISMATCH"),
]


def report(rows: list[TransferRow], args: argparse.Namespace) -> machinery.Report:
    for r in rows:
        ref = next(x for x in rows if x.target == DIRECT and (x.size, x.direction) == (r.size, r.direction))
        r.of_direct = r.mb_per_s / ref.mb_per_s
    sizes = args.sizes.split(",")
    targets = list(dict.fromkeys(r.target for r in rows))
    tables = [
        (
            f"{way}, {label(size)}",
            machinery.table(COLUMNS, [r for r in rows if (r.size, r.direction) == (size, way)]),
        )
        for size in sizes
        for way in DIRECTIONS
    ]
    charts = []
    for way in DIRECTIONS:
        series = {
            label(z): [machinery.find(rows, "mb_per_s", target=t, size=z, direction=way) for t in targets]
            for z in sizes
        }
        title = f"MB/s per {way} (median of {args.repeats})"
        charts.append((f"streaming-{way}.svg", render.bars(title, targets, series)))
    settings = {
        "Ktor": versions.default_release().name,  # the proxy jar's (the pom's)
        "sizes": args.sizes,
        "repeats": args.repeats,
        "unmeasured rounds first": args.warmup,
        "lifetime": "singleton",
        "limits": "fair (CLIENT_MAX_CONNECTIONS=1000)",
        "proxy JVM options": args.java_opts,
        "client": "Python requests, 1 MiB reads, SHA-256 of every body",
    }
    return machinery.Report("Streaming: large bodies up and down through the proxy", settings, tables, charts)


def add_options(p: argparse.ArgumentParser) -> None:
    machinery.add_engines(p)
    options.add_dimension(
        p, BY_FIELD["protocol"], default="http", more="; between the proxy and nginx (nginx direct: http)"
    )
    p.add_argument(
        "--sizes", default="15m,100m", help="upstream files: 1k, 100k, 1m, 15m, 100m (default: %(default)s)"
    )
    p.add_argument("--repeats", type=int, default=3, help="transfers per cell (default: %(default)s)")
    p.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="unmeasured rounds of every transfer first (default: %(default)s)",
    )
    p.add_argument("--java-opts", default="-Xmx256m", help="proxy JVM options (default: %(default)s)")


STUDY = machinery.Study(
    name="streaming",
    help="15 MB and 100 MB up and down per engine: MB/s, heap, CPU, checksums",
    add_options=add_options,
    plan=plan,
    parts=machinery.proxies,
    measure=measure,
    report=report,
    progress=progress,
    claim="An upload study sent 15 MB to S3 and found OkHttp 5x slower than CIO; the time went into reading "
    "the file in 4 KB chunks, not into the network.",
)
