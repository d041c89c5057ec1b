"""What a `lab run` concludes, apart from how it is written (run_report.py renders it).

The windows are grouped by scenario and load, then by row (a case with its dimensions; `#1` and
`#2` for two proxies of one case, an A/A pair). Each figure of a row is an Estimate over its
windows (confidence.py). From them, in words a user can act on:

- which lifetime: per engine, per-call against singleton on CPU per request and rps;
- which engines lead or tie, per figure, among the recommended lifetime's rows: the best row and
  every row a test cannot tell from it, then those clearly behind;
- the risks by name: leaks, a deprecated engine, a connection per request, unlimited connections,
  rows whose rate was not the engine's;
- what the figures are not (loopback at 0 ms unless --rtt said otherwise);
- the noise floor: what the A/A pair differed by, below which nothing is called a difference.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from . import confidence, verdict
from .cases import DEPRECATED_ENGINES, DIMENSIONS, ENGINE_TITLES, HTTP1_ONLY, PROTOCOLS, Case
from .confidence import Comparison, Estimate
from .plan import Load
from .results import Results, Run


@dataclass(frozen=True)
class Figure:
    key: str
    heading: str
    get: Callable[[Run], float | None]
    digits: int
    better: str  # "higher", "lower", or "" (no better direction: a count)
    # Flags that make a row's value of this figure not comparable with the others'.
    not_comparable: tuple[str, ...] = ("generator-saturated", "errors", "not-warm", "machine-busy")
    # What the first screen calls it.
    words: str = ""


def _mib(v: float | None) -> float | None:
    return None if v is None else v / (1 << 20)


def cpu_without_jit(r: Run) -> float | None:
    """The proxy's CPU s per 1,000 requests less what its JIT compiler threads used in the window
    (None when the JIT was not seen: the compose backend). The JIT's compiling is the JVM's
    warming, not the requests' cost: where it still ran in a window (on a slow machine, in the
    first rounds after the warm-up), it added up to a quarter to that window's CPU per request,
    more to some rows than to others."""
    p = r.proxy
    if p.jit_cpu_seconds_in_window is None or p.cpu_seconds_per_1000_requests is None:
        return None
    if not p.upstream_requests:
        return None
    return max(0.0, p.cpu_seconds - p.jit_cpu_seconds_in_window) / p.upstream_requests * 1000


FIGURES = [
    Figure("rps", "rps", lambda r: r.locust.rps, 0, "higher", verdict.RATE_FLAGS, "rps"),
    Figure("p50", "p50 ms", lambda r: r.locust.p50_ms, 1, "lower"),
    Figure("p95", "p95 ms", lambda r: r.locust.p95_ms, 1, "lower"),
    Figure("p99", "p99 ms", lambda r: r.locust.p99_ms, 1, "lower", words="p99 latency"),
    Figure("server_p50", "proxy p50 ms", lambda r: r.proxy.server_p50_ms, 1, "lower"),
    Figure("server_p99", "proxy p99 ms", lambda r: r.proxy.server_p99_ms, 1, "lower"),
    Figure("errors", "errors", lambda r: r.locust.failures, 0, "lower"),
    Figure(
        "cpu",
        "CPU s / 1000 req",
        lambda r: r.proxy.cpu_seconds_per_1000_requests,
        3,
        "lower",
        words="CPU per request with the JIT's",
    ),
    Figure(
        "cpu_no_jit",
        "CPU s / 1000 req less the JIT",
        cpu_without_jit,
        3,
        "lower",
        words="CPU per request",
    ),
    Figure("threads", "threads max", lambda r: r.prometheus.threads_live_max, 0, "lower", words="threads"),
    Figure("unparked", "active unparked max", lambda r: r.prometheus.threads_active_unparked_max, 0, "lower"),
    Figure("carriers", "carrier threads max", lambda r: r.prometheus.carriers_max, 0, ""),
    Figure("pinned", "pinned virtual threads", lambda r: r.proxy.virtual_threads_pinned, 0, "lower"),
    Figure(
        "heap", "heap max MiB", lambda r: _mib(r.prometheus.heap_max_bytes), 0, "lower", words="heap (memory)"
    ),
    Figure(
        "conns", "new conns / 1k req", lambda r: r.connections and r.connections.per_1000_requests, 1, "lower"
    ),
    Figure(
        "tls_full",
        "full TLS / 1k req",
        lambda r: r.connections and r.connections.full_tls_per_1000_requests,
        1,
        "lower",
    ),
    Figure(
        "connect_rtt",
        "connect RTT ms / req (modelled)",
        lambda r: r.connections and r.connections.connect_rtt_ms_per_request,
        1,
        "lower",
    ),
    Figure("pool_in_use", "pool in use max", lambda r: r.prometheus.pool_in_use_max, 0, ""),
    Figure("pool_idle", "pool idle max", lambda r: r.prometheus.pool_idle_max, 0, ""),
    Figure("time_wait", "TIME_WAIT max", lambda r: r.prometheus.time_wait_max, 0, "lower"),
    Figure(
        "threads_per_flight",
        "active threads / req in flight",
        lambda r: r.connections and r.connections.threads_per_in_flight,
        2,
        "lower",
    ),
]
BY_KEY = {f.key: f for f in FIGURES}
# The figures the first screen answers on, in its order. CPU per request without the JIT's
# compiling where it was seen (`verdict_figures`), else with it.
VERDICT_FIGURES = ("rps", "p99", "cpu_no_jit", "threads", "heap")
# A window taken while other work loaded the machine (verdict's `machine-busy`) is left out of its
# row's figures when at least this many of the row's windows, and half of them, were quiet: one busy
# window does not take a row out of the ranking. With fewer, the row keeps them all and its flag.
QUIET_WINDOWS_KEPT = 2
# The connection figure a "connection per request" risk is read from: at or above this many new
# connections per 1,000 requests, the engine opened one for (nearly) every request.
CONNECTION_PER_REQUEST = 900


@dataclass
class Row:
    """One row of a scenario and load: a case with its dimensions (and its copy), over its windows."""

    name: str
    runs: list[Run]
    figures: dict[str, Estimate] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    capacity: bool = True
    reasons: list[str] = field(default_factory=list)
    # Windows taken on a busy machine, left out of `runs` and the figures (QUIET_WINDOWS_KEPT).
    busy: list[Run] = field(default_factory=list)

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

    def comparable(self, figure: Figure) -> bool:
        return self.figures[figure.key].mean is not None and not set(self.flags) & set(figure.not_comparable)


@dataclass
class Group:
    scenario: str
    load: Load
    rows: list[Row]

    @property
    def heading(self) -> str:
        return f"{self.scenario}, {self.load.describe()}"

    def pairs(self) -> list[tuple[Row, Row]]:
        """The A/A pairs: two rows of the same case (copies #1 and #2)."""
        first = {r.case: r for r in self.rows if r.copy == 1}
        return [(first[r.case], r) for r in self.rows if r.copy == 2 and r.case in first]

    def floor(self, key: str, without: tuple[Row, Row] | None = None) -> float:
        """The noise floor of a figure: the largest difference the A/A pairs showed (a pair is not
        judged by its own), never under confidence.MIN_DIFFERENCE."""
        pairs = [p for p in self.pairs() if p != without]
        return confidence.noise_floor([confidence.compare(a.figures[key], b.figures[key]) for a, b in pairs])

    @property
    def cpu_key(self) -> str:
        """The CPU per request the verdicts use: without the JIT's compiling when every row's JIT
        was seen, else with it (the compose backend)."""
        measured = all(r.figures["cpu_no_jit"].mean is not None for r in self.rows if r.figures["cpu"].mean)
        return "cpu_no_jit" if measured and any(r.figures["cpu_no_jit"].mean for r in self.rows) else "cpu"

    @property
    def verdict_figures(self) -> tuple[str, ...]:
        """VERDICT_FIGURES with this group's CPU per request (cpu_key)."""
        return tuple(self.cpu_key if k == "cpu_no_jit" else k for k in VERDICT_FIGURES)

    def compare(self, a: Row, b: Row, key: str) -> Comparison:
        """B against A on a figure, judged against the noise floor of the others pairs."""
        pair = (a, b) if (a, b) in self.pairs() else (b, a) if (b, a) in self.pairs() else None
        return confidence.compare(a.figures[key], b.figures[key], self.floor(key, pair))


def groups(results: Results) -> list[Group]:
    """Windows grouped by (scenario, load), then by row in the plan's order; verdicts by today's
    rules, whatever the runs recorded."""
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
        made = []
        for name in sorted(rows, key=place):  # stable: releases and JDKs in the order they ran
            runs, busy = quiet(rows[name])
            made.append(
                Row(
                    name,
                    runs,
                    {f.key: Estimate.of([f.get(r) for r in runs]) for f in FIGURES},
                    sorted({f for r in runs for f in r.verdict.flags}),
                    all(r.verdict.capacity for r in runs),
                    reasons(runs) + left_out_busy(busy, len(runs)),
                    busy,
                )
            )
        out.append(Group(scenario, load_level, made))
    return out


def quiet(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """A row's windows split into those its figures are made of and the busy ones left out: every
    window when too few were quiet (QUIET_WINDOWS_KEPT)."""
    busy = [r for r in runs if "machine-busy" in r.verdict.flags]
    kept = [r for r in runs if "machine-busy" not in r.verdict.flags]
    if busy and len(kept) >= QUIET_WINDOWS_KEPT and 2 * len(kept) >= len(runs):
        return kept, busy
    return runs, []


def left_out_busy(busy: list[Run], kept: int) -> list[str]:
    if not busy:
        return []
    worst = max(busy, key=lambda r: r.machine.others_share if r.machine else 0)
    share = worst.machine.others_share if worst.machine else 0
    return [
        f"{len(busy)} of {len(busy) + kept} windows left out of its figures: other processes used up to "
        f"{share:.0%} of the CPUs in them (machine-busy); its figures are its {kept} quiet windows'"
    ]


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


# --- one figure: who leads, who ties, who is behind ---------------------------------------------


@dataclass
class Standing:
    """The rows of a group on one figure: the best and those a test cannot tell from it (leaders,
    each with its comparison to the best), those clearly behind it, and the rows left out."""

    figure: Figure
    leaders: list[tuple[Row, Comparison | None]]
    behind: list[tuple[Row, Comparison]]
    left_out: list[Row]
    indicative: bool = False  # every row was flagged: ranked anyway, and said so


def standing(group: Group, figure: Figure, rows: list[Row] | None = None) -> Standing:
    """`figure` over `rows` (default: the group's; an A/A pair's #2 never stands for its case)."""
    rows = [r for r in (group.rows if rows is None else rows) if r.copy <= 1]
    measured = [r for r in rows if r.figures[figure.key].mean is not None]
    comparable = [r for r in measured if r.comparable(figure)]
    indicative = not comparable and figure.key != "rps"
    if indicative:
        comparable = measured
    left_out = [r for r in measured if r not in comparable]
    if not comparable:
        return Standing(figure, [], [], left_out)
    higher = figure.better == "higher"
    ranked = sorted(comparable, key=lambda r: r.figures[figure.key].mean, reverse=higher)
    best = ranked[0]
    leaders: list[tuple[Row, Comparison | None]] = [(best, None)]
    behind = []
    # The best against each of the others: one family of tests, adjusted for its size.
    tests = confidence.adjust([group.compare(best, row, figure.key) for row in ranked[1:]])
    for row, c in zip(ranked[1:], tests, strict=True):
        (behind if c.clear else leaders).append((row, c))  # type: ignore[arg-type]
    return Standing(figure, leaders, behind, left_out, indicative)


def value(row: Row, figure: Figure) -> str:
    """`3,412 ±1.2%` (the mean and half its 95% interval), or `3,412` with one window."""
    e = row.figures[figure.key]
    if e.mean is None:
        return "-"
    text = f"{e.mean:,.{figure.digits}f}"
    return text + (f" ±{e.half_width:.1%}" if e.half_width is not None else "")


def sentence(s: Standing) -> str:
    """One figure in words: who leads or ties (within how much), and who is clearly behind."""
    f = s.figure
    head = f"{f.heading} ({f.better} is better)" if f.better else f.heading
    if not s.leaders:
        if f.key == "rps":
            return f"{head}: no row's rate is its capacity (flags below), so rps does not rank the rows here."
        return f"{head}: no figure was measured."
    best = s.leaders[0][0]
    if len(s.leaders) == 1:
        text = f"{head}: {best.name} leads with {value(best, f)}"
        if len(s.leaders) + len(s.behind) == 1:
            text += ", the only row that can be compared"
    else:
        ties = [c for _, c in s.leaders[1:] if c is not None and c.difference is not None]
        spread = max((abs(c.difference) for c in ties), default=0.0)  # type: ignore[arg-type]
        blind = [c for c in ties if c.p is not None and not c.can_tell]
        verdict_word = "not told apart (too few windows a row for the test)" if blind else "indistinguishable"
        text = (
            f"{head}: {', '.join(f'{r.name} {value(r, f)}' for r, _ in s.leaders)} lead, {verdict_word} "
            f"(within {spread:.1%} of {best.name}: {ties_words(s)})"
        )
    if s.behind:
        text += "; behind: " + "; ".join(f"{r.name} {value(r, f)} ({c.words()})" for r, c in s.behind)
    text += "."
    if s.indicative:
        text += " Indicative only: every row is flagged (below)."
    return text


def of(c: Comparison) -> str:
    """` of 4` when the p value was adjusted over a family of 4 comparisons."""
    return f" of {c.family}" if c.family > 1 else ""


def ties_words(s: Standing) -> str:
    """Why the leaders tie: each one's test against the best."""
    parts = []
    for row, c in s.leaders[1:]:
        if c is None:
            continue
        why = (
            "one window"
            if c.p is None
            else f"p={c.p:.2g}{of(c)}, too few windows to tell"
            if not c.significant and not c.can_tell
            else f"p={c.p:.2g}{of(c)}"
            if not c.significant
            else "under the noise floor"
        )
        parts.append(f"{row.name} {why}")
    return ", ".join(parts)


# --- the first screen ---------------------------------------------------------------------------


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


def lifetime_answer(group: Group) -> str | None:
    """Which lifetime, with the measured cost of the other: per-call against singleton, per engine."""
    pairs = pairs_by_engine(group)
    if not pairs:
        return None
    cpu = [(s, p, group.compare(s, p, group.cpu_key)) for s, p in pairs]
    cpu = [(s, p, c) for s, p, c in cpu if c.a.mean and c.b.mean]
    cpu = [(s, p, c) for (s, p, _), c in zip(cpu, confidence.adjust([c for *_, c in cpu]), strict=True)]
    rps = [
        (s, p, group.compare(s, p, "rps"))
        for s, p in pairs
        if s.comparable(BY_KEY["rps"]) and p.comparable(BY_KEY["rps"])
    ]
    rps = [(s, p, c) for (s, p, _), c in zip(rps, confidence.adjust([c for *_, c in rps]), strict=True)]
    costlier = [(s, p, c) for s, p, c in cpu if c.clear and c.difference and c.difference > 0]
    cheaper = [(s, p, c) for s, p, c in cpu if c.clear and c.difference and c.difference < 0]
    parts = []
    if cpu and len(costlier) == len(cpu):
        lo, hi = (min(c.b.mean / c.a.mean for *_, c in cpu), max(c.b.mean / c.a.mean for *_, c in cpu))
        parts.append(
            f"Lifetime: keep one HttpClient for the process (singleton). A new client per call cost "
            f"{lo:.1f}-{hi:.1f}x the CPU per request here, for each of the {len(cpu)} engines "
            f"(each beyond the noise floor, p<{confidence.ALPHA:g})"
        )
    elif cheaper:
        names = ", ".join(s.case.engine for s, *_ in cheaper)
        parts.append(
            f"Lifetime: per call was cheaper in CPU per request for {names} here; singleton for the others "
            f"({len(costlier)} of {len(cpu)} engines clearly costlier per call)"
        )
    elif costlier:
        lo, hi = (
            min(c.b.mean / c.a.mean for *_, c in costlier),
            max(c.b.mean / c.a.mean for *_, c in costlier),
        )
        untold = [
            f"{s.case.engine} ({c.b.mean / c.a.mean:.1f}x"
            + (f" over {c.a.n} and {c.b.n} windows with the figure)" if not c.can_tell else f", p={c.p:.2g})")
            for s, _, c in cpu
            if not c.clear
        ]
        dearer = ", ".join(s.case.engine for s, *_ in costlier)
        parts.append(
            f"Lifetime: keep one HttpClient for the process (singleton). A new client per call cost "
            f"{lo:.1f}-{hi:.1f}x the CPU per request here for {dearer} "
            f"(beyond the noise floor, p<{confidence.ALPHA:g}); no engine was cheaper per call; the test "
            f"could not tell for {'; '.join(untold)}"
        )
    else:
        parts.append(
            f"Lifetime: per call against singleton, CPU per request: {len(costlier)} of {len(cpu)} engines "
            "clearly costlier per call, the others indistinguishable"
        )
    if rps:
        ratios = [c.b.mean / c.a.mean for *_, c in rps if c.a.mean and c.b.mean]
        lower = sum(1 for *_, c in rps if c.clear and c.difference < 0)
        parts.append(
            f"and {min(ratios):.2f}-{max(ratios):.2f}x the rps ({lower} of {len(rps)} clearly lower)"
        )
    leaks = [p.name for _, p in pairs if "leak" in p.flags]
    text = ", ".join(parts) + "."
    if leaks:
        text += f" Per call also kept threads or files after the load: {', '.join(leaks)} (leak)."
    return text


def recommended_rows(group: Group) -> tuple[str, list[Row]]:
    """The rows the engines are ranked among: the singletons when there are any (and A/A copies
    #2 left out: the pair's first stands for the case), else every row."""
    rows = [r for r in group.rows if r.copy <= 1]
    singletons = [r for r in rows if r.case.lifetime == "singleton"]
    if singletons and len(singletons) < len(rows):
        return "singleton", singletons
    return "", rows


def engines_answer(group: Group) -> list[str]:
    """Per figure of VERDICT_FIGURES: who leads or ties among the recommended rows."""
    which, rows = recommended_rows(group)
    if len(rows) < 2:
        return []
    lines = []
    counts: dict[str, int] = {}
    for key in group.verdict_figures:
        s = standing(group, BY_KEY[key], rows)
        if not s.leaders:
            lines.append(sentence(s))
            continue
        for r, _ in s.leaders:
            counts[r.name] = counts.get(r.name, 0) + 1
        lines.append(sentence(s))
    if counts:
        top = max(counts.values())
        best = [n for n, c in counts.items() if c == top]
        among = f"among {which} clients" if which else "among the rows"
        lines.insert(
            0,
            f"Engines, {among}: {' and '.join(best)} lead or tie on {top} of {len(VERDICT_FIGURES)} figures "
            "(rps, p99, CPU per request, threads, heap); each figure below, with its 95% interval and test."
            + (
                " Apache (HttpAsyncClient 4) is deprecated (below): choose among the others if it leads."
                if any(r.name in best and r.case.engine in DEPRECATED_ENGINES for r in group.rows)
                else ""
            ),
        )
    return lines


def risks(results: Results, group: Group) -> list[str]:
    """What a user must know before choosing, by name."""
    out = []
    if leaks := [r.name for r in group.rows if "leak" in r.flags]:
        out.append(f"Leak: kept threads or open files after the load: {', '.join(leaks)}.")
    if logged := [r.name for r in group.rows if "proxy-exceptions" in r.flags]:
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
    per_request = [
        r.name
        for r in group.rows
        if (c := r.figures["conns"].mean) is not None and c >= CONNECTION_PER_REQUEST
    ]
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
    if not_capacity := [r for r in group.rows if not r.capacity]:
        out.append(
            "Rate not the engine's: "
            + "; ".join(
                f"{r.name} ({', '.join(f for f in r.flags if f in verdict.RATE_FLAGS)})" for r in not_capacity
            )
            + "."
        )
    if missed := [r.name for r in group.rows if "scrapes-missed" in r.flags]:
        out.append(
            "Scrapes missed: Prometheus did not get every scrape of the proxy in time (its /metrics "
            f"slow under the load): {', '.join(missed)}; their threads, heap and files highs are at "
            "least those shown."
        )
    if slow := [r.name for r in group.rows if "generator-latency" in r.flags]:
        out.append(
            "Latency mostly the generator's (Locust's p50 well above the proxy's own): "
            + ", ".join(slow)
            + "; the proxy p50/p99 columns are the proxy's."
        )
    return out


def not_this(results: Results) -> str:
    """What the figures are not."""
    rtts = sorted({r.rtt_ms for r in results.runs})
    protocols = sorted(
        {r.protocol for r in results.runs}, key=lambda p: PROTOCOLS.index(p) if p in PROTOCOLS else 9
    )
    if rtts == [0]:
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
    return (
        where
        + over
        + " Locust, the proxy and nginx share this machine's CPUs; the figures compare engines on it, "
        "they are not a server's capacity."
    )


def noise_line(group: Group) -> str:
    """What the A/A pair differed by: the noise floor of this run."""
    pairs = group.pairs()
    if not pairs:
        return (
            f"Noise floor: no A/A pair in this run (lab run --aa CASE): differences between JVMs are not "
            f"known; a difference is named when the test over the windows says so and it exceeds "
            f"{confidence.MIN_DIFFERENCE:.0%}."
        )
    out = []
    for a, b in pairs:
        parts, clear = [], []
        # Whether the pair differs is asked of every figure at once: one family of tests, its p
        # values adjusted for their number (as the engines' are); unadjusted, two JVMs drawn alike
        # were called different in 16% of draws (test_conclusions), adjusted in 4%.
        keys = [k for k in group.verdict_figures if group.compare(a, b, k).difference is not None]
        for key, c in zip(keys, confidence.adjust([group.compare(a, b, k) for k in keys]), strict=True):
            parts.append(
                f"{BY_KEY[key].words or BY_KEY[key].heading} {abs(c.difference):.1%}"
                + (f" (p={c.p:.2g}{f' of {c.family}' if c.family > 1 else ''})" if c.p is not None else "")
            )
            if c.clear:
                clear.append(BY_KEY[key].words or key)
        text = (
            f"Noise floor: two proxies of {a.case.name} ({a.name}, {b.name}) differed by {', '.join(parts)}"
        )
        text += "; differences below these are not named."
        if clear:
            text += (
                f" The pair itself differed beyond chance on {', '.join(clear)}: JVMs of one case differ "
                "by that much here; read leads near it with care."
            )
        out.append(text)
    return " ".join(out)


# --- like with like: one dimension changed (lab run --ktor, --java, --protocols, --rtt) ---------

# The figures a change of release or JDK is judged on; a change of round trip, on latency and what
# explains it (at a fixed rate, rps is the target).
CHANGE_FIGURES = ("rps", "cpu", "cpu_no_jit", "threads", "heap")
CHANGE_FIGURES_BY_DIMENSION = {"RTT": ("p50", "p99", "errors", "cpu", "cpu_no_jit", "threads", "conns")}
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

    def figure(self, key: str) -> tuple[str, bool | None]:
        """`rps 1,200 -> 1,320 (+10.0%, p=0.008)` and whether the change is clear (None: not judged)."""
        f = BY_KEY[key]
        a, b = self.before.figures[key], self.after.figures[key]
        if a.mean is None or b.mean is None:
            return f"{f.heading}: not measured", None
        c = self.comparison(key)
        text = f"{f.heading} {a.mean:,.{f.digits}f} -> {b.mean:,.{f.digits}f} ({c.words()})"
        if key == "rps" and set(self.before.flags + self.after.flags) & set(verdict.RATE_FLAGS):
            return text, None  # a rate set by a target or a flag: no change of capacity to judge
        return text, c.clear if c.p is not None else None

    @property
    def keys(self) -> tuple[str, ...]:
        keys = CHANGE_FIGURES_BY_DIMENSION.get(self.dimension, CHANGE_FIGURES)
        return keys if self.group.cpu_key == "cpu_no_jit" else tuple(k for k in keys if k != "cpu_no_jit")

    def sentence(self) -> str:
        parts, clear, judged = [], [], False
        for key in self.keys:
            text, is_clear = self.figure(key)
            parts.append(text)
            judged = judged or is_clear is not None
            if is_clear:
                clear.append(BY_KEY[key].heading)
        head = f"{self.case} on {self.same}, {self.dimension} {self.before_name} -> {self.after_name}: "
        text = head + "; ".join(parts)
        if not judged:
            text += ". One window a side: no test possible (lab run --windows 5)."
        elif clear:
            text += f". A difference on {', '.join(clear)}."
        elif not self.comparison(self.keys[0]).can_tell:
            n = min(self.before.windows, self.after.windows)
            text += (
                f". Too few windows a side ({n}) for the test to name any difference (lab run --windows 5)."
            )
        else:
            text += ". No difference the windows and the noise floor support."
        flagged = sorted(set(self.before.flags + self.after.flags) & set(verdict.RATE_FLAGS))
        if flagged:
            text += f" Rates flagged ({', '.join(flagged)}): rps does not compare capacity here."
        return text


def _dims(run: Run) -> tuple[str, ...]:
    """The value each dimension had in `run`, as reports write it (`3.5.2`, `17`, `http`, `0 ms`)."""
    return tuple(
        d.show(getattr(run, d.run_field) or "?") if d.field == "ktor" else d.show(getattr(run, d.run_field))
        for d in DIMENSIONS
    )


def _dim_order(name: str, value: str) -> tuple:
    d = next(d for d in DIMENSIONS if d.title == name)
    if d.field == "protocol":
        return (PROTOCOLS.index(value) if value in PROTOCOLS else len(PROTOCOLS),)
    if d.field == "dispatcher":  # io, then io:N by N, then virtual
        kind, _, size = value.partition(":")
        return (0 if value == "io" else 1 if kind == "io" else 2, int(size) if size.isdigit() else 0)
    return version_key(value.removesuffix(" ms"))


def version_key(text: str | None) -> tuple:
    """3.10.0 after 3.5.1: numbers compared as numbers."""
    return tuple(int(p) if p.isdigit() else 0 for p in (text or "").split("."))


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
    their rps ratio per row, and the JIT's CPU in either."""
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
    return (
        f"Warmth: windows after the proxy idled ({min(idle):.0f}-{max(idle):.0f} s) against its first, right "
        f"after the warm-up: rps {statistics.median(ratios):.2f}x (median of {len(ratios)} rows, "
        f"{min(ratios):.2f}-{max(ratios):.2f}x); the JIT compiled up to {max(jit_later):.2f} s in a later "
        f"window and up to {max(jit_first):.2f} s in a first one."
    )
