"""What `lab run` measured, typed: the plan, every run's figures, and results.json.

results.json keeps the shape it always had (`"format": 1`, nested objects with the same keys);
`Results.from_json` reads any file of that format, old or new, ignoring keys it does not know
and leaving figures it does not find at None.
"""

from __future__ import annotations

import itertools
import json
import math
import types
import typing
from collections import Counter
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path

from . import versions
from .cases import DIMENSIONS, SCENARIOS, Case
from .network import Network
from .warmup import Warmup

FORMAT = 1
LOAD_HELP = "closed/USERS/WAIT (e.g. closed/50/0, closed/1000/1-2) or rate/RPS[/USERS] (e.g. rate/500)"


@dataclass(frozen=True)
class Load:
    """One load level: `closed/USERS/WAIT` (WAIT in seconds, `0` or `1-2`) or `rate/RPS[/USERS]`."""

    model: str
    users: int
    wait_min: float = 0.0
    wait_max: float = 0.0
    target_rps: float = 0.0

    @property
    def label(self) -> str:
        if self.model == "rate":
            return f"rate/{self.target_rps:g}/{self.users}"
        wait = (
            f"{self.wait_min:g}" if self.wait_min == self.wait_max else f"{self.wait_min:g}-{self.wait_max:g}"
        )
        return f"closed/{self.users}/{wait}"

    def describe(self) -> str:
        if self.model == "rate":
            return f"rate model, {self.target_rps:g} rps target, {self.users} users"
        wait = "no wait" if self.wait_max == 0 else f"{self.wait_min:g}-{self.wait_max:g} s wait"
        return f"closed model, {self.users} users, {wait}"

    def to_json(self) -> dict:
        return {"label": self.label, **asdict(self)}


def parse_load(text: str) -> Load:
    """ValueError with the accepted forms for anything else."""
    parts = text.strip().split("/")
    try:
        if parts[0] == "closed" and len(parts) == 3:
            users = int(parts[1])
            lo, _, hi = parts[2].partition("-")
            wait_min, wait_max = float(lo), float(hi or lo)
            if users >= 1 and 0 <= wait_min <= wait_max:
                return Load("closed", users, wait_min, wait_max)
        if parts[0] == "rate" and len(parts) in (2, 3):
            rps = float(parts[1])
            users = int(parts[2]) if len(parts) == 3 else max(10, math.ceil(rps / 10))
            if rps > 0 and users >= 1:
                return Load("rate", users, target_rps=rps)
    except ValueError:
        pass
    raise ValueError(f"load level {text!r} is not valid; give {LOAD_HELP}")


@dataclass(frozen=True)
class ProxySpec:
    """One proxy of the plan: its case, which copy of the case it is (0: the case has one; 1, 2: an
    A/A pair, two rows of the same case) and which fork of that row (1..forks)."""

    case: Case
    copy: int = 0
    fork: int = 1

    @property
    def row(self) -> str:
        """The row it measures for: the case's name, `#copy` when the case has two rows."""
        return self.case.name + (f" #{self.copy}" if self.copy else "")

    @property
    def title(self) -> str:
        return self.row + (f" fork {self.fork}" if self.fork > 1 else "")


@dataclass(frozen=True)
class Spec:
    """One window of the plan, before it is measured: the proxy (its case with its dimensions),
    the scenario, the load, and which window of its row it is (`repeat`, from 1)."""

    repeat: int
    case: Case
    scenario: str
    load: Load
    copy: int = 0
    fork: int = 1

    @property
    def proxy(self) -> ProxySpec:
        return ProxySpec(self.case, self.copy, self.fork)

    def title(self) -> str:
        return f"{self.proxy.title} {self.scenario} {self.load.label} #{self.repeat}"


@dataclass
class Plan:
    cases: list[Case]
    scenarios: list[str]
    loads: list[Load]
    # Measured windows per row (and proxy): interleaved across the proxies, A B C A B C.
    repeats: int = 1
    warmup_s: int = 150  # lab run's defaults (commands/run.py reads them from here)
    duration_s: int = 10
    workers: int = 0
    java_opts: str = "-Xmx512m"
    proxy_env: dict[str, str] = field(default_factory=dict)
    # Dimensions beyond the case (lab run --ktor, --java, --protocols, --rtt): empty means the
    # default build, JDK, protocol (http) and round trip (0 ms: no network).
    ktor: list[str] = field(default_factory=list)
    java: list[str] = field(default_factory=list)
    protocols: list[str] = field(default_factory=list)
    rtt: list[int] = field(default_factory=list)
    # The network's other values, the same for every run (lab run --jitter, --bandwidth).
    jitter_ms: int = 0
    bandwidth_kbps: int = 0
    # Proxies per row: each warmed once, its windows pooled into the row (JMH's forks).
    forks: int = 1
    # The case measured by two proxies as two rows, the A/A pair that gives the noise floor
    # ("": none, unless --cases names a case twice).
    aa: str = ""
    # A fresh proxy for every window, warmed again each time (the compose backend always).
    fresh: bool = False
    # Seconds of unmeasured load before a window on a warm proxy that has idled (its pools refill).
    settle_s: int = 3

    def __post_init__(self) -> None:
        self.cases = [c if isinstance(c, Case) else Case.parse(c) for c in self.cases]
        for d in DIMENSIONS:
            given = getattr(self, d.plan)
            setattr(self, d.plan, [d.parse(v) for v in given])  # a ValueError naming what is valid
            if given and (named := [c for c in self.cases if d.of(c) != d.default]):
                raise ValueError(
                    f"case {named[0].name!r} names its {d.word}; give it there or with {d.option}, not both"
                )
        for case in self.cases:  # what a case names itself is asked for: refused, never skipped
            if why := case.refusal():
                raise ValueError(f"case {case.name!r}: {why}")
            if case.java:
                versions.jdk(case.java)
        for name in self.java:
            versions.jdk(name)
        if not self.cases_to_run():
            raise ValueError(
                "no combination of these cases and dimensions can run: "
                + "; ".join(why for _, why in self.skipped())
            )
        for case in self.cases_to_run():
            self.network_for(case)  # a NetworkError (ValueError) naming the variable
        if self.jitter_ms and not any(c.rtt_ms for c in self.cases_to_run()):
            raise ValueError(
                f"UPSTREAM_JITTER_MS={self.jitter_ms} varies a round trip, and no run here has one: "
                "give --rtt above 0, or no --jitter"
            )
        if bad := [s for s in self.scenarios if s not in SCENARIOS]:
            raise ValueError(f"unknown scenario {bad[0]!r}; valid scenarios: {', '.join(SCENARIOS)}")
        if self.repeats < 1 or self.duration_s < 1 or self.warmup_s < 0 or self.workers < 0:
            raise ValueError("windows and duration must be at least 1; warm-up and workers at least 0")
        if self.forks < 1 or self.settle_s < 0:
            raise ValueError("forks must be at least 1 and the settle at least 0")
        if self.aa and Case.parse(self.aa).id not in {c.id for c in self.cases}:
            raise ValueError(f"the A/A case {self.aa!r} is not one of the cases; give one of them, or none")
        if not (self.cases and self.scenarios and self.loads):
            raise ValueError("the matrix is empty: give at least one case, scenario and load level")

    def combinations(self) -> list[Case]:
        """Every case with the plan's dimensions applied (each dimension's values, in the order they
        were given, outermost in the order of cases.DIMENSIONS; the cases innermost)."""
        lists = [[(d.field, v) for v in getattr(self, d.plan)] or [None] for d in DIMENSIONS]
        return [
            case.with_dimensions(**dict(pair for pair in combo if pair is not None))
            for combo in itertools.product(*lists)
            for case in self.cases
        ]

    def cases_to_run(self) -> list[Case]:
        """The combinations that can run: one a case cannot take (a release without its engine, h2
        through an HTTP/1.1-only engine) is skipped, and named by `skipped`."""
        return [c for c in self.combinations() if c.refusal() is None]

    def skipped(self) -> list[tuple[Case, str]]:
        """The combinations left out, each with why."""
        return [(c, why) for c in self.combinations() if (why := c.refusal())]

    def network_for(self, case: Case) -> Network:
        """Between the proxy and nginx for `case`: its round trip, the plan's jitter and bandwidth. A
        round trip of 0 has nothing to vary: its runs get no jitter (--rtt 0,20 --jitter 2)."""
        return Network(case.rtt_ms, self.jitter_ms if case.rtt_ms else 0, self.bandwidth_kbps)

    def proxies(self) -> list[ProxySpec]:
        """Every proxy the plan measures, in order: each case to run (its forks), a case the plan
        names twice as two rows (copies 1 and 2), and the A/A case's second copy when the plan has
        no pair of its own."""
        cases = self.cases_to_run()
        count = Counter(cases)
        pair = None
        if self.aa and max(count.values()) == 1:
            pair = next((c for c in cases if c.id == Case.parse(self.aa).id), None)
        out, seen = [], Counter()
        for case in cases:
            seen[case] += 1
            copies = [seen[case]] if count[case] > 1 else ([1, 2] if case == pair else [0])
            out += [ProxySpec(case, copy, fork) for copy in copies for fork in range(1, self.forks + 1)]
        return out

    def runs(self) -> list[Spec]:
        """Every window in the order it is measured: each round goes through every scenario, load
        and proxy before the next (A B C A B C: drift hits every row alike)."""
        return [
            Spec(r + 1, p.case, scenario, load, p.copy, p.fork)
            for r in range(self.repeats)
            for scenario in self.scenarios
            for load in self.loads
            for p in self.proxies()
        ]

    @property
    def has_dimensions(self) -> bool:
        """True when a run's rows must name the release and the JDK (a dimension of the plan, or a
        case's own)."""
        return any(getattr(self, d.plan) for d in DIMENSIONS) or any(c.dimensions() for c in self.cases)

    def to_json(self) -> dict:
        d = asdict(self)
        d["cases"] = [case.name for case in self.cases]
        d["loads"] = [load.to_json() for load in self.loads]
        return d


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

    @classmethod
    def of(cls, stats) -> LocustFigures:
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
    # Seconds the proxy spent serving requests over the window (its server timer's sum): divided by
    # the window, the requests in flight on average (Little's law).
    server_seconds: float | None = None


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
    # proxy's sockets to the upstream in TIME_WAIT (the kernel's count, alike for every engine).
    pool_in_use_max: float | None = None
    pool_idle_max: float | None = None
    time_wait_max: float | None = None


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
    # Between the proxy and the upstream: http, https or h2 (cases.PROTOCOLS).
    protocol: str = "http"
    rtt_ms: int = 0
    connections: ConnectionFigures | None = None
    network: NetworkRecord | None = None
    # Which proxy measured it: the copy of its case (0: the case's only row; 1, 2: an A/A pair) and
    # the fork of that row.
    copy: int = 0
    fork: int = 1
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

    @property
    def row(self) -> str:
        """The report's row: the variant, `#copy` for a case measured as two rows (an A/A pair)."""
        return self.variant + (f" #{self.copy}" if self.copy else "")

    @property
    def java_major(self) -> str:
        return (self.java or "?").split(".")[0]

    @property
    def variant(self) -> str:
        """The case with its dimensions as it ran: what a report row stands for. The release and the
        JDK are named only in a run of a plan with dimensions (as the proxy reported them)."""
        values = {d.field: getattr(self, d.run_field) for d in DIMENSIONS}
        if not self.dimensions:
            values.update(ktor="", java="")
        elif not values["ktor"]:
            values["ktor"] = "?"
        return Case.parse(self.case).with_dimensions(**values).name

    def title(self) -> str:
        fork = f" fork {self.fork}" if self.fork > 1 else ""
        return f"{self.row}{fork} {self.scenario} {self.load.label} #{self.repeat}"


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

    def to_json(self) -> dict:
        d = {
            "format": self.format,
            "started": self.started,
            "finished": self.finished,
            "interrupted": self.interrupted,
            "backend": self.backend,
            "plan": self.plan.to_json(),
            "environment": self.environment,
            "runs": [_plain(r) for r in self.runs],
            "wall_seconds": self.wall_seconds,
        }
        return d

    @classmethod
    def from_json(cls, data: dict) -> Results:
        if data.get("format", FORMAT) != FORMAT:
            raise ValueError(f"results.json has format {data.get('format')}; this lab reads format {FORMAT}")
        return _build(cls, data)

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


def _plain(value):
    """A dataclass as JSON-ready values (a Load with its label, a Case by its name, as the file
    always held them)."""
    if isinstance(value, Load):
        return value.to_json()
    if isinstance(value, Case):
        return value.name
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _build(cls, data):
    """`cls` from a JSON object: known keys only, nested dataclasses built by their type."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    kwargs = {}
    for name, value in data.items():
        if name not in known:
            continue
        kwargs[name] = _convert(hints[name], value)
    return cls(**kwargs)


def _convert(hint, value):
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(hint) or (object,)
        return [_convert(item, v) for v in value]
    if hint is Case:
        return Case.parse(value)
    if is_dataclass(hint):
        return _build(hint, value)
    return value
