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

import socket
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import requests

from .. import metrics, render
from ..cases import ENGINES, LIFETIMES
from ..parts import faults
from ..parts.faults import FaultServer, exchange, get
from ..rundirs import results_dir
from ..stack import Stack
from . import common

NAME = "faults"
NEEDS = "java"  # the proxy jar and java; no nginx, no Prometheus
REQUEST_TIMEOUT_MS = 1500
LARGE = 1 << 20
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
    Fault(
        "short-fixed-large",
        "Content-Length: 1 MiB, 300 kB, then closed",
        f"/truncate-fixed?size={LARGE}&sent=300000",
        True,
    ),
    Fault(
        "cut-chunked",
        "chunked, 300 kB, closed where a chunk's size line would start",
        f"/truncate-chunked?size={LARGE}&sent=300000",
        True,
    ),
    Fault(
        "cut-mid-chunk",
        "chunked, 300 kB, closed in the middle of a chunk",
        f"/truncate-chunked?size={LARGE}&sent=300000&cut=mid",
        True,
    ),
    Fault(
        "reset-mid-body",
        "Content-Length: 1 MiB, 300 kB, then reset",
        f"/reset-mid-body?size={LARGE}&sent=300000",
        True,
    ),
    Fault("stale", "a pooled connection closed by the upstream as it is reused", "/stale"),
    Fault("extra-bytes", "6 bytes more than Content-Length: a whole second response", "/extra"),
    Fault("upload-cut-chunked", "the caller's chunked upload stops mid-way (FIN)", upload="chunked"),
    Fault("upload-cut-length", "the caller's upload stops before its Content-Length (FIN)", upload="length"),
)
BY_NAME = {f.name: f for f in FAULTS}


def describe(reply: faults.Reply) -> str:
    """`502`, `200 whole`, `200 cut`, `dropped` (no status line)."""
    if reply.status == 0:
        return "dropped"
    if reply.status == 200:
        return "200 whole" if reply.whole else "200 cut"
    return str(reply.status)


def cut_upload(proxy_url: str, how: str) -> None:
    host, port = proxy_url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    if how == "chunked":
        s.sendall(b"PUT /upload HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: chunked\r\n\r\n")
        s.sendall(b"5\r\nhello\r\n5\r\nworld\r\n")
    else:
        s.sendall(b"PUT /upload HTTP/1.1\r\nHost: lab\r\nContent-Length: 1000\r\n\r\nhello world")
    time.sleep(0.2)  # the proxy has started the upstream request with what it got
    s.close()


def served_cleanly_after(proxy_url: str, since: float, limit_s: float = 10.0) -> float | None:
    """Milliseconds from `since` until GET /ok answers 200 "ok"; None if not within `limit_s`."""
    while time.monotonic() - since < limit_s:
        reply = exchange(proxy_url, get("/ok", "Connection: close"), timeout=5)
        if reply.status == 200 and reply.body == b"ok\n":
            return round((time.monotonic() - since) * 1000, 1)
        time.sleep(0.02)
    return None


def gauges(proxy_url: str) -> tuple[float, float]:
    live, fds = common.proxy_figures(
        proxy_url, ("jvm_threads_live_threads", {}), ("process_files_open_files", {})
    )
    return live, fds


def trial(fault: Fault, proxy_url: str, server: FaultServer) -> dict:
    """One try of `fault`: the caller's answer, the next request's, and the time to clean again."""
    out: dict = {}
    if fault.name == "refused":
        server.down(2.0)
        time.sleep(0.2)
        t0 = time.monotonic()
        out["caller"] = describe(exchange(proxy_url, get("/ok")))
        out["caller_ms"] = round((time.monotonic() - t0) * 1000, 1)
        time.sleep(max(0.0, 2.2 - (time.monotonic() - t0)))  # the upstream is back
        back = time.monotonic()
        first = exchange(proxy_url, get("/ok"))
        out["next"] = describe(first) if first.body == b"ok\n" or first.status != 200 else "200 other body"
        out["clean_ms"] = served_cleanly_after(proxy_url, back)
        return out
    if fault.upload:
        server.clear()
        t0 = time.monotonic()
        cut_upload(proxy_url, fault.upload)
        out["caller"] = "cut by caller"
        # What reached the upstream is logged once its body ended (or was cut): 1 s at most.
        deadline = time.monotonic() + 1.0
        while not (seen := [e for e in server.log() if e["target"].startswith("/upload")]):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        out["upstream_saw"] = (
            "whole" if any(e["body_complete"] for e in seen) else "cut" if seen else "nothing"
        )
    else:
        t0 = time.monotonic()
        reply = exchange(proxy_url, get(fault.path), timeout=REQUEST_TIMEOUT_MS / 1000 * 4)
        out["caller_ms"] = round((time.monotonic() - t0) * 1000, 1)
        out["caller"] = describe(reply)
        if fault.cut:
            out["passed_whole"] = reply.status == 200 and reply.whole
    after = time.monotonic()
    nxt = exchange(proxy_url, get("/ok"))
    out["next"] = describe(nxt) if nxt.body == b"ok\n" or nxt.status != 200 else "200 other body"
    out["clean_ms"] = served_cleanly_after(proxy_url, after)
    return out


def run_case(lab: Stack, server: FaultServer, engine: str, lifetime: str, setting: str, args) -> list[dict]:
    url = lab.proxy(
        f"{lifetime}-{engine}",
        server.url,
        CLIENT_REQUEST_TIMEOUT_MS=str(REQUEST_TIMEOUT_MS),
        **SETTINGS[setting],
    ).url
    rows = []
    try:
        for _ in range(3):  # unmeasured: the client made, classes loaded
            requests.get(f"{url}/ok", timeout=10)
        baseline = gauges(url)
        settings = metrics.scrape(url, timeout=10).labels("lab_proxy_info")
        for name in args.faults.split(","):
            fault = BY_NAME[name]
            trials = [trial(fault, url, server) for _ in range(args.repeats)]
            live, fds = gauges(url)
            rows.append(summarize(fault, engine, lifetime, setting, trials, baseline, (live, fds), settings))
    finally:
        lab.stop_proxy()
    return rows


def tally(values: list[str]) -> str:
    """`502 x3`, or `200 cut x2, 502 x1`."""
    return ", ".join(f"{v} x{n}" for v, n in Counter(values).most_common())


def summarize(fault, engine, lifetime, setting, trials, baseline, after, settings) -> dict:
    def median(key):
        values = [t[key] for t in trials if t.get(key) is not None]
        return round(statistics.median(values), 1) if values else None

    return {
        "engine": engine,
        "lifetime": lifetime,
        "settings": setting,
        "fault": fault.name,
        "repeats": len(trials),
        "caller": tally([t["caller"] for t in trials]),
        "caller_ms": median("caller_ms"),
        "passed_whole": sum(1 for t in trials if t.get("passed_whole")),
        "upstream_saw": tally([t["upstream_saw"] for t in trials]) if fault.upload else None,
        "upload_passed_whole": sum(1 for t in trials if t.get("upstream_saw") == "whole"),
        "next": tally([t["next"] for t in trials]),
        "next_failed": sum(1 for t in trials if not t["next"].startswith("200 whole")),
        "clean_ms": median("clean_ms"),
        "live_threads": after[0],
        "threads_added": after[0] - baseline[0],
        "open_files": after[1],
        "files_added": after[1] - baseline[1],
        "retry_on_stale": settings.get("retry_on_stale"),
        "limits": settings.get("limits"),
    }


def cell(row: dict) -> str:
    """One cell of the matrix: what the caller saw, flagged when a cut passed as whole."""
    if row["upstream_saw"] is not None:
        text = "upstream: " + row["upstream_saw"]
        return f"**{text}**" if row["upload_passed_whole"] else text
    text = row["caller"]
    if row["passed_whole"]:
        text = f"**{text}**"
    if row["next_failed"]:
        text += f"; next: {row['next']}"
    return text


def run(args) -> Path:
    started = time.time()
    engines = args.engines.split(",")
    lifetimes = args.lifetimes.split(",")
    settings = args.settings.split(",")
    names = args.faults.split(",")
    if bad := [n for n in names if n not in BY_NAME]:
        raise ValueError(f"unknown fault {bad[0]!r}; faults: {', '.join(BY_NAME)}")
    if bad := [s for s in settings if s not in SETTINGS]:
        raise ValueError(f"unknown settings {bad[0]!r}; valid: {', '.join(SETTINGS)}")
    d = results_dir(args.out, NAME)
    rows: list[dict] = []
    with Stack(d / "logs", java_opts=args.java_opts.split()) as lab:
        server = lab.faults()
        total = len(engines) * len(lifetimes) * len(settings)
        for setting in settings:
            for lifetime in lifetimes:
                for engine in engines:
                    case_rows = run_case(lab, server, engine, lifetime, setting, args)
                    rows += case_rows
                    whole = sum(r["passed_whole"] + r["upload_passed_whole"] for r in case_rows)
                    print(
                        f"[{len(rows) // len(names)}/{total}] {lifetime}-{engine} ({setting} settings): "
                        f"{whole} cut bodies passed as whole, "
                        f"{sum(r['next_failed'] for r in case_rows)} next requests failed",
                        flush=True,
                    )
    return write(d, args, rows, names, started)


def case_label(r: dict) -> str:
    return f"{r['lifetime']}-{r['engine']}"


def write(d: Path, args, rows: list[dict], names: list[str], started: float) -> Path:
    groups = sorted({(r["settings"], r["lifetime"], r["engine"]) for r in rows}, key=_order)
    by_key = {(r["settings"], r["lifetime"], r["engine"], r["fault"]): r for r in rows}
    matrix_rows = [
        {
            "case": f"{lifetime}-{engine}",
            "settings": setting,
            **{n: cell(by_key[(setting, lifetime, engine, n)]) for n in names},
        }
        for setting, lifetime, engine in groups
    ]
    matrix = common.table(
        [render.Column("case", lambda r: r["case"]), render.Column("settings", lambda r: r["settings"])]
        + [render.Column(n, lambda r, n=n: r[n]) for n in names],
        matrix_rows,
    )
    summary = common.table(
        [
            render.Column("case", lambda r: r["case"]),
            render.Column("settings", lambda r: r["settings"]),
            render.Column("retry_on_stale", lambda r: r["retry_on_stale"]),
            render.Column("cut bodies passed as whole", lambda r: r["whole"]),
            render.Column("next requests failed", lambda r: r["next_failed"]),
            render.Column("slowest return to clean, ms", lambda r: r["clean_ms"], 0),
            render.Column("threads added (max)", lambda r: r["threads"], 0),
            render.Column("open files added (max)", lambda r: r["files"], 0),
        ],
        [
            {
                "case": f"{lifetime}-{engine}",
                "settings": setting,
                "retry_on_stale": sub[0]["retry_on_stale"],
                "whole": sum(r["passed_whole"] + r["upload_passed_whole"] for r in sub),
                "next_failed": sum(r["next_failed"] for r in sub),
                "clean_ms": max((r["clean_ms"] for r in sub if r["clean_ms"] is not None), default=None),
                "threads": max(r["threads_added"] for r in sub),
                "files": max(r["files_added"] for r in sub),
            }
            for setting, lifetime, engine in groups
            for sub in [
                [
                    r
                    for r in rows
                    if (r["settings"], r["lifetime"], r["engine"]) == (setting, lifetime, engine)
                ]
            ]
        ],
    )
    timing = common.table(
        [
            render.Column("case", lambda r: case_label(r)),
            render.Column("settings", lambda r: r["settings"]),
            render.Column("fault", lambda r: r["fault"]),
            render.Column("caller", lambda r: r["caller"]),
            render.Column("caller ms (median)", lambda r: r["caller_ms"], 0),
            render.Column("next", lambda r: r["next"]),
            render.Column("clean again ms (median)", lambda r: r["clean_ms"], 0),
        ],
        sorted(
            rows, key=lambda r: (_order((r["settings"], r["lifetime"], r["engine"])), names.index(r["fault"]))
        ),
    )
    settings = {
        "faults": ", ".join(names),
        "repeats": args.repeats,
        "lab settings": "CLIENT_LIMITS=fair, CLIENT_RETRY_ON_STALE=on",
        "engine settings": "CLIENT_LIMITS=defaults, CLIENT_RETRY_ON_STALE=engine",
        "CLIENT_REQUEST_TIMEOUT_MS": REQUEST_TIMEOUT_MS,
        "proxy JVM options": args.java_opts,
    }
    notes = [f"`{f.name}`: {f.what}" for f in FAULTS if f.name in names] + [
        "A cell is what the caller got over the repeats: a status, `200 whole` (the body ended by its "
        "framing), `200 cut` (the connection closed before the body's end: the caller can tell), or "
        "`dropped` (no answer). **Bold**: a cut body passed on as whole.",
        "For uploads: what the upstream saw (`cut`, `nothing`, or **`whole`**).",
        "`next`: the next healthy request after the fault, when it failed.",
    ]
    return common.write(
        d,
        NAME,
        "Faults: what each engine passes on when the upstream misbehaves",
        "lab study faults " + args.argv_text,
        settings,
        rows,
        [("Summary", summary), ("What the caller got, per fault", matrix), ("Times", timing)],
        [],
        started,
        notes,
    )


def _order(key: tuple[str, str, str]) -> tuple:
    setting, lifetime, engine = key
    return (list(SETTINGS).index(setting), LIFETIMES.index(lifetime), ENGINES.index(engine))


def add_parser(sub) -> None:
    p = sub.add_parser(
        "faults",
        help="each engine against a misbehaving upstream: what the caller gets, what passes as whole",
    )
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated (default: all five)")
    p.add_argument("--lifetimes", default=",".join(LIFETIMES), help="comma-separated (default: both)")
    p.add_argument(
        "--settings", default="lab,engine", help="lab (fair limits, retry on), engine (its own), or both"
    )
    p.add_argument(
        "--faults",
        default=",".join(BY_NAME),
        help=f"comma-separated, of: {', '.join(BY_NAME)} (default: all)",
    )
    p.add_argument("--repeats", type=int, default=3, help="tries of each fault (default: %(default)s)")
    p.add_argument("--java-opts", default="-Xmx256m", help="proxy JVM options (default: %(default)s)")
    p.add_argument(
        "--out", type=Path, default=None, help="results folder (default: results/study-faults-<time>)"
    )
