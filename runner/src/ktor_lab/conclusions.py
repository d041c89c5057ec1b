"""What a `lab run` concludes, apart from how it is written (run_report.py renders it).

The windows are grouped by scenario and load, then by row (a case with its dimensions; `#1` and
`#2` for two proxies of one case, an A/A pair); a window flagged LEFT_OUT is left out of its row.
Each figure of a row is an Estimate over its JVMs (forks) and windows, its spread pooled over the
group's rows (confidence.py). From them, in words a user can act on:

- the first screen (`screen`), on one figure, CPU per request, as one family of tests: which
  lifetime per engine, and which engines among the recommended lifetime's rows lead and which
  use clearly more, every difference with its interval;
- the other figures, each its own family;
- the risks by name: leaks, a deprecated engine, a connection per request, unlimited connections,
  rows whose rate was not the engine's;
- what the figures are not (loopback at 0 ms unless --rtt said otherwise);
- the A/A check: two proxies of one case, whose intervals should include 0.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from . import confidence, verdict
from .cases import DEPRECATED_ENGINES, DIMENSIONS, ENGINE_TITLES, HTTP1_ONLY, PROTOCOLS, Case
from .confidence import Comparison, Estimate
from .plan import Load, parse_load
from .results import Results, Run
from .rules import (
    BY_KEY,
    CHANGE_FIGURES,
    CHANGE_FIGURES_BY_DIMENSION,
    ENGINE_FLAGS,
    LEFT_OUT,
    NOT_ITS_COST,
    VERDICT_FIGURES,
    Figure,
    cpu_without_jit,
    generator_cost,
    jvm_values,
    kept_rate,
    kept_windows,
    why_not_compared,
)

# The connection figure a "connection per request" risk is read from: at or above this many new
# connections per 1,000 requests, the engine opened one for (nearly) every request.
CONNECTION_PER_REQUEST = 900


@dataclass
class Row:
    """One row of a scenario and load: a case with its dimensions (and its copy), over the windows
    of its forks that were not left out (LEFT_OUT)."""

    name: str
    runs: list[Run]
    figures: Mapping[str, Estimate] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    capacity: bool = True
    reasons: list[str] = field(default_factory=list)
    # Windows left out of `runs` and the figures (LEFT_OUT).
    left: list[Run] = field(default_factory=list)
    # How sentences name it: the case and only the dimensions its group's rows differ in (set by
    # groups(); the table's case column keeps `name`, every dimension).
    said: str = ""

    @property
    def called(self) -> str:
        return self.said or self.name

    @property
    def engine(self) -> str:
        """`cio`, or `cio ktor 3.4.0` where its group's rows differ in the release: how an answer
        that has said the lifetime names the row (an A/A pair's copies alike)."""
        return self.called.removesuffix(f" #{self.copy}").replace(self.case.id, self.case.engine, 1)

    @property
    def windows(self) -> int:
        return len(self.runs)

    @property
    def proxies(self) -> int:
        return len({r.fork for r in self.runs})

    @property
    def case(self) -> Case:
        return Case.parse(self.runs[0].variant)

    @property
    def copy(self) -> int:
        return self.runs[0].copy

    @property
    def network(self) -> str:
        """What lay between the proxy and nginx: `none`, or `RTT 20 ms +-2 ms, ...`."""
        record = self.runs[0].network
        return record.settings.describe() if record else "none"

    @property
    def label(self) -> str:
        """`okhttp, singleton`: how the first screen's chart names it."""
        return f"{self.case.engine}, {self.case.lifetime}" + (f" #{self.copy}" if self.copy else "")

    def comparable(self, figure: Figure) -> bool:
        return self.figures[figure.key].mean is not None and not set(self.flags) & set(figure.not_comparable)

    def why_not(self, figure: Figure) -> str:
        """`per-call-java (errors, unresponsive)`: why it is left out of a ranking on `figure`."""
        flags = [f for f in self.flags if f in figure.not_comparable]
        if not flags and self.runs and not self.kept_rate(load := self.runs[0].load):
            flags = [f"short of its {load.target_rps:g} rps"]
        return f"{self.called} ({', '.join(flags) or 'not measured'})"

    def per_request(self, key: str = "conns") -> bool:
        """Whether it opened one for (nearly) every request (CONNECTION_PER_REQUEST a 1,000): a new
        connection (`conns`), or a full TLS handshake (`tls_full`)."""
        return (self.figures[key].mean or 0) >= CONNECTION_PER_REQUEST

    def kept_rate(self, load: Load) -> bool:
        """At a fixed rate: whether every window reached it (the equal work the rows are compared at)."""
        return kept_rate(self.runs, load)


@dataclass
class Group:
    scenario: str
    load: Load
    rows: list[Row]
    margin: float = confidence.MARGIN  # the plan's: within it either way, two rows are the same
    forks: int = 0  # the plan's JVMs a row (0: as many as the rows have)
    # The first screen's level: ALPHA, or its close calls' look's (confidence.look_alpha) where the
    # run had a budget for them (its rounds at this scenario and load so far are its look).
    alpha: float = confidence.ALPHA
    # The run's pace, for what a longer one would decide: seconds a JVM more takes (its warm-up and
    # windows), the run's seconds so far, and windows a JVM (0: not known).
    round_s: float = 0.0
    elapsed_s: float = 0.0
    repeats: int = 0

    @property
    def heading(self) -> str:
        return f"{self.scenario}, {self.load.describe()}"

    @property
    def jvms(self) -> int:
        """The JVMs a row stands on by the plan: its forks, or fewer where every row lost one (the
        close calls' rows have more: `raced`)."""
        most = max((r.proxies for r in self.rows), default=0)
        return min(most, self.forks) if self.forks else most

    @property
    def raced(self) -> int:
        """The most JVMs a close call's row got beyond the plan's (lab run --budget)."""
        return max((r.proxies for r in self.rows), default=0) - self.jvms

    def pairs(self) -> list[tuple[Row, Row]]:
        """The A/A pairs: two rows of the same case (copies #1 and #2)."""
        first = {r.case: r for r in self.rows if r.copy == 1}
        return [(first[r.case], r) for r in self.rows if r.copy == 2 and r.case in first]

    @property
    def cpu_key(self) -> str:
        """The CPU per request the verdicts use: without the JIT's compiling when every row's JIT
        was seen, else with it (the compose backend)."""
        measured = all(r.figures["cpu_no_jit"].mean is not None for r in self.rows if r.figures["cpu"].mean)
        if not (measured and any(r.figures["cpu_no_jit"].mean for r in self.rows)):
            return "cpu"
        # With the generator's shared movement taken out where every window recorded it (`covaried`).
        adjusted = self.rows[0].figures["cpu_adjusted"].values != self.rows[0].figures["cpu_no_jit"].values
        return "cpu_adjusted" if adjusted else "cpu_no_jit"

    @property
    def verdict_figures(self) -> tuple[str, ...]:
        """VERDICT_FIGURES with this group's CPU per request (cpu_key)."""
        return tuple(self.cpu_key if k == "cpu_no_jit" else k for k in VERDICT_FIGURES)

    def compare(self, a: Row, b: Row, key: str) -> Comparison:
        """B against A on a figure: the t test with the spread pooled over the group's rows."""
        return confidence.compare(a.figures[key], b.figures[key])


def groups(results: Results) -> list[Group]:
    """Windows grouped by (scenario, load), then by row in the plan's order; verdicts by today's
    rules, whatever the runs recorded. Each figure's spread is pooled over the rows that can be
    compared on it (confidence.Pool)."""
    by_cell: dict[tuple[str, str], tuple[Load, dict[str, list[Run]]]] = {}
    for run in results.runs:
        run.verdict = verdict.judge(run)
        _, rows = by_cell.setdefault((run.scenario, run.load.label), (run.load, {}))
        rows.setdefault(run.row, []).append(run)
    order = [case.id for case in results.plan.cases]

    def place(name: str) -> int:
        case = name.split(" ")[0]
        return order.index(case) if case in order else len(order)

    out = []
    for (scenario, _), (load_level, rows) in by_cell.items():
        made: list[Row] = []
        figures = GroupFigures(made)
        for name in sorted(rows, key=place):  # stable: releases and JDKs in the order they ran
            runs, left = kept_windows(rows[name])
            made.append(
                Row(
                    name,
                    runs,
                    figures.row_figures(len(made)),
                    sorted({f for r in runs for f in r.verdict.flags}),
                    all(r.verdict.capacity for r in runs),
                    reasons(runs) + left_out(left, len(runs)) + spares(runs + left),
                    left,
                )
            )
        name_briefly(made)
        look = sum(1 for r in results.races if (r.scenario, r.load) == (scenario, load_level.label))
        alpha = confidence.look_alpha(look, results.race_looks)
        forks = results.plan.forks if results.races else 0  # a close call's rows have more
        out.append(Group(scenario, load_level, made, results.plan.margin, forks, alpha, *pace(results)))
    return out


class GroupFigures:
    """The figures of a group's rows, each made when it is first read, for every row at once: an
    Estimate over a row's kept windows and their JVMs, its spread pooled over the rows that can be
    compared on it (confidence.Pool), or its own where none is left; a row that cannot is given its
    centre alone (two JVMs, one of them collapsed, give an interval that says nothing)."""

    def __init__(self, rows: list[Row]):
        self.rows = rows
        self.made: dict[str, list[Estimate]] = {}

    def row_figures(self, index: int) -> RowFigures:
        return RowFigures(self, index)

    def estimates(self, key: str) -> list[Estimate]:
        if key not in self.made:
            f = BY_KEY[key]
            by_row = [jvm_values(f, row.runs) for row in self.rows]
            values, forks = [v for v, _ in by_row], [jvms for _, jvms in by_row]
            fitted = 0
            if f.covariate is not None and (adjusted := covaried(self.rows, f)) is not None:
                values, fitted = adjusted, 1
            bare = [Estimate.of(v, jvms, own=False) for v, jvms in zip(values, forks, strict=True)]
            ok = [
                bool(e.values) and not set(row.flags) & set(f.not_comparable)
                for row, e in zip(self.rows, bare, strict=True)
            ]
            pool = confidence.pool_of([e for e, good in zip(bare, ok, strict=True) if good])
            if pool is not None and fitted:  # the covariate's slope took a degree of freedom
                df = pool.df - 1
                pool = replace(pool, variance=pool.variance * pool.df / df, df=df) if df else None
            pools = [(pool or confidence.pool_of([e])) if g else None for e, g in zip(bare, ok, strict=True)]
            self.made[key] = [e.with_pool(p) for e, p in zip(bare, pools, strict=True)]
        return self.made[key]


def covaried(rows: list[Row], f: Figure) -> list[list[float | None]] | None:
    """Each row's windows of `f` with its covariate's movement taken out (ANCOVA on logarithms): the
    slope of the figure on the covariate within each JVM, pooled over the rows, and each window moved
    by it to the group's mean covariate. None where a window lacks either (the compose backend's
    generator figures, say), or the covariate never moved."""
    pairs = [[(f.get(r), f.covariate(r)) for r in row.runs] for row in rows]
    if not pairs or any(not (y and y > 0 and x and x > 0) for row in pairs for y, x in row):
        return None
    logs = [[(math.log(y), math.log(x)) for y, x in row] for row in pairs]
    sxy = sxx = 0.0
    for row, runs in zip(logs, (row.runs for row in rows), strict=True):
        by: dict[int, list[tuple[float, float]]] = {}
        for pair, r in zip(row, runs, strict=True):
            by.setdefault(r.fork, []).append(pair)
        for jvm in by.values():
            my, mx = statistics.fmean(y for y, _ in jvm), statistics.fmean(x for _, x in jvm)
            sxy += math.fsum((y - my) * (x - mx) for y, x in jvm)
            sxx += math.fsum((x - mx) ** 2 for _, x in jvm)
    if not sxx:
        return None
    slope, centre = sxy / sxx, statistics.fmean(x for row in logs for _, x in row)
    return [[math.exp(y - slope * (x - centre)) for y, x in row] for row in logs]


class RowFigures(Mapping[str, Estimate]):
    """One row's figures by key (rules.BY_KEY), made by its group when first read."""

    def __init__(self, group: GroupFigures, index: int):
        self.group, self.index = group, index

    def __getitem__(self, key: str) -> Estimate:
        return self.group.estimates(key)[self.index]

    def __iter__(self):
        return iter(BY_KEY)

    def __len__(self) -> int:
        return len(BY_KEY)


def pace(results: Results) -> tuple[float, float, int]:
    """What one more JVM took in this run (its mean warm-up, and its windows each with the plan's
    settle), the run's seconds in all, and its windows a JVM; zeros where the run did not record
    them (a run kept before its wall time was)."""
    firsts = [r.warmup.seconds for r in results.runs if r.repeat == 1 and r.warmup.seconds]
    windows = [r.window.seconds for r in results.runs if r.window.seconds]
    if not firsts or not windows or not results.wall_seconds:
        return 0.0, 0.0, 0
    repeats = results.plan.repeats
    window_s = statistics.fmean(windows) + results.plan.settle_s + 2  # measure.WINDOW_OVERHEAD_S
    return statistics.fmean(firsts) + repeats * window_s, results.wall_seconds, repeats


def name_briefly(rows: list[Row]) -> None:
    """Each row's `said`: its case with the dimensions not every row of the group shares, and its
    copy (`singleton-cio #1` where every row ran Ktor 3.5.2 on JDK 17 at RTT 80 ms: the group's
    heading says those once)."""
    dims = [r.case.dimensions() for r in rows]
    common = set.intersection(*(set(d.items()) for d in dims)) if dims else set()
    for r, d in zip(rows, dims, strict=True):
        own = [f"{word} {value}" for word, value in d.items() if (word, value) not in common]
        r.said = " ".join([r.case.id, *own]) + (f" #{r.copy}" if r.copy else "")


def left_out(left: list[Run], n: int) -> list[str]:
    """Why windows were left out of a row's figures: per flag, how many and the first reason."""
    if not left:
        return []
    by_flag: dict[str, list[str]] = {}
    for run in left:
        for flag, why in zip(run.verdict.flags, run.verdict.reasons, strict=True):
            if flag in LEFT_OUT:
                by_flag.setdefault(flag, []).append(why)
    said = "; ".join(f"{flag} in {len(whys)} ({whys[0]})" for flag, whys in sorted(by_flag.items()))
    return [
        f"{len(left)} of {len(left) + n} windows left out of its figures, which are its other {n}: {said}"
    ]


def spares(runs: list[Run]) -> list[str]:
    """How many of a row's windows were spares, measured because others were left out."""
    n = sum(r.spare for r in runs)
    return [f"{n} of its windows are spares, measured in place of those left out (--spare)"] if n else []


def reasons(runs: list[Run]) -> list[str]:
    """Why a row is flagged: per flag, the first window's reason, and in how many of its windows."""
    by_flag: dict[str, list[str]] = {}
    for run in runs:
        for flag, why in zip(run.verdict.flags, run.verdict.reasons, strict=True):
            by_flag.setdefault(flag, []).append(why)
    return [
        whys[0] + (f" (in {len(whys)} of {len(runs)} windows)" if len(runs) > 1 else "")
        for _, whys in sorted(by_flag.items())
    ]


# --- one figure: who leads, who is clearly behind, with the interval of every difference ---------


@dataclass
class Standing:
    """The rows of a group on one figure, tested pairwise as one family: the leaders (no row is
    clearly better than them) and those clearly behind, each with its comparison against the best
    (`family` adjusted), and the rows left out of the ranking."""

    figure: Figure
    leaders: list[tuple[Row, Comparison | None]]
    behind: list[tuple[Row, Comparison]]
    left_out: list[Row]
    detectable: float | None = None  # the smallest difference found POWER of the time
    # Where `detectable` is over COMPARED_UP_TO: what a run would need to find one of that size.
    longer: str = ""
    unsure: bool = False  # some comparison had too few degrees of freedom to state `detectable`

    @property
    def best(self) -> Row | None:
        return self.leaders[0][0] if self.leaders else None

    @property
    def values_only(self) -> bool:
        """Shown as values, not compared: the run cannot resolve it, or cannot say what it would."""
        return bool(self.longer) or (self.unsure and self.detectable is None)


def better(figure: Figure, c: Comparison, margin: float | None = None) -> bool:
    """Whether B is clearly better than A in `c` (and, given a `margin`, not the same within it)."""
    named = c.clear if margin is None else c.decision(margin) == confidence.DIFFERENT
    if not named or c.difference is None:
        return False
    return c.difference > 0 if figure.better == "higher" else c.difference < 0


def ranked(group: Group, figure: Figure, rows: list[Row] | None = None) -> tuple[list[Row], list[Row]]:
    """The rows a figure ranks (first copies of an A/A pair only) and those left out: flagged
    (Figure.not_comparable) or, at a fixed rate, short of it (not the equal work)."""
    rows = [r for r in (group.rows if rows is None else rows) if r.copy <= 1]
    measured = [r for r in rows if r.figures[figure.key].mean is not None]
    ok = [r for r in measured if r.comparable(figure) and (figure.key == "rps" or r.kept_rate(group.load))]
    return ok, [r for r in measured if r not in ok]


Pooled = dict[str, Estimate]


def pooled(rows: list[Row], key: str) -> Pooled:
    """The rows' estimates of a figure, by name, with the spread pooled over these rows alone (the
    rows a ranking compares: a wild row elsewhere in the group does not widen their intervals)."""
    pool = confidence.pool_of([r.figures[key] for r in rows])
    return {r.name: r.figures[key].with_pool(pool) if pool else r.figures[key] for r in rows}


def pairwise(est: Pooled, rows: list[Row]) -> dict[tuple[str, str], Comparison]:
    """Every pair of `rows` (B against A), unadjusted, keyed by their names in order."""
    return {
        (a.name, b.name): confidence.compare(est[a.name], est[b.name])
        for a, b in itertools.combinations(rows, 2)
    }


def standing(
    group: Group,
    figure: Figure,
    rows: list[Row] | None = None,
    tests: dict[tuple[str, str], Comparison] | None = None,
    est: Pooled | None = None,
    margin: float | None = None,
) -> Standing:
    """`figure` over `rows` (default: the group's), the spread pooled over the rows it ranks
    (`est`, else made here). `tests`: the pairs already adjusted in a larger family (the first
    screen's); else the pairs are their own family."""
    ok, out = ranked(group, figure, rows)
    est = est if est is not None else pooled(ok, figure.key)
    if tests is None:
        raw = pairwise(est, ok)
        tests = dict(zip(raw, confidence.adjust(list(raw.values())), strict=True))
    order = sorted(ok, key=lambda r: r.figures[figure.key].mean, reverse=figure.better == "higher")
    if not order:
        return Standing(figure, [], [], out)

    def against(a: Row, b: Row) -> Comparison:
        """B against A, with the family's p and interval level."""
        key = (a.name, b.name) if (a.name, b.name) in tests else (b.name, a.name)
        c = tests[key]
        mine = confidence.compare(est[a.name], est[b.name])
        return replace(mine, p=c.p, family=c.family, alpha=c.alpha).interval_at(c.level)

    beaten = {r.name for a in order for r in order if a is not r and better(figure, against(r, a), margin)}
    best = order[0]
    leaders = [(r, None if r is best else against(best, r)) for r in order if r.name not in beaten]
    behind = [(r, against(best, r)) for r in order if r.name in beaten]
    found = [(d, c) for c in tests.values() if (d := c.detectable()) is not None]
    detectable, widest = max(found, key=lambda dc: dc[0], default=(None, None))
    longer = length_to_detect(widest, COMPARED_UP_TO) if detectable and detectable > COMPARED_UP_TO else ""
    unsure = any(c.df is not None and c.df < confidence.POWER_DF for c in tests.values())
    return Standing(figure, leaders, behind, out, detectable, longer, unsure)


# A figure whose smallest detectable difference at the run's length is above this share is shown as
# values, not compared: an interval such as -85.8% to +863.1% decides nothing.
COMPARED_UP_TO = 1.0


def length_to_detect(c: Comparison, share: float) -> str:
    """`lab run --forks 7`: the JVMs a row (or windows a JVM, where the windows are the units) with
    which `c`'s comparison would find a difference of `share` POWER of the time, its units growing
    as the square of how far its detectable difference is from `share` (at this run's t: a little
    more than needed)."""
    pool = c.a.pool
    d = c.detectable()
    if pool is None or d is None:
        return ""
    x, want = (math.log1p(d), math.log1p(share)) if c.log else (d, share)
    units = len(c.a.units_of(pool))
    need = math.ceil(units * (x / want) ** 2)
    return f"lab run --forks {need}" if pool.by_fork else f"lab run --forks 1 --windows {need}"


def value_cell(row: Row, figure: Figure) -> str:
    """`3,412 ±1.2%` (the centre and half its 95% interval, as a share: the interval is made on
    the logarithms; its ends where it is wider than the centre: `1.95 (0.0041 to 930.00)`),
    `0.1 ±2.0` (in the figure's units: made on the values themselves, where a window is 0, as
    counts of new connections are for a singleton), or `3,412` without one."""
    e = row.figures[figure.key]
    if e.mean is None:
        return "-"
    text = f"{e.mean:,.{figure.digits}f}"
    if not float(text.replace(",", "")):
        text = text.lstrip("-")  # a centre of 0 less a rounding error (a count no window saw) is 0
    if e.low is None or e.high is None:
        return text
    if e.pool is not None and not e.pool.log:
        return text + f" ±{(e.high - e.low) / 2:,.{figure.digits}f}"
    if e.half_width is not None and e.half_width > 1:  # wider than the centre: its ends say more
        low = f"{e.low:,.{figure.digits}f}" if e.low >= 10**-figure.digits else f"{e.low:.2g}"
        return f"{text} ({low} to {e.high:,.{figure.digits}f})"
    return text + (f" ±{e.half_width:.1%}" if e.half_width is not None else "")


def standing_sentence(s: Standing) -> str:
    """One figure in words: who leads (with the interval of each leader's difference from the best),
    who is clearly behind (with theirs), which rows were left out and why, and what the run could
    have found."""
    f = s.figure
    head = f"{f.heading} ({f.better} is better)" if f.better else f.heading
    out = f" Left out: {', '.join(r.why_not(f) for r in s.left_out)}." if s.left_out else ""
    if s.values_only:
        return f"{head}: not compared ({not_compared_why(s)}): {values_of(s)}.{out}"
    if not s.leaders:
        if f.key == "rps":
            return f"{head}: no row's rate is its capacity (flags below): rps ranks nothing here.{out}"
        return f"{head}: no row could be ranked.{out}"
    best, its = s.best, value_cell(s.best, f)
    if len(s.leaders) + len(s.behind) == 1:
        return f"{head}: only {best.called} ({its}) could be ranked; nothing to compare it with.{out}"
    if len(s.leaders) == 1:
        text = f"{head}: {best.called} leads with {its}"
    else:
        tied = [(r, c) for r, c in s.leaders[1:] if c is not None]
        ties = "; ".join(f"{r.called} {value_cell(r, f)}: {c.words()}" for r, c in tied)
        text = (
            f"{head}: {best.called} {its} and {len(s.leaders) - 1} more lead, no clear difference "
            f"among them (against {best.called}: {ties})"
        )
    if s.behind:
        text += f"; clearly behind {best.called}: " + "; ".join(
            f"{r.called} {value_cell(r, f)} ({c.words()})" for r, c in s.behind
        )
    text += "."
    if s.detectable is not None:
        text += (
            f" This run finds a difference of {s.detectable:.0%} or more {confidence.POWER:.0%} of the time."
        )
    return text + out


def not_compared_why(s: Standing) -> str:
    """Why a figure is shown as values: the difference the run would find, or too few degrees of freedom."""
    if not s.longer:
        return UNSURE_WHY
    return (
        f"this run finds a difference of {s.detectable:.0%} or more {confidence.POWER:.0%} of the time; "
        f"{s.longer} would find one of {COMPARED_UP_TO:.0%}"
    )


def values_of(s: Standing) -> str:
    """Each ranked row's value, best first: `a 24.71 ±28.1%; b 62.61 ±28.1%`."""
    f = s.figure
    rows = sorted(
        (r for r, _ in s.leaders + s.behind),
        key=lambda r: r.figures[f.key].mean,
        reverse=f.better == "higher",
    )
    return "; ".join(f"{r.called} {value_cell(r, f)}" for r in rows)


# Where a figure's comparisons rest on too few degrees of freedom to state a power: it is shown as
# values (as where its detectable difference is over COMPARED_UP_TO), and the first screen says so.
UNSURE_WHY = (
    f"under {confidence.POWER_DF} degrees of freedom between JVMs, this run cannot say which difference "
    "it would find; more JVMs a row (`lab run --forks 3`) can"
)
UNSURE = f"Between two engines, {UNSURE_WHY}."


# --- the first screen: one figure, one family -------------------------------------------------


def pairs_by_engine(group: Group) -> list[tuple[Row, Row]]:
    """(singleton, per-call) rows of the same engine and dimensions, first copies only."""
    rows = {(r.case, r.copy): r for r in group.rows}
    out = []
    for (case, copy), row in rows.items():
        if case.lifetime == "singleton" and copy <= 1:
            other = case.with_dimensions(lifetime="per-call")
            match = rows.get((other, 0)) or rows.get((other, 1))
            if match is not None:
                out.append((row, match))
    return out


def recommended_rows(group: Group) -> tuple[str, list[Row]]:
    """The rows the engines are ranked among: the singletons when there are any (and A/A copies
    #2 left out: the pair's first stands for the case), else every row."""
    rows = [r for r in group.rows if r.copy <= 1]
    singletons = [r for r in rows if r.case.lifetime == "singleton"]
    if singletons and len(singletons) < len(rows):
        return "singleton", singletons
    return "", rows


@dataclass
class Screen:
    """What the first screen claims, all on the primary figure (CPU per request, at the group's
    load) and as one family of tests: per engine, per call against singleton; and the engines among
    the recommended lifetime's rows, pairwise."""

    group: Group
    figure: Figure
    lifetimes: list[tuple[Row, Row, Comparison | None]]  # None: one of the two left out
    engines: Standing
    which: str  # "singleton", or "" when the rows are ranked without a lifetime

    @property
    def family(self) -> int:
        cs = [c for *_, c in self.lifetimes if c is not None and c.p is not None]
        cs += [c for _, c in self.engines.leaders + self.engines.behind if c is not None]
        return max((c.family for c in cs), default=1)

    @property
    def tests(self) -> int:
        """How many comparisons the screen made (0: a row alone, nothing to compare it with)."""
        lives = [c for *_, c in self.lifetimes if c is not None]
        return len(lives) + len([c for _, c in self.engines.leaders + self.engines.behind if c is not None])

    def claims(self) -> list[str]:
        """Every difference the first screen names: `lifetime cio`, `engines okhttp < cio`."""
        m = self.group.margin
        out = [
            f"lifetime {s.case.engine}"
            for s, _, c in self.lifetimes
            if c is not None and c.decision(m) == confidence.DIFFERENT
        ]
        best = self.engines.best
        out += [f"engines {best.name} < {r.name}" for r, _ in self.engines.behind if best]
        return out

    def decisions(self) -> list[tuple[str, Row, Row, Comparison]]:
        """Every comparison the first screen depends on, with what it decided (confidence.DIFFERENT,
        SAME or UNKNOWN at the group's margin: Comparison.decision): per engine, per call against
        singleton; the best engine against each other ranked one. `lifetime`/`engines`, the two
        rows, the comparison."""
        out = [("lifetime", s, p, c) for s, p, c in self.lifetimes if c is not None]
        best = self.engines.best
        out += [
            ("engines", best, r, c) for r, c in self.engines.leaders + self.engines.behind if c is not None
        ]
        return out

    def undecided(self) -> list[Row]:
        """The rows of the comparisons that are neither different nor the same yet: what a close
        call needs more JVMs of (lab run --budget)."""
        m = self.group.margin
        rows = {
            r.name: r
            for kind, a, b, c in self.decisions()
            if c.decision(m) == confidence.UNKNOWN
            for r in (a, b)
        }
        return list(rows.values())


def screen(group: Group) -> Screen:
    f = BY_KEY[group.cpu_key]
    which, rows = recommended_rows(group)
    ok, _ = ranked(group, f, rows)
    pairs = pairs_by_engine(group)
    lifetime_ok = [(s, p) for s, p in pairs if ranked(group, f, [s, p])[0] == [s, p]]
    est = pooled(list({r.name: r for r in ok + [r for pair in lifetime_ok for r in pair]}.values()), f.key)
    raw_life = [confidence.compare(est[s.name], est[p.name]) for s, p in lifetime_ok]
    raw_engines = pairwise(est, ok)
    adjusted = confidence.adjust(raw_life + list(raw_engines.values()), group.alpha)
    life = dict(zip([(s.name, p.name) for s, p in lifetime_ok], adjusted[: len(raw_life)], strict=True))
    tests = dict(zip(raw_engines, adjusted[len(raw_life) :], strict=True))
    lifetimes = [(s, p, life.get((s.name, p.name))) for s, p in pairs]
    return Screen(group, f, lifetimes, standing(group, f, rows, tests, est, group.margin), which)


def ratio(c: Comparison) -> str:
    """`2.4x (2.1-2.8x)`: B over A with its interval."""

    def x(v: float) -> str:
        return f"{v:.2f}" if v < 10 else f"{v:.0f}"

    text = f"{x(1 + c.difference)}x"
    if c.low is not None and c.high is not None:
        text += f" ({x(1 + c.low)}-{x(1 + c.high)}x)"
    return text


def on_fewer_jvms(group: Group, text: str, *rows: Row) -> str:
    """`text` (a ratio or a difference with its interval in parentheses) with the rows among
    `rows` measured on fewer JVMs than the group's others (their windows left out) said inside it:
    `1.53x (1.32-1.77x, per-call-java on 1 of 2 JVMs)`."""
    most = group.jvms
    notes = ", ".join(f"{r.called} on {r.proxies} of {most} JVMs" for r in rows if r.proxies < most)
    if not notes:
        return text
    return f"{text[:-1]}, {notes})" if text.endswith(")") else f"{text} ({notes})"


def lifetime_answer(s: Screen) -> str | None:
    """Which lifetime, per engine: per call against singleton on the primary figure, with the
    interval of the ratio; those the same within the margin, those not decided, and those left out,
    by name."""
    if not s.lifetimes:
        return None
    g, f, m = s.group, s.figure, s.group.margin
    tested = [(a, b, c, c.decision(m)) for a, b, c in s.lifetimes if c is not None]
    dearer = [(a, b, c) for a, b, c, d in tested if d == confidence.DIFFERENT and c.difference > 0]
    cheaper = [(a, b, c) for a, b, c, d in tested if d == confidence.DIFFERENT and c.difference < 0]
    same = [(a, b, c) for a, b, c, d in tested if d == confidence.SAME]
    untold = [(a, b, c) for a, b, c, d in tested if d == confidence.UNKNOWN]
    out = [(a, b) for a, b, c in s.lifetimes if c is None]

    def said(rows, text) -> str:
        return ", ".join(f"{a.engine} {on_fewer_jvms(g, text(c), a, b)}" for a, b, c in rows)

    parts = [
        *(
            [f"a client per call cost {said(dearer, ratio)} the {f.said} of one client for the process"]
            * bool(dearer)
        ),
        *([f"per call cost less for {said(cheaper, ratio)}"] * bool(cheaper)),
        *([f"the same within {m:.0%} for {said(same, lambda c: f'({c.tost_span()})')}"] * bool(same)),
        *([f"not decided for {said(untold, lambda c: f'(between {between(c)})')}"] * bool(untold)),
    ]
    if out:
        whys = [", ".join(r.why_not(f) for r in (a, b) if not ranked(g, f, [r])[0]) for a, b in out]
        parts.append(
            "not compared: " + ", ".join(f"{a.engine} ({why})" for (a, _), why in zip(out, whys, strict=True))
        )
    head = (
        "Lifetime: keep one HttpClient for the process (singleton)"
        if dearer and not cheaper
        else "Lifetime: per call was cheaper for some engines"
        if cheaper
        else f"Lifetime: one client or a client per call, the same within {m:.0%}"
        if same and not untold
        else "Lifetime: not decided between one client and a client per call"
        if untold
        else "Lifetime"  # no pair compared: the parts say so
    )
    return f"{head}: {'; '.join(parts)}."


def engines_answer(s: Screen) -> str | None:
    """Which engines, among the recommended lifetime's rows, on the primary figure."""
    st = s.engines
    if len(st.leaders) + len(st.behind) + len(st.left_out) < 2:
        return None
    among = f"Among {s.which} clients" if s.which else "Among the rows"
    f = s.figure
    out = f" Left out: {', '.join(r.why_not(f) for r in st.left_out)}." if st.left_out else ""
    if len(st.leaders) + len(st.behind) < 2:
        return f"{among}, no engine can be ranked on {f.words or f.heading}.{out}"
    g, best = s.group, st.best
    if not st.behind:
        return f"{among}, {leaders_said(s)} at this load.{out}"
    text = f"{among}, " + leaders_said(s)
    text += "; clearly more: " + ", ".join(
        f"{r.engine} {on_fewer_jvms(g, f'{c.difference:+.0%} ({c.span()})', r, best)}" for r, c in st.behind
    )
    return text + "." + out


def leaders_said(s: Screen) -> str:
    """The leaders on the primary figure in one clause: `okhttp uses the least CPU per request`,
    `okhttp and apache5 use the least ..., the same within 10% (apache5 -4.0% to +7.1% against
    okhttp)`, or `okhttp or apache5 uses the least ...: not decided (apache5 between -13% and +22%
    of okhttp; lab run --budget 48m would decide it)`."""
    st, g, m = s.engines, s.group, s.group.margin
    best, words = st.best, s.figure.words or s.figure.heading
    others = [(r, c) for r, c in st.leaders[1:] if c is not None]
    same = [(r, c) for r, c in others if c.decision(m) == confidence.SAME]
    open_ = [(r, c) for r, c in others if c.decision(m) != confidence.SAME]
    if not others:
        return f"{best.engine} uses the least {words}"
    if not open_:
        names = " and ".join(r.engine for r, _ in st.leaders)
        spans = ", ".join(f"{r.engine} {on_fewer_jvms(g, c.tost_span(), r, best)}" for r, c in same)
        return f"{names} use the least {words}, the same within {m:.0%} ({spans} against {best.engine})"
    names = " or ".join([best.engine, *(r.engine for r, _ in open_)])
    spans = "; ".join(
        f"{r.engine} {on_fewer_jvms(g, f'between {between(c)}', r, best)} of {best.engine}" for r, c in open_
    )
    hint = budget_hint(g, [c for _, c in open_])
    text = f"{names} uses the least {words}: not decided ({spans}{f'; {hint}' if hint else ''})"
    if same:
        text += f"; the same within {m:.0%} as {best.engine}: " + ", ".join(
            f"{r.engine} ({c.tost_span()})" for r, c in same
        )
    return text


def between(c: Comparison) -> str:
    """`-13% and +22%`: the ends of a comparison's interval."""
    return f"{c.low:+.0%} and {c.high:+.0%}"


def budget_hint(group: Group, undecided: list[Comparison]) -> str:
    """`lab run --budget 48m would decide it`: about how long a run would take in all to decide
    `undecided` at the pace this one measured (a JVM more of each of its two rows a round), were
    each difference what it read; "" where this run's pace is not known."""
    if not group.round_s or not undecided:
        return ""
    found = [rounds_to_decide(c, group.margin, group.repeats) for c in undecided]
    if None in found:
        return ""
    rounds = max(found)
    minutes = math.ceil((group.elapsed_s + rounds * 2 * group.round_s) / 60)
    return f"lab run --budget {minutes}m would decide {'it' if len(undecided) == 1 else 'them'}"


def rounds_to_decide(c: Comparison, margin: float, repeats: int) -> int | None:
    """Rounds of one more JVM a row (of `repeats` windows) after which `c`'s interval, narrowing as
    its units grow, would leave out 0 or lie within `margin`, were its difference what it read;
    None where it cannot say (no interval, or a difference at the margin itself)."""
    pool = c.a.pool
    if c.se is None or c.d is None or not c.se or c.low is None or c.high is None or pool is None:
        return None
    t = ((math.log1p(c.high) if c.log else c.high) - c.d) / c.se  # the interval's own quantile
    room = max(abs(c.d), math.log1p(margin) - abs(c.d))
    if room <= 0:
        return None
    grow = (t * c.se / room) ** 2  # how many times each row's units must grow
    units = len(c.a.units_of(pool))
    per_round = 1 if pool.by_fork else repeats
    return max(1, math.ceil((grow - 1) * units / per_round)) if grow > 1 else 0


def family_line(s: Screen) -> str:
    """How the first screen's claims were tested, in one line: the JVMs (and the close calls'), the
    units, the family, the margin."""
    g, f = s.group, s.figure
    jvms = (
        f"{g.jvms} JVMs a row, each warmed once"
        if g.jvms > 1
        else "one JVM a row: the intervals are of that JVM, not of the engine (lab run --forks 2)"
    )
    if g.raced:
        jvms += f", and up to {g.raced} more for a close call's rows (--budget)"
    pool = g.rows[0].figures[f.key].pool if g.rows else None
    units = (
        "each window, less its block's shift (the JVMs spread no more than their windows explain)"
        if pool is not None and pool.pooled
        else "each JVM's mean, less its block's shift"
    )
    return (
        f"How: {f.said} of a row is the geometric mean of its JVMs' windows ({jvms}); "
        f"{f'the {s.family} comparisons above are' if s.family > 1 else 'the comparison above is'} "
        f"one family: t tests on {units}, the spread pooled over the rows, p adjusted by Benjamini-Hochberg, "
        "and each interval of a difference adjusted with it, so that it excludes 0 exactly when the "
        f"difference is named; two rows are the same where it lies within {g.margin:.0%} either way."
        + (f" {power}" if (power := engines_power(s)) else "")
    )


def engines_power(s: Screen) -> str:
    """What the first screen could have missed: the smallest difference between two engines on its
    figure that it finds POWER of the time; "" when it made no such test."""
    if s.engines.detectable is None:
        return UNSURE if s.engines.unsure else ""
    return (
        f"Between two engines this run finds a difference of {s.engines.detectable:.0%} or more "
        f"{confidence.POWER:.0%} of the time."
    )


def other_figures(group: Group) -> list[str]:
    """The verdict's other figures (rps when it is capacity, p99, threads, heap), each its own
    family: details, not the first screen's answer."""
    rows = recommended_rows(group)[1]
    out = []
    for key in group.verdict_figures:
        if key == group.cpu_key:
            continue
        if key == "rps" and group.load.model == "rate":
            short = row_names([r for r in group.rows if not r.kept_rate(group.load)])
            out.append(
                f"rps: every row was given {group.load.target_rps:g} rps, the same work, so rps ranks nothing"
                + (
                    f"; short of it in some window, and left out of the comparisons: {', '.join(short)}."
                    if short
                    else "."
                )
            )
            continue
        out.append(standing_sentence(standing(group, BY_KEY[key], rows)))
    return out


def row_names(rows: list[Row]) -> list[str]:
    """The rows' names for a sentence, an A/A pair named once (`singleton-cio`) where both its
    copies are among them."""
    out: list[str] = []
    for r in rows:
        both = r.copy and sum(x.case == r.case for x in rows) > 1
        name = r.called.removesuffix(f" #{r.copy}") if both else r.called
        if name not in out:
            out.append(name)
    return out


def risks(results: Results, group: Group) -> list[str]:
    """What a user must know before choosing, by name."""
    out = []
    if leaks := row_names([r for r in group.rows if "leak" in r.flags]):
        out.append(f"Leak: kept threads or open files after the load: {', '.join(leaks)}.")
    if stops := [said for r in group.rows if (said := stopped_answering(r))]:
        out.append(f"Stopped answering under load: {'; '.join(stops)}.")
    if logged := row_names([r for r in group.rows if "proxy-exceptions" in r.flags]):
        out.append(
            f"Exceptions: the proxy logged exceptions with a stack trace (proxy-exceptions, named in the "
            f"notes below the table): {', '.join(logged)}."
        )
    deprecated = sorted({r.case.engine for r in group.rows if r.case.engine in DEPRECATED_ENGINES})
    for engine in deprecated:
        notes = {r.runs[0].proxy.settings.get("engine_note") for r in group.rows if r.case.engine == engine}
        notes.discard(None)
        out.append(
            f"Deprecated: {ENGINE_TITLES[engine]} is deprecated in favour of apache5"
            + (f" ({'; '.join(sorted(notes))})" if notes else "")
            + "."
        )
    per_request = row_names([r for r in group.rows if r.per_request()])
    if per_request:
        out.append(
            f"A connection per request: {', '.join(per_request)} opened one for (nearly) every request "
            f"(at least {CONNECTION_PER_REQUEST} per 1,000): cheap on loopback, a round trip each "
            "at a distance."
        )
    if any(r.case.engine == "java" for r in group.rows):
        out.append(
            "Unlimited connections: the JDK's client (java) cannot limit its connections in flight; "
            "the lab's CLIENT_MAX_CONNECTIONS does not apply to it."
        )
    return out + measurement_risks(group)


def stopped_answering(row: Row) -> str:
    """`per-call-java in the warm-up at capacity (closed/50/0, --warm-first) of 1 of its 2 JVMs; of
    that JVM's 3 windows, 3 are left out of its figures`: the JVMs of a row that stopped answering
    in a warm-up (verdict.stopped_answering), the load (and scenario, where not the row's) they
    stopped at, and what became of their windows; "" when none did. The engine failed at that
    load: what a user at it would meet, and why the row stands on fewer JVMs."""
    runs = [r for r in row.runs + row.left if verdict.stopped_answering(r.warmup)]
    if not runs:
        return ""
    loads = sorted({warm_up_load(r) for r in runs})
    forks, jvms = {r.fork for r in runs}, len({r.fork for r in row.runs + row.left})
    those = "that JVM's" if len(forks) == 1 else "those JVMs'"
    failed = [r for r in runs if r not in row.left and set(r.verdict.flags) & set(ENGINE_FLAGS)]
    few = [r for r in runs if r not in row.left and r not in failed]
    fate = []
    if left := len(runs) - len(failed) - len(few):
        fate.append(f"{left} {'is' if left == 1 else 'are'} left out of its figures")
    if failed:
        flags = sorted({f for r in failed for f in r.verdict.flags if f in ENGINE_FLAGS})
        fate.append(
            f"{len(failed)} kept as it failed in {'it' if len(failed) == 1 else 'them'} ({', '.join(flags)})"
        )
    if few:
        fate.append(f"{len(few)} kept as too few of its other windows could be")
    return (
        f"{row.called} in the warm-up {' and '.join(loads)} of {len(forks)} of its {jvms} JVMs; "
        f"of {those} {len(runs)} windows, {', '.join(fate)}"
    )


def warm_up_load(run: Run) -> str:
    """The load a warm-up that stopped answering ran at: `at capacity (closed/50/0, --warm-first)`,
    `at rate/100/40 (--warm-first) on static-small`, or the window's own `at rate/400/40`."""
    w = run.warmup
    if w.first_end != "stopped answering":
        return f"at {run.load.label}"
    first = parse_load(w.first_load)
    said = (
        f"at capacity ({w.first_load}, --warm-first)"
        if first.model == "closed" and not first.wait_max
        else f"at {w.first_load} (--warm-first)"
    )
    return said + (f" on {w.first_scenario}" if w.first_scenario and w.first_scenario != run.scenario else "")


def measurement_risks(group: Group) -> list[str]:
    """What set a row's figures besides its engine: the rate, missed scrapes, the generator."""
    out = []

    # At a fixed rate, reaching it (`target`) is the equal work, not a risk.
    def rate_flags(r: Row) -> list[str]:
        return [
            f
            for f in r.flags
            if f in verdict.RATE_FLAGS and not (f == "target" and group.load.model == "rate")
        ]

    if not_capacity := [r for r in group.rows if rate_flags(r)]:
        said: list[str] = []
        for r in not_capacity:  # an A/A pair once where both copies have the same flags
            alike = [x for x in not_capacity if x.case == r.case and rate_flags(x) == rate_flags(r)]
            name = r.called.removesuffix(f" #{r.copy}") if r.copy and len(alike) > 1 else r.called
            if (entry := f"{name} ({', '.join(rate_flags(r))})") not in said:
                said.append(entry)
        out.append("Rate not the engine's: " + "; ".join(said) + ".")
    if missed := row_names([r for r in group.rows if "scrapes-missed" in r.flags]):
        out.append(
            "Scrapes missed: Prometheus did not get every scrape of the proxy in time (its /metrics "
            f"slow under the load): {', '.join(missed)}; their threads, heap and files highs are at "
            "least those shown."
        )
    if slow := row_names([r for r in group.rows if "generator-latency" in r.flags]):
        out.append(
            "Latency mostly the generator's (Locust's p50 well above the proxy's own): "
            + ", ".join(slow)
            + "; the proxy p50/p99 columns are the proxy's."
        )
    if late := late_said(group):
        out.append(late)
    return out


# From the intended start, a p99 this many times the one from the send is said (issue 82).
LATE_P99_RATIO = 1.1


def late_said(group: Group) -> str:
    """At a fixed rate, the rows whose p99 from the intended start is well above their p99 from the
    send: by how much, which to read, and what made the gap (starts the user was late for, or, with
    none, Locust's own delay in sending)."""
    rows, late_any = [], False
    for r in group.rows:
        intended, sent, late = (r.figures[k].mean for k in ("p99", "sent_p99", "late"))
        if intended and sent and intended >= sent * LATE_P99_RATIO:
            rows.append(
                f"{r.called} {intended:,.2f} against {sent:,.2f} ms ({late or 0:.1f} late starts a 1,000)"
            )
            late_any = late_any or (late or 0) >= 1
    if not rows:
        return ""
    why = (
        "a request slower than its user's interval made that user late for its next starts, and the "
        "figure from the send leaves out their wait (coordinated omission)"
        if late_any
        else "no start was late for a busy user: the gap is Locust's own delay in sending, its event "
        "loop on a shared machine (the generator's, not the engine's)"
    )
    said = "; ".join(rows)
    head = "Latency from the intended start above that from the send"
    return f"{head}: {said}. Read the first (the p99 columns): {why}."


def not_this(results: Results) -> str:
    """What the figures are not."""
    rtts = sorted({r.dim("rtt_ms") for r in results.runs})
    protocols = sorted(
        {r.dim("protocol") for r in results.runs}, key=lambda p: PROTOCOLS.index(p) if p in PROTOCOLS else 9
    )
    swarm = results.backend.get("kind") == "swarm"
    if swarm:
        where = (
            "The upstream is nginx on its node of the swarm, reached over the stack's overlay network "
            "(docs/swarm.md): on one node as near as loopback, where a new connection costs almost nothing."
        )
    elif rtts == [0]:
        where = (
            "The upstream is nginx on this machine's loopback, 0 ms away: a new connection costs almost "
            "nothing here, so per-call clients and a connection per request look cheaper than they are "
            "across a network; `lab run --rtt 0,20` measures distance (docs/network.md)."
        )
    else:
        where = f"Round trips to nginx: {', '.join(f'{t} ms' for t in rtts)} (Toxiproxy; docs/network.md)."
    over = "" if protocols == ["http"] else f" Protocols: {', '.join(protocols)}."
    http1 = [e for e in HTTP1_ONLY if any(r.engine == e for r in results.runs)]
    if "h2" in protocols and http1:
        over += f" {', '.join(http1)} speak HTTP/1.1 only: their h2 rows are skipped."
    shared = (
        " Each part shares the CPUs of its node with what else runs there (results.json's backend.nodes); "
        if swarm
        else " Locust, the proxy and nginx share this machine's CPUs; "
    )
    return where + over + shared + "the figures compare engines on it, they are not a server's capacity."


def aa_tests(group: Group) -> list[tuple[Row, Row, str, Comparison]]:
    """Each A/A pair's comparisons on the verdict's figures, one family a pair (as the first
    screen's own): (copy #1, copy #2, the figure's key, the comparison)."""
    out = []
    for a, b in group.pairs():
        keys = [k for k in group.verdict_figures if group.compare(a, b, k).difference is not None]
        tests = confidence.adjust([group.compare(a, b, k) for k in keys])
        out += [(a, b, k, c) for k, c in zip(keys, tests, strict=True)]
    return out


def aa_check(group: Group) -> str:
    """The A/A pair, the check that the method holds: two proxies of one case (each its own forks)
    should differ by nothing, so the interval of their difference should include 0."""
    pairs = group.pairs()
    if not pairs:
        return (
            "A/A check: no A/A pair in this run (lab run --aa CASE): whether two proxies of one case "
            "stay within the intervals is not checked here."
        )
    out = []
    for a, b in pairs:
        tested = [(k, c) for x, y, k, c in aa_tests(group) if (x, y) == (a, b)]
        parts = [
            f"{BY_KEY[k].words or BY_KEY[k].heading} {c.difference:+.1%} ({c.span()})" for k, c in tested
        ]
        clear = [BY_KEY[k].words or k for k, c in tested if c.clear]
        text = (
            f"A/A check: two proxies of {a.called.removesuffix(f' #{a.copy}')} (#{a.copy}, #{b.copy}) "
            f"differed by {', '.join(parts)}"
        )
        if clear:
            text += (
                f"; on {', '.join(clear)} the interval excludes 0: two JVMs of one case differed more than "
                "the model allows here, so read close calls with care."
            )
        else:
            text += "; every interval includes 0, as it should when the method holds."
        out.append(text)
    return " ".join(out)


# --- like with like: one dimension changed (lab run --ktor, --java, --protocols, --rtt) ---------

# The dimensions a change is spoken of by (cases.DIMENSIONS), as reports name them.
DIMENSION_NAMES = tuple(d.title for d in DIMENSIONS)


@dataclass
class Change:
    """Two rows of one group that differ in one dimension only."""

    group: Group
    case: str
    dimension: str  # "Ktor", "JDK", "protocol" or "RTT"
    same: str  # the dimensions held, e.g. "JDK 17"
    before: Row
    after: Row
    before_name: str
    after_name: str

    def comparison(self, key: str) -> Comparison:
        return self.group.compare(self.before, self.after, key)

    def judged(self, key: str) -> bool:
        """Whether the change on `key` is one to test, as a ranking and a study's page judge it: both
        centres measured, neither row flagged on the figure, and not a rate that a target or a flag
        set (no change of capacity to judge), nor, on the other figures, a row short of its rate."""
        return not self.why_not(key)

    def why_not(self, key: str) -> str:
        """Why the change on `key` is not tested (`not measured`, `not tested`: a rate its target
        set, `not compared: errors`), "" when it is."""
        return why_not_compared(BY_KEY[key], self.group.load, self.before.runs, self.after.runs)

    def figure(self, key: str, c: Comparison | None = None) -> tuple[str, bool | None]:
        """`rps 1,200 -> 1,320 (+10.0%, p=0.008)` and whether the change is clear (None: not judged);
        `c`: its comparison as its family adjusted it (else tested alone)."""
        f = BY_KEY[key]
        a, b = self.before.figures[key], self.after.figures[key]
        if a.mean is None or b.mean is None:
            return f"{f.heading}: not measured", None
        centres = f"{f.heading} {a.mean:,.{f.digits}f} -> {b.mean:,.{f.digits}f}"
        if why := self.why_not(key):
            return f"{centres} ({why})", None
        c = c or self.comparison(key)
        return f"{centres} ({c.words()})", c.clear if c.p is not None else None

    @property
    def keys(self) -> tuple[str, ...]:
        keys = CHANGE_FIGURES_BY_DIMENSION.get(self.dimension, CHANGE_FIGURES)
        return keys if self.group.cpu_key == "cpu_no_jit" else tuple(k for k in keys if k != "cpu_no_jit")

    def sentence(self, tested: dict[str, Comparison] | None = None) -> str:
        """The change on each of its figures; `tested`: their comparisons as the family adjusted them
        (changes_said)."""
        parts, clear, judged = [], [], False
        for key in self.keys:
            text, is_clear = self.figure(key, (tested or {}).get(key))
            parts.append(text)
            judged = judged or is_clear is not None
            if is_clear:
                clear.append(BY_KEY[key].heading)
        head = f"{self.case} on {self.same}, {self.dimension} {self.before_name} -> {self.after_name}: "
        text = head + "; ".join(parts)
        if not judged and not any(self.judged(k) for k in self.keys):
            text += ". Not compared on any of them."
        elif not judged:
            text += ". No spread to test with (one window a row): lab run --forks 2 --windows 3."
        elif clear:
            text += f". A difference on {', '.join(clear)}."
        else:
            text += ". No clear difference on any of them."
        flagged = sorted(set(self.before.flags + self.after.flags) & set(verdict.RATE_FLAGS))
        if flagged:
            text += f" Rates flagged ({', '.join(flagged)}): rps does not compare capacity here."
        return text


def _dims(run: Run) -> tuple[str, ...]:
    """The value each dimension had in `run`, as reports write it (`3.5.2`, `17`, `http`, `0 ms`)."""
    return tuple(
        d.show(run.dim(d.field) or "?") if d.reported else d.show(run.dim(d.field)) for d in DIMENSIONS
    )


def _dim_order(name: str, value: str) -> tuple:
    return next(d for d in DIMENSIONS if d.title == name).order(value)


def version_key(text: str | None) -> tuple:
    """3.10.0 after 3.5.1: numbers compared as numbers."""
    return tuple(int(p) if p.isdigit() else 0 for p in (text or "").split("."))


def changes_said(group: Group) -> list[str]:
    """The group's changes in words, every figure of every change one family: p values adjusted
    together (Benjamini-Hochberg) and each interval with them, as a study's page adjusts its own, so
    that 8 cases x 5 figures do not name a change by chance about twice."""
    cs = changes(group)
    pairs = [(c, k) for c in cs for k in c.keys if c.judged(k)]
    adjusted = confidence.adjust([c.comparison(k) for c, k in pairs])
    tested: dict[int, dict[str, Comparison]] = {}
    for (c, k), x in zip(pairs, adjusted, strict=True):
        tested.setdefault(id(c), {})[k] = x
    return [c.sentence(tested.get(id(c))) for c in cs]


def changes(group: Group) -> list[Change]:
    """Every pair of rows with the same case and exactly one of Ktor release, JDK, protocol and
    RTT changed (first copies only)."""
    keyed = {}
    for row in group.rows:
        run = row.runs[0]
        if row.copy <= 1 and (run.dimensions or row.case.dimensions()):
            keyed[(run.case, *_dims(run))] = row

    def order(key: tuple) -> tuple:
        return key[0], *(_dim_order(n, v) for n, v in zip(DIMENSION_NAMES, key[1:], strict=True))

    out = []
    for a in sorted(keyed, key=order):
        for b in sorted(keyed, key=order):
            if a[0] != b[0] or order(a) >= order(b):
                continue
            differ = [i for i in range(len(DIMENSION_NAMES)) if a[i + 1] != b[i + 1]]
            if len(differ) != 1:
                continue
            i = differ[0]
            held = ", ".join(
                f"{n} {a[j + 1]}" for j, n in enumerate(DIMENSION_NAMES) if j != i and _shown(n, a[j + 1])
            )
            out.append(
                Change(
                    group,
                    a[0],
                    DIMENSION_NAMES[i],
                    held or "the defaults",
                    keyed[a],
                    keyed[b],
                    a[i + 1],
                    b[i + 1],
                )
            )
    return out


def _shown(name: str, value: str) -> bool:
    """Whether a held dimension is worth naming: the release and JDK always (their defaults are a
    build and a java, not a value), the others when not at their default (http and 0 ms are not)."""
    d = next(d for d in DIMENSIONS if d.title == name)
    return d.default == "" or value != d.show(d.default)


# --- how warm: a window after idling against one right after the warm-up ------------------------


def warmth(group: Group) -> str | None:
    """Windows taken on a warm proxy after it idled, against the first, right after its warm-up:
    their rps ratio per row, the JIT's CPU in either, and what a JVM's later windows cost per
    request less the JIT against its first (`later_cost`)."""
    ratios, jit_first, jit_later = [], [], []
    for row in group.rows:
        first = [r for r in row.runs if r.after == "warm-up"]
        later = [r for r in row.runs if r.after == "idle"]
        if not first or not later:
            continue
        a = statistics.mean(r.locust.rps for r in first)
        b = statistics.mean(r.locust.rps for r in later)
        if a:
            ratios.append(b / a)
        jit_first += [r.proxy.jit_cpu_seconds_in_window or 0.0 for r in first]
        jit_later += [r.proxy.jit_cpu_seconds_in_window or 0.0 for r in later]
    if not ratios:
        return None
    idle = [r.idle_s for row in group.rows for r in row.runs if r.idle_s is not None]
    cost = later_cost(group)
    return (
        f"Warmth: windows after the proxy idled ({min(idle):.0f}-{max(idle):.0f} s) against its first, right "
        f"after the warm-up: rps {statistics.median(ratios):.2f}x (median of {len(ratios)} rows, "
        f"{min(ratios):.2f}-{max(ratios):.2f}x); the JIT compiled up to {max(jit_later):.2f} s in a later "
        f"window and up to {max(jit_first):.2f} s in a first one"
        + (
            ""
            if cost is None
            else f"; CPU per request less the JIT, later windows against the first of their JVM: "
            f"{cost[0]:+.1%} ({cost[1]:+.1%} to {cost[2]:+.1%}, {cost[3]} JVMs; a first window still "
            "warming reads dearer)"
        )
        + "."
    )


def machine_speed(group: Group) -> str | None:
    """How far the proxy's CPU per request (less the JIT) moved with Locust's between windows of one
    JVM (`shared_noise`), said for a group at a fixed rate (at capacity each window's requests
    vary, and fixed costs per second would move both alike); None without the figures."""
    found = shared_noise(group) if group.load.model == "rate" else None
    if found is None:
        return None
    r, low, high, windows, jvms, before, after = found
    said = (
        f"Noise shared with the generator ({group.heading}): between windows of one JVM, the proxy's "
        f"CPU per request less the JIT and Locust's CPU per request moved together by r = {r:.2f} "
        f"({low:.2f} to {high:.2f}; {windows} windows of {jvms} JVMs)"
    )
    if low <= 0 <= high:
        return said + ": no shared movement found."
    return said + (
        f". At a fixed rate Locust's work per request is the same in every window, so what moves "
        f"both is the machine they share, or one's bursts taking CPU from the other: "
        f"{r**2:.0%} of the variance of the proxy's windows moved with Locust's; they "
        f"varied by {before:.1%}, and by {after:.1%} less that part."
    )


# What can move a window's CPU per request without the engine causing it, each as a window gives it:
# the noise_sources line says how much of the windows' spread within their JVMs moved with each.
NOISE_SOURCES = {
    "Locust's CPU per request": lambda r: (x := generator_cost(r)) and math.log(x),
    "the JIT's share of the window": lambda r: (
        r.proxy.jit_cpu_seconds_in_window / r.window.seconds
        if r.proxy.jit_cpu_seconds_in_window is not None and r.window.seconds
        else None
    ),
    "other processes' share of the machine": lambda r: r.machine.others_share if r.machine else None,
    "the hypervisor's steal": lambda r: r.machine.steal_share if r.machine else None,
    "the proxy's context switches per request": lambda r: (
        math.log(x) if (x := r.proxy.switches_per_request) and x > 0 else None
    ),
}


def noise_sources(group: Group) -> str | None:
    """Of the windows' spread of CPU per request less the JIT within their JVMs (at a fixed rate):
    how much moved with each of NOISE_SOURCES, r and r squared, where windows recorded it (the
    context switches are the proxy's own: partly the engine's doing, shown, never taken out)."""
    if group.load.model != "rate":
        return None
    parts = []
    for name, source in NOISE_SOURCES.items():
        if (found := shared_noise(group, source)) is not None:
            r, low, high, windows, jvms, *_ = found
            parts.append(f"{name} r = {r:.2f} ({low:.2f} to {high:.2f}), {r * r:.0%} of it")
    if not parts:
        return None
    return f"Noise sources ({group.heading}), within each JVM's windows: " + "; ".join(parts) + "."


def shared_noise(
    group: Group, source=NOISE_SOURCES["Locust's CPU per request"]
) -> tuple[float, float, float, int, int, float, float] | None:
    """The correlation of log CPU per request less the JIT with `source` (a window's figure: log
    generator CPU per request by default), each taken from its JVM's mean (per row and fork,
    windows flagged neither NOT_ITS_COST nor LEFT_OUT): r, its 95% interval (Fisher's z, with the
    JVMs' means taken out), the windows and JVMs, and the windows' spread (log sd) before and less
    the part that moved with it. None with fewer than 3 JVMs of 2 such windows, or without the
    figure."""
    xs, ys, jvms = [], [], 0
    for runs in jvm_windows(group, (*NOT_ITS_COST, *LEFT_OUT)):
        pairs = [(x, math.log(cpu_without_jit(r))) for r in runs if (x := source(r)) is not None]
        if len(pairs) >= 2:
            jvms += 1
            mx, my = statistics.mean(p[0] for p in pairs), statistics.mean(p[1] for p in pairs)
            xs += [p[0] - mx for p in pairs]
            ys += [p[1] - my for p in pairs]
    n = len(xs)
    df = n - jvms - 1  # each JVM's mean and the slope
    sxx, syy, sxy = (
        sum(x * x for x in xs),
        sum(y * y for y in ys),
        sum(x * y for x, y in zip(xs, ys, strict=True)),
    )
    if jvms < 3 or df < 3 or not sxx or not syy:
        return None
    r = sxy / math.sqrt(sxx * syy)
    half = statistics.NormalDist().inv_cdf(0.5 + confidence.CONFIDENCE / 2) / math.sqrt(df - 1)
    z = math.atanh(max(min(r, 0.999999), -0.999999))
    before = math.sqrt(syy / (n - jvms))
    after = math.sqrt(max(syy - sxy * sxy / sxx, 0.0) / df)
    return r, math.tanh(z - half), math.tanh(z + half), n, jvms, before, after


def jvm_windows(group: Group, leave: tuple[str, ...]) -> list[list[Run]]:
    """Per JVM of the group's rows (row and fork), its kept windows with a CPU per request less the
    JIT above 0 and none of the flags `leave` (judged by today's rules in groups())."""
    out = []
    for row in group.rows:
        by_jvm: dict[int, list[Run]] = {}
        for r in row.runs:
            v = cpu_without_jit(r)
            if v is not None and v > 0 and not set(r.verdict.flags) & set(leave):
                by_jvm.setdefault(r.fork, []).append(r)
        out += by_jvm.values()
    return out


def later_cost(group: Group) -> tuple[float, float, float, int] | None:
    """Per JVM, the mean log of its later windows' CPU per request less the JIT (after idling) less
    its first window's (right after the warm-up), over the JVMs: the change as a share, its 95%
    interval (Student's t over the JVMs) and their number. None with fewer than 3 JVMs."""
    diffs = []
    for runs in jvm_windows(group, NOT_ITS_COST):
        first = [math.log(cpu_without_jit(r)) for r in runs if r.after == "warm-up"]
        later = [math.log(cpu_without_jit(r)) for r in runs if r.after == "idle"]
        if first and later:
            diffs.append(statistics.mean(later) - statistics.mean(first))
    if len(diffs) < 3:
        return None
    mean, se = statistics.mean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    half = confidence.t_quantile(0.5 + confidence.CONFIDENCE / 2, len(diffs) - 1) * se
    return math.exp(mean) - 1, math.exp(mean - half) - 1, math.exp(mean + half) - 1, len(diffs)
