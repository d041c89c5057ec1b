"""`lab study protocols`: what TLS and HTTP/2 to the upstream change, per engine and lifetime.

Two parts, each a run of the lab's own machinery:

- `matrix`: every case over plain HTTP/1.1, HTTP/1.1 over TLS and HTTP/2 over TLS (h2 only where
  the engine speaks it: not CIO, not Apache 4) at a fixed rate (equal work, so CPU, threads and
  latency compare) and at capacity (users that never wait): a `lab run` matrix with the protocol
  as a dimension, its report (with one-dimension-changed lines) in matrix/. Every row carries new
  upstream connections and full TLS handshakes per 1,000 requests, from nginx's side.
- `uploads`: the upload study as it ran (15 MB to S3 over HTTPS, OkHttp on HTTP/2 against CIO on
  HTTP/1.1): 15 MiB and 100 MiB up and down through singleton OkHttp over h2 and CIO over https,
  beside both over plain http, every body checked by SHA-256 (the streaming study's transfers).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from .. import render, verdict
from ..cases import BY_FIELD, ENGINES, HTTP1_ONLY, LIFETIMES, PROTOCOLS, Case, engine_list
from ..commands import options
from ..parts import nginx
from ..plan import Plan, parse_load
from ..results import Results
from . import machinery, streaming

# The upload study's pair, as it ran, and each over plain http beside it.
UPLOAD_TARGETS = (
    Case("singleton", "okhttp", protocol="h2"),
    Case("singleton", "cio", protocol="https"),
    Case("singleton", "okhttp"),
    Case("singleton", "cio"),
)


def matrix_cases(args: argparse.Namespace) -> list[Case]:
    """Every engine and lifetime over every protocol it can speak, protocols outermost."""
    engines = engine_list(args.engines)
    lifetimes = args.lifetimes.split(",")
    if bad := [x for x in lifetimes if x not in LIFETIMES]:
        raise ValueError(f"--lifetimes: {bad[0]!r} is not one of {', '.join(LIFETIMES)}")
    protocols = args.protocols.split(",")
    if bad := [p for p in protocols if p not in PROTOCOLS]:
        raise ValueError(f"--protocols: {bad[0]!r} is not one of {', '.join(PROTOCOLS)}")
    return [
        Case(lifetime, engine, protocol=protocol)
        for protocol in protocols
        for lifetime in lifetimes
        for engine in engines
        if not (protocol == "h2" and engine in HTTP1_ONLY)
    ]


def matrix_plan(args: argparse.Namespace) -> Plan:
    loads = [parse_load(x) for x in (args.rate_load, args.capacity_load)]
    return machinery.runs_plan(args, matrix_cases(args), ["static-small"], loads)


@dataclass(frozen=True)
class Matrix:
    """The `matrix` part: its `lab run` plan (timed by the dry run as every study's plans are)."""

    plan: Plan
    name: ClassVar[str] = "matrix"

    def named_plans(self) -> list[tuple[str, Plan]]:
        return [("matrix", self.plan)]


@dataclass(frozen=True)
class Uploads:
    """The `uploads` part: the streaming study's transfers through each of UPLOAD_TARGETS, a proxy
    with `java_opts` each."""

    transfers: streaming.Transfers
    java_opts: str
    name: ClassVar[str] = "uploads"

    KIND: ClassVar[str] = "upload"  # its dry run's line
    EACH: ClassVar[str] = f"the upload study's {len(UPLOAD_TARGETS)} proxies, every size both ways"

    def planned_seconds(self) -> float:
        """The most it should take: per target a fresh proxy (PROXY_START_S) and its transfers
        (streaming.Transfers.planned_seconds)."""
        return len(UPLOAD_TARGETS) * (machinery.PROXY_START_S + self.transfers.planned_seconds())


Part = Matrix | Uploads


def plan(args: argparse.Namespace) -> list[Part]:
    """The parts, checked before anything starts: the matrix's plan, the uploads' sizes."""
    parts = args.parts.split(",")
    if bad := [p for p in parts if p not in ("matrix", "uploads")]:
        raise ValueError(f"--parts: {bad[0]!r} is not one of matrix, uploads")
    return [
        Matrix(matrix_plan(args))
        if p == "matrix"
        else Uploads(
            streaming.Transfers.of(args.sizes, args.repeats, args.upload_warmup), args.upload_java_opts
        )
        for p in parts
    ]


@dataclass
class CaseRow:
    """One case over one protocol at one load: the matrix's figures."""

    case: str
    engine: str
    lifetime: str
    protocol: str
    load: str
    rps: float
    p50_ms: float | None
    p99_ms: float | None
    cpu_per_1000: float | None
    threads_max: float | None
    heap_max_mib: float | None
    conns_per_1000: float | None
    full_tls_per_1000: float | None
    errors: int
    flags: list[str] = field(default_factory=list)
    # Filled by the report: against the same case and load over plain http.
    cpu_x_http: float | None = None
    rps_x_http: float | None = None


@dataclass
class UploadRow:
    """A transfer through one case (or nginx direct) over one protocol: the streaming study's row."""

    target: str
    protocol: str
    size: str
    direction: str
    mb_per_s: float
    mb_per_s_min: float
    mb_per_s_max: float
    intact: bool
    heap_max_mib: float | None
    cpu_seconds: float | None


def measure(d: Path, part: Part, args: argparse.Namespace) -> list:
    if isinstance(part, Matrix):
        (results,) = machinery.run_matrices(part.plan, [(part.plan, d / "matrix")], d / "matrix")
        return case_rows(results)
    return upload_rows(d, part, args)


def case_rows(results: Results) -> list[CaseRow]:
    rows = []
    for r in results.runs:
        r.verdict = verdict.judge(r)
        conns = r.connections
        rows.append(
            CaseRow(
                case=r.case,
                engine=r.engine,
                lifetime=r.lifetime,
                protocol=r.dim("protocol"),
                load=r.load.label,
                rps=r.locust.rps,
                p50_ms=r.locust.p50_ms,
                p99_ms=r.locust.p99_ms,
                cpu_per_1000=r.proxy.cpu_seconds_per_1000_requests,
                threads_max=r.prometheus.threads_live_max,
                heap_max_mib=r.prometheus.heap_max_bytes and r.prometheus.heap_max_bytes / (1 << 20),
                conns_per_1000=conns and conns.per_1000_requests,
                full_tls_per_1000=conns and conns.full_tls_per_1000_requests,
                errors=r.locust.failures,
                flags=list(r.verdict.flags),
            )
        )
    return rows


def upload_rows(d: Path, part: Uploads, args: argparse.Namespace) -> list[UploadRow]:
    """The upload study's transfers (streaming.transfers) through each of UPLOAD_TARGETS."""
    files = nginx.shared_files_dir()
    out = []
    with machinery.proxies(args, d / "uploads", part.java_opts) as backend:
        for case in UPLOAD_TARGETS:
            with machinery.proxy_up(backend, case) as url:
                rows = streaming.transfers(case.name, url, url, files, part.transfers)
            out += [
                UploadRow(
                    r.target,
                    case.protocol,
                    r.size,
                    r.direction,
                    r.mb_per_s,
                    r.mb_per_s_min,
                    r.mb_per_s_max,
                    r.intact,
                    r.heap_max_mib,
                    r.cpu_seconds,
                )  # fmt: skip
                for r in rows
            ]
    return out


def progress(r) -> str:
    if isinstance(r, CaseRow):
        conns = f", {r.conns_per_1000:.0f} conns/1k" if r.conns_per_1000 is not None else ""
        return f"{r.case} {r.protocol} {r.load}: {r.rps:,.0f} rps{conns}"
    return f"{r.target} {r.direction} {r.size}: {r.mb_per_s:.1f} MB/s, intact {r.intact}"


def compare(rows: list[CaseRow]) -> None:
    """Each row's CPU per request and rate against the same case and load over plain http."""
    http = {(r.case, r.load): r for r in rows if r.protocol == "http"}
    for r in rows:
        base = http.get((r.case, r.load))
        if base is None or r.protocol == "http":
            continue
        if r.cpu_per_1000 and base.cpu_per_1000:
            r.cpu_x_http = r.cpu_per_1000 / base.cpu_per_1000
        if base.rps:
            r.rps_x_http = r.rps / base.rps


CASE_COLUMNS = [
    render.Column("case", lambda r: r.case),
    render.Column("protocol", lambda r: r.protocol),
    render.Column("rps", lambda r: r.rps),
    render.Column("rps x http", lambda r: r.rps_x_http, 2),
    render.Column("p50 ms", lambda r: r.p50_ms, 1),
    render.Column("p99 ms", lambda r: r.p99_ms, 1),
    render.Column("CPU s / 1000 req", lambda r: r.cpu_per_1000, 3),
    render.Column("CPU x http", lambda r: r.cpu_x_http, 2),
    render.Column("threads max", lambda r: r.threads_max),
    render.Column("heap MiB", lambda r: r.heap_max_mib, 0),
    render.Column("new conns / 1k", lambda r: r.conns_per_1000, 1),
    render.Column("full TLS / 1k", lambda r: r.full_tls_per_1000, 1),
    render.Column("errors", lambda r: r.errors),
    render.Column("flags", lambda r: ", ".join(r.flags) or "capacity"),
]
UPLOAD_COLUMNS = [
    render.Column("through", lambda r: r.target),
    render.Column("MB/s (median)", lambda r: r.mb_per_s, 1),
    render.Column("range", lambda r: f"{r.mb_per_s_min:,.0f}-{r.mb_per_s_max:,.0f}"),
    render.Column("proxy heap max MiB", lambda r: r.heap_max_mib, 0),
    render.Column("proxy CPU s", lambda r: r.cpu_seconds, 2),
    render.Column("checksums", lambda r: "all match" if r.intact else "MISMATCH"),
]


def words(cases: list[CaseRow], uploads: list[UploadRow], args: argparse.Namespace) -> list[str]:
    """The verdict in words, from the rows alone."""
    notes = []
    rate = parse_load(args.rate_load).label
    at_rate = [r for r in cases if r.load == rate]
    for lifetime in LIFETIMES:
        tls = [r for r in at_rate if r.lifetime == lifetime and r.protocol == "https" and r.cpu_x_http]
        if tls:
            med = statistics.median(r.cpu_x_http for r in tls)
            handshakes = statistics.median(r.full_tls_per_1000 or 0 for r in tls)
            notes.append(
                f"TLS, {lifetime} clients at {rate}: CPU per request x{med:.2f} of plain http (median over "
                f"the engines, {', '.join(f'{r.engine} x{r.cpu_x_http:.2f}' for r in tls)}); "
                f"{handshakes:.0f} full handshakes per 1,000 requests (median)."
            )
    h2 = [r for r in at_rate if r.protocol == "h2" and r.cpu_x_http]
    if h2:
        notes.append(
            "HTTP/2 against plain http at the same rate: "
            + "; ".join(
                f"{r.case} CPU x{r.cpu_x_http:.2f}, {r.conns_per_1000 or 0:.1f} new conns/1k, "
                f"threads {r.threads_max or 0:.0f}"
                for r in h2
            )
            + "."
        )
    for size in args.sizes.split(","):
        up = {r.target: r for r in uploads if r.size == size and r.direction == "upload"}
        ok, cio = up.get("singleton-okhttp protocol h2"), up.get("singleton-cio protocol https")
        if ok and cio and ok.mb_per_s:
            ratio = cio.mb_per_s / ok.mb_per_s
            gap = "appears" if ratio >= 4 else "does not appear"
            notes.append(
                f"Upload {streaming.label(size)}, as the study ran it: CIO over HTTPS/1.1 "
                f"{cio.mb_per_s:.0f} MB/s, OkHttp over HTTPS/2 {ok.mb_per_s:.0f} MB/s: CIO {ratio:.1f}x "
                f"OkHttp; the 5x gap {gap} here "
                f"(proxy CPU s: CIO {cio.cpu_seconds or 0:.2f}, OkHttp {ok.cpu_seconds or 0:.2f})."
            )
    return notes


def report(rows: list, args: argparse.Namespace) -> machinery.Report:
    cases = [r for r in rows if isinstance(r, CaseRow)]
    uploads = [r for r in rows if isinstance(r, UploadRow)]
    compare(cases)
    tables = []
    for load in dict.fromkeys(r.load for r in cases):
        ordered = sorted(
            (r for r in cases if r.load == load),
            key=lambda r: (LIFETIMES.index(r.lifetime), ENGINES.index(r.engine), PROTOCOLS.index(r.protocol)),
        )
        tables.append((f"Every case over each protocol, {load}", machinery.table(CASE_COLUMNS, ordered)))
    for size in args.sizes.split(",") if uploads else []:
        for direction in ("upload", "download"):
            picked = [r for r in uploads if (r.size, r.direction) == (size, direction)]
            tables.append((f"{direction}, {streaming.label(size)}", machinery.table(UPLOAD_COLUMNS, picked)))
    charts = []
    if cases:
        rate = parse_load(args.rate_load).label
        names = list(dict.fromkeys(Case(r.lifetime, r.engine).id for r in cases))
        charts.append(
            (
                "protocols-cpu.svg",
                render.bars(
                    f"Proxy CPU s per 1000 requests at {rate}, by protocol",
                    names,
                    {
                        p: [
                            next(
                                (
                                    x.cpu_per_1000
                                    for x in cases
                                    if (x.case, x.load, x.protocol) == (n, rate, p)
                                ),
                                None,
                            )
                            for n in names
                        ]
                        for p in PROTOCOLS
                    },
                    digits=3,
                ),
            )
        )
    settings = {
        "protocols": args.protocols,
        "loads": f"{args.rate_load} (fixed rate), {args.capacity_load} (capacity)",
        "warm-up": f"up to {args.warmup} s, the lab's rule",
        "window": f"{args.duration} s",
        "proxy JVM options": args.java_opts,
        "TLS": "nginx 1.22 with TLS 1.2 and 1.3, h2 by ALPN; the lab CA alone trusted; session tickets",
        "uploads": f"{args.sizes}, {args.repeats} transfers each, singleton, proxy {args.upload_java_opts}",
    }
    return machinery.Report(
        "Protocols: TLS and HTTP/2 between the proxy and the upstream",
        settings,
        tables,
        charts,
        notes=words(cases, uploads, args),
    )


def add_options(p: argparse.ArgumentParser) -> None:
    machinery.add_engines(p)
    machinery.add_lifetimes(p)
    options.add_dimension(p, BY_FIELD["protocol"], default=",".join(PROTOCOLS))
    p.add_argument("--parts", default="matrix,uploads", help="matrix, uploads, or both (default: both)")
    p.add_argument("--rate-load", default="rate/200", help="the fixed rate (default: %(default)s)")
    p.add_argument("--capacity-load", default="closed/50/0", help="capacity (default: %(default)s)")
    machinery.add_proxy_runs(p, duration=20)
    p.add_argument("--sizes", default="15m,100m", help="upload sizes (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="transfers per upload cell (default: %(default)s)")
    p.add_argument(
        "--upload-warmup", type=int, default=2, help="unmeasured rounds of every transfer (default: 2)"
    )
    p.add_argument(
        "--upload-java-opts", default="-Xmx256m", help="proxy JVM options for uploads (default: %(default)s)"
    )


STUDY = machinery.Study(
    name="protocols",
    help="every case over http, https and h2; the upload study over HTTPS as it ran",
    add_options=add_options,
    plan=plan,
    parts=machinery.nothing,
    measure=measure,
    report=report,
    progress=progress,
    needs="prometheus",
)
