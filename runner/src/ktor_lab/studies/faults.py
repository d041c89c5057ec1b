"""`lab study faults`: what each engine does when the upstream misbehaves, and who can tell.

For every engine and lifetime, with the lab's settings (`CLIENT_LIMITS=fair`,
`CLIENT_RETRY_ON_STALE=on`) and with the engine's own (`defaults`, `engine`), the proxy is put
in front of the lab's fault server (ktor_lab/parts/faults.py) and each fault is tried `--repeats`
times. Per fault: what the caller gets (status; a body ended whole by its framing, or cut),
how long it took, what the next healthy request gets, how long until a request is served
cleanly again, and the proxy's live threads and open files after it. For uploads cut off by
the caller: what reached the upstream (the fault server logs whether each body ended properly).

The proxy aborts what it can know is cut (a body short of its Content-Length, an engine's
error); a chunked body that the engine ends as if complete is the engine's to see, and this
study shows which engines do.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import ClassVar

import requests

from .. import metrics, render, versions
from ..backends import Backend
from ..cases import ENGINES, LIFETIMES, Case, engine_list
from ..parts import cuts, raw_http
from ..parts.faults import FaultServer
from ..parts.raw_http import exchange, get
from ..processes import busy_cores, wait_until
from . import machinery

REQUEST_TIMEOUT_MS = 1500
LARGE = 1 << 20
REPEATS = 3  # tries of each fault, by default
# The refused fault: the upstream refuses connections for DOWN_S seconds; the try asks
# REFUSED_MARGIN_S into it and waits until REFUSED_MARGIN_S after it.
DOWN_S = 2.0
REFUSED_MARGIN_S = 0.2
# Seconds an upload the caller cut waits, at most, for the upstream to log what reached it.
UPLOAD_LOG_S = 2.0
# For a dry run's estimate: seconds a try takes beyond its waits (the next request and the first
# clean one: 40 ms at most in the study's run, docs/studies/faults/).
TRY_EXTRA_S = 0.25
# Seconds to start and stop the busy loops (a process per core) around a fault's busy tries.
BUSY_S = 1.0
SETTINGS = {
    "lab": {"CLIENT_LIMITS": "fair", "CLIENT_RETRY_ON_STALE": "on"},
    "engine": {"CLIENT_LIMITS": "defaults", "CLIENT_RETRY_ON_STALE": "engine"},
}


@dataclass(frozen=True)
class Fault:
    name: str
    what: str
    path: str = ""
    cut: bool = False  # the upstream's body is cut: passing it as whole is the danger
    upload: str = ""  # a caller's upload cut off: how

    def most_seconds(self) -> float:
        """The most one try should take (see `trial`): for `refused`, the outage and its margins;
        else the proxy's answer, its request timeout at most (it ends what the upstream leaves
        hanging, or the caller's cut upload), and for an upload the wait for the upstream's log;
        plus TRY_EXTRA_S."""
        if self.name == "refused":
            return REFUSED_MARGIN_S + DOWN_S + REFUSED_MARGIN_S + TRY_EXTRA_S
        return REQUEST_TIMEOUT_MS / 1000 + (UPLOAD_LOG_S if self.upload else 0.0) + TRY_EXTRA_S


# What the cut bodies send before the cut: 300 kB of a 1 MiB body.
CUT = f"size={LARGE}&sent=300000"
FAULTS = (
    Fault("refused", "the upstream refuses connections for 2 s, then is back"),
    Fault("hang", "the upstream never answers", "/hang"),
    Fault(
        "stall-after-headers",
        "headers with Content-Length: 1000, then nothing",
        "/hang-after-headers?size=1000",
    ),
    Fault(
        "short-fixed",
        "Content-Length: 1000, 500 bytes, then closed",
        "/truncate-fixed?size=1000&sent=500",
        True,
    ),
    Fault("short-fixed-large", "Content-Length: 1 MiB, 300 kB, then closed", f"/truncate-fixed?{CUT}", True),
    Fault(
        "cut-chunked",
        "chunked, 300 kB, closed where a chunk's size line would start",
        f"/truncate-chunked?{CUT}",
        True,
    ),
    Fault(
        "cut-mid-chunk",
        "chunked, 300 kB, closed in the middle of a chunk",
        f"/truncate-chunked?{CUT}&cut=mid",
        True,
    ),
    Fault("reset-mid-body", "Content-Length: 1 MiB, 300 kB, then reset", f"/reset-mid-body?{CUT}", True),
    Fault("stale", "a pooled connection closed by the upstream as it is reused", "/stale"),
    Fault("extra-bytes", "6 bytes more than Content-Length: a whole second response", "/extra"),
    Fault(
        "upload-cut-chunked",
        "the caller's chunked upload (500 kB) stops in a chunk, closed at once (FIN)",
        upload="mid-chunk",
    ),
    Fault(
        "upload-cut-at-chunk",
        "the caller's chunked upload stops where the next chunk would start, closed at once (RST)",
        upload="chunk-boundary",
    ),
    Fault(
        "upload-cut-length",
        "the caller's upload stops before its Content-Length (450 of 500 kB), closed at once (FIN)",
        upload="content-length",
    ),
)
# The cut bodies, whose danger is a race: tried on an idle machine and again with every core busy.
CLOSE = {"mid-chunk": "fin", "chunk-boundary": "rst", "content-length": "fin"}
BY_NAME = {f.name: f for f in FAULTS}


def outcome(reply: raw_http.Reply) -> str:
    """`502`, `200 whole`, `200 cut`, `dropped` (no status line)."""
    if reply.status == 0:
        return "dropped"
    if reply.status == 200:
        return "200 whole" if reply.whole else "200 cut"
    return str(reply.status)


def served_cleanly_after(proxy_url: str, since: float, limit_s: float = 10.0) -> float | None:
    """Milliseconds from `since` until GET /ok answers 200 "ok"; None if not within `limit_s`."""

    def clean() -> bool:
        reply = exchange(proxy_url, get("/ok", "Connection: close"), timeout=5)
        return reply.status == 200 and reply.body == b"ok\n"

    if wait_until(clean, max(0.0, limit_s - (time.monotonic() - since)), interval=0.02):
        return ms_since(since)
    return None


def ms_since(t0: float) -> float:
    """Milliseconds since the monotonic time `t0`, to 0.1 ms."""
    return round((time.monotonic() - t0) * 1000, 1)


@dataclass(frozen=True)
class Gauges:
    """The proxy's live threads and open files."""

    threads: float
    files: float

    @classmethod
    def read(cls, proxy_url: str) -> Gauges:
        live, fds = machinery.proxy_figures(
            proxy_url, ("jvm_threads_live_threads", {}), ("process_files_open_files", {})
        )
        return cls(live, fds)


@dataclass
class Trial:
    """One try of a fault: what the caller got, what the next healthy request got, and when a
    request was served cleanly again."""

    caller: str
    next: str = ""
    caller_ms: float | None = None
    clean_ms: float | None = None
    passed_whole: bool = False  # a cut body passed on as whole (the danger)
    upstream_saw: str | None = None  # for an upload the caller cut: whole, cut or nothing


def next_request(proxy_url: str) -> str:
    nxt = exchange(proxy_url, get("/ok"))
    return outcome(nxt) if nxt.body == b"ok\n" or nxt.status != 200 else "200 other body"


def trial(fault: Fault, proxy_url: str, server: FaultServer) -> Trial:
    """One try of `fault`: the caller's answer, the next request's, and the time to clean again."""
    if fault.name == "refused":
        server.down(DOWN_S)
        time.sleep(REFUSED_MARGIN_S)
        t0 = time.monotonic()
        out = Trial(outcome(exchange(proxy_url, get("/ok"))), caller_ms=ms_since(t0))
        time.sleep(max(0.0, DOWN_S + REFUSED_MARGIN_S - (time.monotonic() - t0)))  # the upstream is back
    elif fault.upload:
        server.clear()
        # No pause before the close: the one timing that found the race (issue 28).
        status = cuts.cut_upload(proxy_url, cuts.Cut(fault.upload, CLOSE[fault.upload], 0.0), "study")
        out = Trial("reset by the caller" if status is None else str(status) if status else "closed")
        # What reached the upstream is logged once its body ended (or was cut): 2 s at most.
        seen = wait_until(
            lambda: [e for e in server.log() if e["target"].startswith("/upload")],
            timeout=UPLOAD_LOG_S,
            interval=0.05,
        )
        out.upstream_saw = "whole" if any(e["body_complete"] for e in seen) else "cut" if seen else "nothing"
    else:
        t0 = time.monotonic()
        reply = exchange(proxy_url, get(fault.path), timeout=REQUEST_TIMEOUT_MS / 1000 * 4)
        out = Trial(outcome(reply), caller_ms=ms_since(t0))
        out.passed_whole = fault.cut and reply.status == 200 and reply.whole
    after = time.monotonic()
    out.next = next_request(proxy_url)
    out.clean_ms = served_cleanly_after(proxy_url, after)
    return out


@dataclass(frozen=True)
class Setup:
    """One run of the plan: a case with one kind of settings, tried with every fault."""

    case: Case
    settings: str  # a key of SETTINGS
    _: KW_ONLY
    faults: tuple[str, ...] = tuple(BY_NAME)  # names of FAULTS, tried in this order
    repeats: int = REPEATS  # tries of each
    busy: bool = True  # the cut bodies tried again with every core busy

    KIND: ClassVar[str] = "fault setup"  # its dry run's line
    EACH: ClassVar[str] = "settings x lifetimes x engines, every fault"

    def planned_seconds(self) -> float:
        """The most it should take: a fresh proxy (PROXY_START_S; its 3 unmeasured requests are
        instant), then repeats x each fault's most (Fault.most_seconds), and with busy the cut
        bodies' repeats again, BUSY_S to start and stop the busy loops around them."""
        total = float(machinery.PROXY_START_S)
        for fault in (BY_NAME[name] for name in self.faults):
            again = self.busy and bool(fault.cut or fault.upload)
            total += self.repeats * fault.most_seconds() * (1 + again) + BUSY_S * again
        return total


@dataclass
class FaultRow:
    """One fault through one setup, over its repeats."""

    engine: str
    lifetime: str
    settings: str
    fault: str
    repeats: int
    caller: str  # the tally: `502 x3`, `200 cut x2, 502 x1`
    caller_ms: float | None
    passed_whole: int
    upstream_saw: str | None
    upload_passed_whole: int
    next: str
    next_failed: int
    clean_ms: float | None
    live_threads: float
    threads_added: float
    open_files: float
    files_added: float
    retry_on_stale: str | None
    limits: str | None
    # The cut bodies again with every core busy (None: not a cut, or --no-busy).
    busy_caller: str | None = None
    busy_upstream_saw: str | None = None
    busy_passed_whole: int | None = None

    @property
    def case(self) -> str:
        return f"{self.lifetime}-{self.engine}"

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.settings, self.lifetime, self.engine)


@dataclass
class Probe:
    """A setup's proxy as the faults find it: idle gauges and its settings, before the first."""

    setup: Setup
    baseline: Gauges
    proxy_settings: dict[str, str] = field(default_factory=dict)

    def row(
        self, fault: Fault, trials: list[Trial], after: Gauges, busy: list[Trial] | None = None
    ) -> FaultRow:
        def median(values: list[float | None]) -> float | None:
            m = machinery.median_of(values)
            return None if m is None else round(m, 1)

        return FaultRow(
            engine=self.setup.case.engine,
            lifetime=self.setup.case.lifetime,
            settings=self.setup.settings,
            fault=fault.name,
            repeats=len(trials),
            caller=tally([t.caller for t in trials]),
            caller_ms=median([t.caller_ms for t in trials]),
            passed_whole=sum(1 for t in trials if t.passed_whole),
            upstream_saw=tally([t.upstream_saw or "" for t in trials]) if fault.upload else None,
            upload_passed_whole=sum(1 for t in trials if t.upstream_saw == "whole"),
            next=tally([t.next for t in trials]),
            next_failed=sum(1 for t in trials if not t.next.startswith("200 whole")),
            clean_ms=median([t.clean_ms for t in trials]),
            live_threads=after.threads,
            threads_added=after.threads - self.baseline.threads,
            open_files=after.files,
            files_added=after.files - self.baseline.files,
            retry_on_stale=self.proxy_settings.get("retry_on_stale"),
            limits=self.proxy_settings.get("limits"),
            busy_caller=tally([t.caller for t in busy]) if busy else None,
            busy_upstream_saw=tally([t.upstream_saw or "" for t in busy]) if busy and fault.upload else None,
            busy_passed_whole=sum(1 for t in busy if t.passed_whole or t.upstream_saw == "whole")
            if busy
            else None,
        )


def tally(values: list[str]) -> str:
    """`502 x3`, or `200 cut x2, 502 x1`."""
    return ", ".join(f"{v} x{n}" for v, n in Counter(values).most_common())


def fault_names(args: argparse.Namespace) -> list[str]:
    return args.faults.split(",")


def plan(args: argparse.Namespace) -> list[Setup]:
    engines = engine_list(args.engines)
    lifetimes = args.lifetimes.split(",")
    settings = args.settings.split(",")
    if bad := [n for n in fault_names(args) if n not in BY_NAME]:
        raise ValueError(f"unknown fault {bad[0]!r}; faults: {', '.join(BY_NAME)}")
    if bad := [s for s in settings if s not in SETTINGS]:
        raise ValueError(f"unknown settings {bad[0]!r}; valid: {', '.join(SETTINGS)}")
    if bad := [x for x in lifetimes if x not in LIFETIMES]:
        raise ValueError(f"unknown lifetime {bad[0]!r}; lifetimes: {', '.join(LIFETIMES)}")
    return [
        Setup(
            Case(lifetime, engine), s, faults=tuple(fault_names(args)), repeats=args.repeats, busy=args.busy
        )
        for s in settings
        for lifetime in lifetimes
        for engine in engines
    ]


@contextlib.contextmanager
def parts(args: argparse.Namespace, d: Path) -> Iterator[tuple[Backend, FaultServer]]:
    """The fault server in the upstream's place (no nginx); the proxies through the native backend."""
    with machinery.proxies(args, d, with_nginx=False) as backend:
        yield backend, backend.fault_server()


def measure(parts: tuple[Backend, FaultServer], setup: Setup, args: argparse.Namespace) -> list[FaultRow]:
    backend, server = parts
    settings = {"CLIENT_REQUEST_TIMEOUT_MS": str(REQUEST_TIMEOUT_MS), **SETTINGS[setup.settings]}
    with machinery.proxy_up(backend, setup.case, server.url, **settings) as url:
        for _ in range(3):  # unmeasured: the client made, classes loaded
            requests.get(f"{url}/ok", timeout=10)
        probe = Probe(setup, Gauges.read(url), metrics.scrape(url, timeout=10).labels("lab_proxy_info"))
        rows = []
        for name in setup.faults:
            fault = BY_NAME[name]
            trials = [trial(fault, url, server) for _ in range(setup.repeats)]
            busy = None
            if setup.busy and (fault.cut or fault.upload):
                with busy_cores(os.cpu_count() or 2, backend.run_dir):
                    busy = [trial(fault, url, server) for _ in range(setup.repeats)]
            rows.append(probe.row(fault, trials, Gauges.read(url), busy))
        return rows


def progress(r: FaultRow) -> str:
    whole = r.passed_whole + r.upload_passed_whole
    busy = f"; busy: {r.busy_upstream_saw or r.busy_caller}" if r.busy_caller else ""
    return (
        f"{r.case} ({r.settings} settings) {r.fault}: {r.upstream_saw or r.caller}"
        + (f"; {whole} cut bodies passed as whole" if whole else "")
        + busy
        + (f"; {r.busy_passed_whole} passed as whole when busy" if r.busy_passed_whole else "")
        + (f"; next: {r.next}" if r.next_failed else "")
    )


def cell(row: FaultRow) -> str:
    """One cell of the matrix: what the caller saw (for an upload, what the upstream saw), flagged
    when a cut passed as whole; for a cut body, idle / with every core busy."""
    idle = _cell(row.upstream_saw, row.caller, row.upload_passed_whole + row.passed_whole)
    if row.busy_caller is not None:
        idle += " / busy: " + _cell(row.busy_upstream_saw, row.busy_caller, row.busy_passed_whole or 0)
    if row.next_failed:
        idle += f"; next: {row.next}"
    return idle


def _cell(upstream_saw: str | None, caller: str, whole: int) -> str:
    text = "upstream: " + upstream_saw if upstream_saw is not None else caller
    return f"**{text}**" if whole else text


def _order(group: tuple[str, str, str]) -> tuple:
    setting, lifetime, engine = group
    return (list(SETTINGS).index(setting), LIFETIMES.index(lifetime), ENGINES.index(engine))


# The summary table: a row per setup, every fault of it together (its rows).
SUMMARY_COLUMNS = [
    render.Column("case", lambda rs: rs[0].case),
    render.Column("settings", lambda rs: rs[0].settings),
    render.Column("retry_on_stale", lambda rs: rs[0].retry_on_stale),
    render.Column(
        "cut bodies passed as whole",
        lambda rs: sum(r.passed_whole + r.upload_passed_whole + (r.busy_passed_whole or 0) for r in rs),
    ),
    render.Column("next requests failed", lambda rs: sum(r.next_failed for r in rs)),
    render.Column(
        "slowest return to clean, ms",
        lambda rs: max((r.clean_ms for r in rs if r.clean_ms is not None), default=None),
        0,
    ),
    render.Column("threads added (max)", lambda rs: max(r.threads_added for r in rs), 0),
    render.Column("open files added (max)", lambda rs: max(r.files_added for r in rs), 0),
]
TIMING_COLUMNS = [
    render.Column("case", lambda r: r.case),
    render.Column("settings", lambda r: r.settings),
    render.Column("fault", lambda r: r.fault),
    render.Column("caller", lambda r: r.caller),
    render.Column("caller ms (median)", lambda r: r.caller_ms, 0),
    render.Column("next", lambda r: r.next),
    render.Column("clean again ms (median)", lambda r: r.clean_ms, 0),
]


def report(rows: list[FaultRow], args: argparse.Namespace) -> machinery.Report:
    names = fault_names(args)
    setups = [[r for r in rows if r.group == g] for g in sorted({r.group for r in rows}, key=_order)]
    matrix_columns = [  # a row per setup, as the summary's
        *SUMMARY_COLUMNS[:2],
        *(render.Column(n, lambda rs, n=n: cell(next(r for r in rs if r.fault == n))) for n in names),
    ]
    settings = {
        "Ktor": versions.default_release().name,  # the proxy jar's (the pom's)
        "faults": ", ".join(names),
        "repeats": args.repeats,
        "lab settings": "CLIENT_LIMITS=fair, CLIENT_RETRY_ON_STALE=on",
        "engine settings": "CLIENT_LIMITS=defaults, CLIENT_RETRY_ON_STALE=engine",
        "CLIENT_REQUEST_TIMEOUT_MS": REQUEST_TIMEOUT_MS,
        "busy machine": "the cut bodies again with a busy loop on every core" if args.busy else "not tried",
        "proxy JVM options": args.java_opts,
    }
    notes = [f"`{f.name}`: {f.what}" for f in FAULTS if f.name in names] + [
        "A cell is what the caller got over the repeats: a status, `200 whole` (the body ended by its "
        "framing), `200 cut` (the connection closed before the body's end: the caller can tell), or "
        "`dropped` (no answer). **Bold**: a cut body passed on as whole.",
        "For uploads: what the upstream saw (`cut`, `nothing`, or **`whole`**), the caller closing at once.",
        "For the cut bodies, `/ busy:` is the same fault tried again with a busy loop on every core "
        "(`--no-busy` leaves it out): the races live there.",
        "`next`: the next healthy request after the fault, when it failed.",
    ]
    timing = sorted(rows, key=lambda r: (_order(r.group), names.index(r.fault)))
    return machinery.Report(
        "Faults: what each engine passes on when the upstream misbehaves",
        settings,
        [
            ("Summary", machinery.table(SUMMARY_COLUMNS, setups)),
            ("What the caller got, per fault", machinery.table(matrix_columns, setups)),
            ("Times", machinery.table(TIMING_COLUMNS, timing)),
        ],
        [],
        notes,
    )


def add_options(p: argparse.ArgumentParser) -> None:
    machinery.add_engines(p)
    machinery.add_lifetimes(p)
    p.add_argument(
        "--settings", default="lab,engine", help="lab (fair limits, retry on), engine (its own), or both"
    )
    p.add_argument(
        "--faults",
        default=",".join(BY_NAME),
        help=f"comma-separated, of: {', '.join(BY_NAME)} (default: all)",
    )
    p.add_argument("--repeats", type=int, default=REPEATS, help="tries of each fault (default: %(default)s)")
    p.add_argument(
        "--busy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="try the cut bodies again with a busy loop on every core (default: on)",
    )
    p.add_argument("--java-opts", default="-Xmx256m", help="proxy JVM options (default: %(default)s)")


STUDY = machinery.Study(
    name="faults",
    help="each engine against a misbehaving upstream: what the caller gets, what passes as whole",
    add_options=add_options,
    plan=plan,
    parts=parts,
    measure=measure,
    report=report,
    progress=progress,
    needs="java",  # the proxy jar and java; no nginx, no Prometheus
)
