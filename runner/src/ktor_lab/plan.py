"""What `lab run` will measure, checked before anything starts: load levels, the plan's cases and
their dimensions, the proxies (copies and forks) and the windows in the order they are taken.

A Plan refuses in one line what cannot run as given (ValueError) and skips, by name, the
combinations of its dimensions a case cannot take (`skipped`).
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from dataclasses import asdict, dataclass, field

from . import versions
from .cases import BY_FIELD, DIMENSIONS, SCENARIOS, Case
from .network import Network

# `lab run`'s default load: the same open-model rate for every row (the equal work its CPU per
# request and latency are compared at), below every recommended engine's capacity on 2 cores (per
# call, Apache5 carried about 590 rps at capacity; Java per call collapses at any rate), and its
# warm-up first at capacity, where the JIT compiles the proxy's path in 25-60 s.
DEFAULT_LOAD = "rate/400/40"
DEFAULT_WARM_FIRST = "closed/50/0"
# Its most seconds of warm-up, at each of the two loads: a window in which the JIT still compiles
# is left out of its row (rules.LEFT_OUT), so a warm-up need not wait for every last method.
DEFAULT_WARMUP_S = 60
LOAD_HELP = "closed/USERS/WAIT (e.g. closed/50/0, closed/1000/1-2) or rate/RPS[/USERS] (e.g. rate/500)"
# What --warm-first loads: the smallest file, which exercises the proxy's whole path fastest.
WARM_FIRST_SCENARIO = "static-small"


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

    @property
    def ramp_s(self) -> float:
        """Seconds over which Locust starts the users: at the rate model, as long as the users'
        paced requests take to start one each (users / rps), so that the first requests come as
        evenly as the rest; started all at once (in 1 s), they stay in step as waves that a window
        catches in part (600 users at 250 rps on a 2 s upstream read 220 rps after each start);
        1 s otherwise."""
        if self.model == "rate" and self.target_rps > 0:
            return max(1.0, self.users / self.target_rps)
        return 1.0

    def describe(self) -> str:
        if self.model == "rate":
            return f"rate model, {self.target_rps:g} rps target, {self.users} users"
        wait = "no wait" if self.wait_max == 0 else f"{self.wait_min:g}-{self.wait_max:g} s wait"
        return f"closed model, {self.users} users, {wait}"

    def to_json(self) -> dict:
        return {"label": self.label, **asdict(self)}


def parse_warm_first(text: str) -> Load | None:
    """--warm-first: a load level, or "" / "none" for no warm-up before the measured load's."""
    return None if text.strip() in ("", "none") else parse_load(text)


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
    warmup_s: int = 150  # lab verify's and lab swarm's; lab run's is DEFAULT_WARMUP_S (Plan.default)
    duration_s: int = 10
    workers: int = 0
    java_opts: str = "-Xmx512m"
    proxy_env: dict[str, str] = field(default_factory=dict)
    # Dimensions beyond the case (cases.DIMENSIONS: lab run --ktor, --java, --protocols, ...), by
    # field: the values each takes across every case; one not named keeps the case's own value.
    dims: dict[str, list] = field(default_factory=dict)
    # The network's other values, the same for every run (lab run --jitter, --bandwidth).
    jitter_ms: int = 0
    bandwidth_kbps: int = 0
    # Proxies per row: each warmed once, its windows pooled into the row (JMH's forks).
    forks: int = 1
    # At most this many more windows per proxy, scenario and load, measured one round at a time
    # while fewer than `repeats` of its windows would be kept (rules.LEFT_OUT).
    spare: int = 0
    # The case measured as two rows, the A/A pair that checks the method (its intervals include 0)
    # ("": none, unless --cases names a case twice).
    aa: str = ""
    # A fresh proxy for every window, warmed again each time (the compose backend always).
    fresh: bool = False
    # Seconds of unmeasured load before a window on a warm proxy that has idled (its pools refill;
    # the users start within the first second at the default rate).
    settle_s: int = 2
    # A load that warms each proxy once, on WARM_FIRST_SCENARIO, before its first warm-up at a
    # measured load (lab run --warm-first): at capacity the JIT compiles the proxy's path in
    # 25-60 s, at a fixed 100 rps or on the slow scenario it still compiles after minutes.
    warm_first: Load | None = None
    # Two rows are the same when their difference's interval lies within this share either way
    # (lab run --margin; confidence.MARGIN).
    margin: float = 0.10
    # The most seconds the run may take in all: after the plan's JVMs, the rows of the first
    # screen's comparisons that are neither different nor the same get one more JVM each, one round
    # at a time, while the next round fits (lab run --budget; 0: none).
    budget_s: int = 0
    # Where the proxy under load runs: `auto` (CPUs of its own, the lab's other parts on the rest),
    # `none` (wherever the kernel puts it), or the proxy's CPUs (lab run --cpus; natively only).
    cpus: str = "none"

    def __post_init__(self) -> None:
        self.cases = [c if isinstance(c, Case) else Case.parse(c) for c in self.cases]
        if unknown := [k for k in self.dims if k not in BY_FIELD]:
            raise ValueError(f"unknown dimension {unknown[0]!r}; dimensions: {', '.join(BY_FIELD)}")
        self.dims = {k: [BY_FIELD[k].parse(v) for v in vs] for k, vs in self.dims.items() if vs}
        for d in (BY_FIELD[k] for k in self.dims):  # each value parsed: a ValueError naming what is valid
            if named := [c for c in self.cases if d.value_of(c) != d.default]:
                raise ValueError(
                    f"case {named[0].name!r} names its {d.word}; give it there or with {d.option}, not both"
                )
            if set_too := [name for name, _ in d.variables if name in self.proxy_env]:
                raise ValueError(
                    f"{set_too[0]} is what {d.option} sets: give its values there (the rows then name "
                    "them), not with --set"
                )
        for case in self.cases:  # what a case names itself is asked for: refused, never skipped
            if why := case.refusal():
                raise ValueError(f"case {case.name!r}: {why}")
            if case.java:
                versions.jdk(case.java)
        for name in self.dims.get("java", []):
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
        if self.forks < 1 or self.settle_s < 0 or self.spare < 0:
            raise ValueError("forks must be at least 1, the settle and the spare windows at least 0")
        if self.aa and Case.parse(self.aa).id not in {c.id for c in self.cases}:
            raise ValueError(f"the A/A case {self.aa!r} is not one of the cases; give one of them, or none")
        if self.aa and not any(self.is_aa(c) for c in self.cases_to_run()):
            raise ValueError(
                f"the A/A case {self.aa!r} runs in no combination of these dimensions; give another (--aa)"
            )
        if not (self.cases and self.scenarios and self.loads):
            raise ValueError("the matrix is empty: give at least one case, scenario and load level")

    def is_aa(self, case: Case) -> bool:
        """Whether `case` (a combination) is the A/A case: by its lifetime and engine, or by its whole
        name when the A/A case names dimensions (`singleton-okhttp protocol h2`)."""
        want = Case.parse(self.aa)
        return case == want if want.dimensions() else case.id == want.id

    def combinations(self) -> list[Case]:
        """Every case with the plan's dimensions applied (each dimension's values, in the order they
        were given, outermost in the order of cases.DIMENSIONS; the cases innermost)."""
        lists = [[(d.field, v) for v in self.dims.get(d.field, [])] or [None] for d in DIMENSIONS]
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

    @classmethod
    def default(cls) -> Plan:
        """What `lab run` measures when given nothing: the recommended engines in both lifetimes,
        an A/A pair of the first, FORKS JVMs a row and WINDOWS windows a JVM, at DEFAULT_LOAD."""
        from .cases import DEFAULT_CASES
        from .confidence import FORKS, SPARE, WINDOWS

        cases = [Case.parse(c) for c in DEFAULT_CASES]
        return cls(
            cases,
            ["static-small"],
            [parse_load(DEFAULT_LOAD)],
            repeats=WINDOWS,
            forks=FORKS,
            spare=SPARE,
            aa=cases[0].id,
            warm_first=parse_load(DEFAULT_WARM_FIRST),
            warmup_s=DEFAULT_WARMUP_S,
        )

    def proxies(self) -> list[ProxySpec]:
        """Every proxy the plan measures, in order: each case to run (its forks), a case the plan
        names twice as two rows (copies 1 and 2), and the A/A case's second copy when the plan has
        no pair of its own. Forks outermost: every row's first JVM, then every row's second, so a
        batch of proxies up at once (measure.batches) holds one JVM of every row."""
        cases = self.cases_to_run()
        count = Counter(cases)
        pair = None
        if self.aa and max(count.values()) == 1:
            pair = next((c for c in cases if self.is_aa(c)), None)
        out, seen = [], Counter()
        for case in cases:
            seen[case] += 1
            copies = [seen[case]] if count[case] > 1 else ([1, 2] if case == pair else [0])
            out += [ProxySpec(case, copy, fork) for copy in copies for fork in range(1, self.forks + 1)]
        return sorted(out, key=lambda p: p.fork)

    def runs(self) -> list[Spec]:
        """Every window in the order it is measured: each round goes through every scenario, load
        and proxy before the next (A B C A B C: drift hits every row alike), the proxies of a
        round in an order of their own (seeded by the round: the same plan, the same order), so
        that no row always follows the same neighbour."""
        proxies = self.proxies()
        return [
            Spec(r + 1, p.case, scenario, load, p.copy, p.fork)
            for r in range(self.repeats)
            for scenario in self.scenarios
            for load in self.loads
            for p in random.Random(r).sample(proxies, len(proxies))
        ]

    @property
    def has_dimensions(self) -> bool:
        """True when a run's rows must name the release and the JDK (a dimension of the plan, or a
        case's own)."""
        return bool(self.dims) or any(c.dimensions() for c in self.cases)

    def to_json(self) -> dict:
        d = asdict(self)
        d["cases"] = [case.name for case in self.cases]
        d["loads"] = [load.to_json() for load in self.loads]
        d["warm_first"] = self.warm_first.to_json() if self.warm_first else None
        return d
