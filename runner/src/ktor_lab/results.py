"""What `lab run` measured, typed: every window's figures, and results.json.

results.json keeps the shape it always had (`"format": 1`, nested objects with the same keys);
`Results.from_json` reads any file of that format, old or new, ignoring keys it does not know
and leaving figures it does not find at their defaults. The codec is cattrs' (CONVERTER), with the
lab's two text forms: a case by its name, a load level with its label.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import cattrs
from cattrs.gen import make_dict_structure_fn

from .cases import BY_FIELD, DIMENSIONS, Case
from .network import Network
from .plan import Load, Plan
from .warmup import Warmup

FORMAT = 1


@dataclass
class Window:
    start: float = 0.0
    end: float = 0.0
    seconds: float = 0.0
    # Seconds between Locust's edge of the window and the proxy's (its reset or stats against the
    # scrape of the proxy's counters), both edges together: requests in that gap count on one side
    # only, so the two counts may differ by about rps x edges_s.
    edges_s: float = 0.0


@dataclass
class LocustFigures:
    """The generator's view of the window (Locust's stats after the reset)."""

    requests: int = 0
    failures: int = 0
    rps: float = 0.0
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    avg_ms: float | None = None
    users: int = 0
    workers: int = 0
    target_rps: float | None = None
    cpu_peak_percent: dict[str, float] = field(default_factory=dict)
    saturated: bool = False
    settings: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    # HdrHistograms of microseconds (locust/lab_latency.py, encoded): from each request's intended
    # start and from its send; the intended starts, those sent late and those never sent.
    latency_intended: str = ""
    latency_sent: str = ""
    starts: int = 0
    late_starts: int = 0
    missed_starts: int = 0

    @classmethod
    def from_window(cls, stats) -> LocustFigures:
        """From Locust's totals of the window (locust/lab_window.py's WindowStats): the figures of
        the same names, and the rate over the window's own span."""
        shared = {f.name for f in fields(cls)} - {"rps"}
        return cls(rps=stats.rps, **{name: getattr(stats, name) for name in shared})


@dataclass
class ProxyFigures:
    """The proxy's own counters over the window (exact deltas of its /metrics) and its settings."""

    upstream_requests: float = 0.0
    cpu_seconds: float = 0.0
    clients_opened: float = 0.0
    gc_pause_seconds: float = 0.0
    settings: dict[str, str] = field(default_factory=dict)
    cpu_seconds_per_1000_requests: float | None = None
    jit_cpu_seconds_in_window: float | None = None
    # From the proxy's own server histogram (ktor_http_server_requests_seconds) over the window:
    # the latency the proxy gave, without the generator's share.
    server_requests: float | None = None
    server_p50_ms: float | None = None
    server_p95_ms: float | None = None
    server_p99_ms: float | None = None
    # From its upstream-call timer (lab_upstream_requests_seconds, successful calls): the engine's
    # own time, the request sent until the answer's body was relayed.
    upstream_p50_ms: float | None = None
    upstream_p99_ms: float | None = None
    # The two histograms over the window (metrics.own_counts: non-empty buckets, seconds): a row's
    # proxy and upstream percentiles merge its JVMs' windows (rules.jvm_values); empty where
    # results.json was written before them.
    server_buckets: dict[str, float] = field(default_factory=dict)
    upstream_buckets: dict[str, float] = field(default_factory=dict)
    # Seconds the proxy spent serving requests over the window (its server timer's sum): divided by
    # the window, the requests in flight on average (Little's law).
    server_seconds: float | None = None
    # Virtual threads pinned to their carrier over the window (None: the proxy did not count them).
    virtual_threads_pinned: float | None = None
    # Its threads' voluntary context switches per request over the window (machine.process_context_
    # switches: a thread that stopped to wait), and the CPUs it could run on (`1`, `0-1`; natively).
    switches_per_request: float | None = None
    cpus: str = ""


@dataclass
class PrometheusFigures:
    """What Prometheus saw over the window (see measure.window_queries)."""

    cpu_seconds: float | None = None
    upstream_requests: float | None = None
    threads_live_max: float | None = None
    threads_active_unparked_max: float | None = None
    threads_active_unparked_mean: float | None = None
    heap_max_bytes: float | None = None
    open_fds_max: float | None = None
    clients_opened: float | None = None
    gc_pause_seconds: float | None = None
    generator_cpu_max_percent: float | None = None
    # The clients' pools (engines that expose one: OkHttp, Apache5; None for the others) and the
    # proxy's sockets to the upstream in TIME_WAIT (the kernel's count, alike for every engine): those
    # put there during the window, read from the kernel's table at its edges (the proxy's gauge, also
    # counting what other proxies up closed in the last minute, where that table cannot be read).
    pool_in_use_max: float | None = None
    pool_idle_max: float | None = None
    time_wait_max: float | None = None
    carriers_max: float | None = None
    # Prometheus' scrapes of the proxy in the window: tried, and answered within the scrape timeout.
    scrapes_tried: float | None = None
    scrapes_answered: float | None = None
    # Whether Prometheus had scraped the proxy after the window's end when these were read (False:
    # the lab stopped waiting, or the run was interrupted while it waited; None: not recorded).
    scraped_after_end: bool | None = None


@dataclass
class ConnectionFigures:
    """New connections to the upstream over the window as nginx logged them (one line per new
    connection, at its first request): counted alike for every engine (through Toxiproxy too: it
    opens one connection to nginx for each of the proxy's). Full TLS handshakes are the new TLS
    connections whose session was not resumed."""

    new: int = 0
    tls: int = 0
    full_tls_handshakes: int = 0
    by_protocol: dict[str, int] = field(default_factory=dict)  # HTTP/1.1, HTTP/2.0
    by_tls_version: dict[str, int] = field(default_factory=dict)  # TLSv1.2, TLSv1.3
    per_1000_requests: float | None = None
    full_tls_per_1000_requests: float | None = None
    # What explains them (measure.explain_connections): requests in flight on average, threads at
    # work (active unparked, above the idle proxy's) per request in flight, and the round trips a new
    # connection would cost beyond what the network makes it cost (new connections per request x
    # RTT: the TCP handshake with Toxiproxy is local; docs/network.md).
    in_flight_mean: float | None = None
    threads_unparked_idle: float | None = None
    threads_per_in_flight: float | None = None
    connect_rtt_ms_per_request: float | None = None


@dataclass
class MachineFigures:
    """The machine during the window (/proc): how much CPU the lab's own processes used, how much
    everything else did, steal time, and the load average at its end."""

    cpus: int = 0
    window_s: float = 0.0
    busy_cores: float = 0.0
    lab_cores: float = 0.0
    others_cores: float = 0.0
    others_share: float = 0.0  # of all the machine's CPUs
    steal_share: float = 0.0
    load1: float = 0.0
    # The load generator's (Locust's) CPU, in cores over the window (None: not recorded). At a fixed
    # rate its work per request is the same in every window, so what moves it between windows is
    # mostly the machine's: the report's noise line reads the proxy's CPU per request against it.
    generator_cores: float | None = None


@dataclass
class Leak:
    """The proxy's threads and open files idle before the load, and LEAK_SETTLE_S after it."""

    settle_s: float = 0.0
    threads_idle: float | None = None
    threads_after: float | None = None
    files_idle: float | None = None
    files_after: float | None = None
    # The callers' connections open then (lab_server_connections_open; None: a proxy without it):
    # a load generator's users keep theirs after the load stops, and each holds one of the files.
    callers_idle: float | None = None
    callers_after: float | None = None

    def known(self) -> bool:
        return None not in (self.threads_idle, self.threads_after, self.files_idle, self.files_after)

    def files_kept(self) -> float:
        """Open files above the idle proxy's, the callers' connections left out on both sides."""
        return (self.files_after - (self.callers_after or 0)) - (self.files_idle - (self.callers_idle or 0))


@dataclass
class ProxyLog:
    """The exceptions the proxy logged with a stack trace from its start to the leak check
    (measure.proxy_log): none is expected; the proxy's own one-line notes of upstream failures
    ("upstream failed: ...") are counted by its metrics, not here."""

    exceptions: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # class name -> how many
    first: str | None = None  # the first one's log line and exception line


@dataclass
class Verdict:
    flags: list[str] = field(default_factory=list)
    capacity: bool = True
    reasons: list[str] = field(default_factory=list)


@dataclass
class NetworkRecord:
    """What lay between the proxy and nginx: the lab's values, and Toxiproxy's toxics as it reported
    them once they were set (`via` "none": the proxy called nginx directly)."""

    rtt_ms: int = 0
    jitter_ms: int = 0
    bandwidth_kbps: int = 0
    via: str = "none"
    toxics: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def settings(self) -> Network:
        return Network(self.rtt_ms, self.jitter_ms, self.bandwidth_kbps)


@dataclass
class Run:
    case: str
    engine: str
    lifetime: str
    scenario: str
    load: Load
    repeat: int
    warmup: Warmup = field(default_factory=Warmup)
    window: Window = field(default_factory=Window)
    locust: LocustFigures = field(default_factory=LocustFigures)
    proxy: ProxyFigures = field(default_factory=ProxyFigures)
    prometheus: PrometheusFigures = field(default_factory=PrometheusFigures)
    leak: Leak | None = None
    machine: MachineFigures | None = None
    verdict: Verdict = field(default_factory=Verdict)
    # where the proxy did not answer its /metrics (measure.PROXY_SCRAPE_S), e.g. "window end: timed out"
    unanswered: list[str] = field(default_factory=list)
    # The Ktor release and the JDK the proxy ran on (from its lab_proxy_info), e.g. 3.5.1, 25.0.3.
    ktor: str | None = None
    java: str | None = None
    # True when the run was one of a --ktor or --java dimension: its rows name both.
    dimensions: bool = False
    # The case's other dimensions as it ran, by field (cases.DIMENSIONS whose value the proxy does
    # not report: protocol, rtt_ms, dispatcher, ...); one missing had its default.
    dims: dict[str, Any] = field(default_factory=dict)
    connections: ConnectionFigures | None = None
    network: NetworkRecord | None = None
    # Which proxy measured it: the copy of its case (0: the case's only row; 1, 2: an A/A pair) and
    # the fork of that row.
    copy: int = 0
    fork: int = 1
    # A window measured beyond the plan's because some of its proxy's were left out (Plan.spare).
    spare: bool = False
    # What came before the window on that proxy: "warm-up" (its first window in this scenario and
    # load), "idle" (a warm proxy that idled `idle_s` while the others were measured, then
    # `settle_s` of load), or "fresh" (a proxy started and warmed for this window alone).
    after: str = "fresh"
    idle_s: float | None = None
    settle_rps: float | None = None
    # Seconds the load ran on after the warm-up or settle until Prometheus scraped this proxy.
    scrape_wait_s: float | None = None
    # CPU cores the other proxies (up and idle) used during the window (None: no other was up).
    idle_proxies: int = 0
    idle_proxies_cores: float | None = None

    # None: the proxy's log could not be read (or results.json is older than the count).
    proxy_log: ProxyLog | None = None

    @property
    def row(self) -> str:
        """The report's row: the variant, `#copy` for a case measured as two rows (an A/A pair)."""
        return self.variant + (f" #{self.copy}" if self.copy else "")

    @property
    def java_major(self) -> str:
        return (self.java or "?").split(".")[0]

    def dim(self, field: str) -> Any:
        """A dimension's value in this run: as the proxy reported it (the release, the JDK's major
        version), else as its case had it."""
        d = BY_FIELD[field]
        if d.reported:
            return getattr(self, d.reported)
        return self.dims.get(field, d.default)

    @property
    def variant(self) -> str:
        """The case with its dimensions as it ran: what a report row stands for. The release and the
        JDK are named only in a run of a plan with dimensions (as the proxy reported them)."""
        values = {d.field: self.dim(d.field) for d in DIMENSIONS}
        if not self.dimensions:
            values.update(ktor="", java="")
        elif not values["ktor"]:
            values["ktor"] = "?"
        return _variant(self.case, tuple(values.items()))

    def title(self) -> str:
        fork = f" fork {self.fork}" if self.fork > 1 else ""
        return f"{self.row}{fork} {self.scenario} {self.load.label} #{self.repeat}"


@dataclass
class Race:
    """A round of a close call: one more JVM of each row whose comparison on the first screen was
    neither different nor the same, at one scenario and load, and what it took."""

    fork: int
    scenario: str
    load: str
    rows: list[str]
    undecided: list[str]  # the comparisons, as conclusions.Screen.decisions names them
    seconds: float = 0.0


@dataclass
class Results:
    plan: Plan
    backend: dict
    environment: dict
    started: str
    finished: str | None = None
    interrupted: bool = False
    wall_seconds: float = 0.0
    runs: list[Run] = field(default_factory=list)
    format: int = FORMAT
    # The close calls' rounds after the plan's JVMs (lab run --budget), the most looks the budget
    # left room for when the plan's JVMs were done (0: none planned), and why the rounds stopped.
    races: list[Race] = field(default_factory=list)
    race_looks: int = 0
    race_end: str = ""

    def to_json(self) -> dict:
        d = CONVERTER.unstructure(self)
        return {k: d[k] for k in ("format", "started", "finished", "interrupted", "backend", "plan")} | {
            "environment": d["environment"],
            "runs": d["runs"],
            "wall_seconds": d["wall_seconds"],
            "races": d["races"],
            "race_looks": d["race_looks"],
            "race_end": d["race_end"],
        }

    @classmethod
    def from_json(cls, data: dict) -> Results:
        if data.get("format", FORMAT) != FORMAT:
            raise ValueError(f"results.json has format {data.get('format')}; this lab reads format {FORMAT}")
        return CONVERTER.structure(data, cls)

    def write(self, out_dir: Path) -> None:
        """out_dir/results.json, replaced whole (a reader never sees half a file)."""
        tmp = out_dir / "results.json.tmp"
        tmp.write_text(json.dumps(self.to_json(), indent=2, default=str))
        tmp.replace(out_dir / "results.json")


def load(results_dir: Path) -> Results:
    path = results_dir / "results.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: give the folder `lab run` wrote")
    try:
        return Results.from_json(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, AttributeError) as e:
        raise ValueError(f"{path} is not a results.json of `lab run`: {e}") from None


def _load(data: dict, _) -> Load:
    """A load level from its JSON (its label is written beside its fields, and derived from them)."""
    return Load(**{f.name: data[f.name] for f in fields(Load) if f.name in data})


# Where a results.json of format 1 written before Plan.dims and Run.dims kept each dimension:
# the plan's field (its values) and the run's (its value), by the dimension's field.
_PLAN_KEYS = {
    "ktor": "ktor",
    "java": "java",
    "protocols": "protocol",
    "rtt": "rtt_ms",
    "dispatchers": "dispatcher",
}
_RUN_KEYS = {k: k for k in ("protocol", "rtt_ms", "dispatcher")}


def _with_dims(data: dict, keys: dict[str, str]) -> dict:
    """`data` with its dimensions' own keys moved into `dims` (a file written before it had one)."""
    if "dims" in data or not any(k in data for k in keys):
        return data
    dims = {field: data[k] for k, field in keys.items() if k in data and data[k] not in ([], None)}
    return {k: v for k, v in data.items() if k not in keys} | {"dims": dims}


# The codec of results.json: keys it does not know are ignored, missing ones take their defaults;
# a case is written by its name, a load level with its label.
CONVERTER = cattrs.Converter(forbid_extra_keys=False)
CONVERTER.register_unstructure_hook(Case, lambda case: case.name)
CONVERTER.register_structure_hook(Case, lambda text, _: Case.parse(text))
CONVERTER.register_unstructure_hook(Load, Load.to_json)
CONVERTER.register_structure_hook(Load, _load)
_plan = make_dict_structure_fn(Plan, CONVERTER)
_run = make_dict_structure_fn(Run, CONVERTER)
CONVERTER.register_structure_hook(Plan, lambda data, _: _plan(_with_dims(data, _PLAN_KEYS), Plan))
CONVERTER.register_structure_hook(Run, lambda data, _: _run(_with_dims(data, _RUN_KEYS), Run))


@functools.lru_cache(maxsize=4096)
def _variant(case: str, values: tuple[tuple[str, Any], ...]) -> str:
    """Run.variant's name, made once per case and values (a report asks for it per window, often)."""
    return Case.parse(case).with_dimensions(**dict(values)).name
