"""The report of a `lab run`: report.md and one self-contained report.html from the same data.

It opens with a verdict in words: per scenario and load level, which case leads on each figure,
by how much, whether the lead is larger than the spread between repeats, and which rows cannot
be compared (their flags, verdict.py). Then one table per scenario and load level, one row per
case (the median over repeats, min-max beside it), charts (inline SVG: the HTML needs nothing
else to open), and every setting behind the numbers.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import render, verdict
from .cases import ENGINE_FACTS, ENGINE_TITLES, PROTOCOLS
from .results import Load, Results, Run, load


@dataclass(frozen=True)
class Figure:
    key: str
    heading: str
    get: Callable[[Run], float | None]
    digits: int
    better: str  # "higher", "lower", or "" (no better direction: a count)
    # Flags that make a row's value of this figure not comparable with the others'.
    not_comparable: tuple[str, ...] = ("generator-saturated", "errors", "not-warm", "machine-busy")


def _mib(v: float | None) -> float | None:
    return None if v is None else v / (1 << 20)


FIGURES = [
    Figure("rps", "rps", lambda r: r.locust.rps, 0, "higher", verdict.RATE_FLAGS),
    Figure("p50", "p50 ms", lambda r: r.locust.p50_ms, 1, "lower"),
    Figure("p95", "p95 ms", lambda r: r.locust.p95_ms, 1, "lower"),
    Figure("p99", "p99 ms", lambda r: r.locust.p99_ms, 1, "lower"),
    Figure("server_p50", "proxy p50 ms", lambda r: r.proxy.server_p50_ms, 1, "lower"),
    Figure("server_p99", "proxy p99 ms", lambda r: r.proxy.server_p99_ms, 1, "lower"),
    Figure("errors", "errors", lambda r: r.locust.failures, 0, "lower"),
    Figure("cpu", "CPU s / 1000 req", lambda r: r.proxy.cpu_seconds_per_1000_requests, 3, "lower"),
    Figure("threads", "threads max", lambda r: r.prometheus.threads_live_max, 0, "lower"),
    Figure("unparked", "active unparked max", lambda r: r.prometheus.threads_active_unparked_max, 0, "lower"),
    Figure("heap", "heap max MiB", lambda r: _mib(r.prometheus.heap_max_bytes), 0, "lower"),
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
# The pool's figures: "not exposed" for an engine whose pool the proxy cannot see (pool_metrics).
POOL_KEYS = ("pool_in_use", "pool_idle")
BY_KEY = {f.key: f for f in FIGURES}
# The figures the verdict speaks of, and the charts.
VERDICT_FIGURES = ("rps", "p99", "cpu", "threads", "heap")
CHARTS = [
    ("rps", "Requests per second"),
    ("p99", "p99 latency (ms)"),
    ("cpu", "Proxy CPU seconds per 1000 requests"),
    ("threads", "Live threads (max)"),
    ("heap", "Heap used (max, MiB)"),
]


@dataclass
class Spread:
    median: float | None
    low: float | None
    high: float | None

    @classmethod
    def of(cls, values: list[float | None]) -> Spread:
        known = [v for v in values if v is not None]
        if not known:
            return cls(None, None, None)
        return cls(statistics.median(known), min(known), max(known))


@dataclass
class Row:
    """One case in one scenario and load level, over its repeats."""

    case: str
    runs: list[Run]
    figures: dict[str, Spread] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    capacity: bool = True
    reasons: list[str] = field(default_factory=list)

    @property
    def repeats(self) -> int:
        return len(self.runs)

    @property
    def network(self) -> str:
        """What lay between the proxy and nginx: `none`, or `RTT 20 ms +-2 ms, ...`."""
        record = self.runs[0].network
        return record.settings.describe() if record else "none"

    def cell(self, key: str) -> str:
        s, digits = self.figures[key], BY_KEY[key].digits
        if (
            s.median is None
            and key in POOL_KEYS
            and self.runs[0].proxy.settings.get("pool_metrics") == "not exposed"
        ):
            return "not exposed"
        if s.median is None:
            return "-"
        text = f"{s.median:,.{digits}f}"
        low, high = f"{s.low:,.{digits}f}", f"{s.high:,.{digits}f}"
        if self.repeats > 1 and low != high:
            text += f" ({low}-{high})"
        if key == "rps" and not self.capacity:
            text += " (not capacity)"
        return text

    def verdict_text(self) -> str:
        """The flags; `capacity` first when none of them is a rate flag (a leak is shown beside it)."""
        return ", ".join((["capacity"] if self.capacity else []) + self.flags)


@dataclass
class Group:
    scenario: str
    load: Load
    rows: list[Row]

    @property
    def heading(self) -> str:
        return f"{self.scenario}, {self.load.describe()}"


def groups(results: Results) -> list[Group]:
    """Runs grouped by (scenario, load), then by case in the plan's order, with medians and
    spreads; verdicts by today's rules, whatever the runs recorded."""
    by_cell: dict[tuple[str, str], tuple[Load, dict[str, list[Run]]]] = {}
    for run in results.runs:
        run.verdict = verdict.judge(run)
        _, cases = by_cell.setdefault((run.scenario, run.load.label), (run.load, {}))
        cases.setdefault(run.variant, []).append(run)
    order = [case.id for case in results.plan.cases]

    def place(variant: str) -> int:
        case = variant.split(" ")[0]
        return order.index(case) if case in order else len(order)

    out = []
    for (scenario, _), (load_level, cases) in by_cell.items():
        rows = []
        for case in sorted(cases, key=place):  # stable: releases and JDKs in the order they ran
            runs = cases[case]
            rows.append(
                Row(
                    case,
                    runs,
                    {f.key: Spread.of([f.get(r) for r in runs]) for f in FIGURES},
                    sorted({f for r in runs for f in r.verdict.flags}),
                    all(r.verdict.capacity for r in runs),
                    sorted({why for r in runs for why in r.verdict.reasons}),
                )
            )
        out.append(Group(scenario, load_level, rows))
    return out


# --- the verdict in words ------------------------------------------------------------------


def lead(group: Group, figure: Figure) -> str:
    """One sentence: who leads on `figure` among the comparable rows, by how much, and whether
    that is more than the spread between repeats."""
    higher = figure.better == "higher"
    comparable = [
        r
        for r in group.rows
        if r.figures[figure.key].median is not None and not set(r.flags) & set(figure.not_comparable)
    ]
    caveat = ""
    if not comparable:
        if figure.key == "rps":
            return "rps: no row's rate is its capacity (flags below), so rps does not rank the cases here."
        comparable = [r for r in group.rows if r.figures[figure.key].median is not None]
        if not comparable:
            return f"{figure.heading}: no figure was measured."
        caveat = " Indicative only: every row is flagged (below)."
    ranked = sorted(comparable, key=lambda r: r.figures[figure.key].median, reverse=higher)
    first = ranked[0]
    f1 = first.figures[figure.key]
    text = f"{figure.heading} ({figure.better} is better): {first.case} leads with "
    text += f"{f1.median:,.{figure.digits}f}"
    if len(ranked) == 1:
        return text + ", the only row that can be compared." + caveat
    second = ranked[1]
    f2 = second.figures[figure.key]
    ratio = (f1.median / f2.median if higher else f2.median / f1.median) if f1.median and f2.median else None
    text += f", against {f2.median:,.{figure.digits}f} for {second.case}"
    text += f" ({ratio:.2f}x)" if ratio else ""
    if first.repeats > 1 and second.repeats > 1:
        clear = f1.low > f2.high if higher else f1.high < f2.low
        text += (
            "; beyond the spread of the repeats."
            if clear
            else "; within the spread of the repeats: not a clear lead."
        )
    else:
        text += "; one repeat, so no spread is known (--repeats 3 tells whether it holds)."
    return text + caveat


def verdict_lines(group: Group) -> list[str]:
    lines = [lead(group, BY_KEY[key]) for key in VERDICT_FIGURES]
    if not_capacity := [r for r in group.rows if not r.capacity]:
        lines.append(
            "Their rate is not their capacity: "
            + "; ".join(f"{r.case} ({', '.join(f for f in r.flags if f != 'leak')})" for r in not_capacity)
            + "."
        )
    else:
        lines.append("Every row's rate is its capacity.")
    if leaks := [r.case for r in group.rows if "leak" in r.flags]:
        lines.append(f"Kept threads or open files after the load (leak): {', '.join(leaks)}.")
    if slow := [r.case for r in group.rows if "generator-latency" in r.flags]:
        lines.append(
            "Latency mostly the generator's (Locust's p50 well above the proxy's own): "
            + ", ".join(slow)
            + "; the proxy p50/p99 columns are the proxy's."
        )
    return lines


# --- like with like: one dimension changed (lab run --ktor, --java) -------------------------

# The figures a change of release or JDK is judged on; a change of round trip, on latency and what
# explains it (at a fixed rate, rps is the target).
CHANGE_FIGURES = ("rps", "cpu", "threads", "heap")
CHANGE_FIGURES_BY_DIMENSION = {"RTT": ("p50", "p99", "errors", "cpu", "threads", "conns")}


@dataclass
class Change:
    """Two rows of one group that differ in one dimension only (the Ktor release or the JDK)."""

    case: str
    dimension: str  # "Ktor" or "JDK"
    same: str  # the dimension held, e.g. "JDK 17"
    before: Row
    after: Row
    before_name: str
    after_name: str

    def figure(self, key: str) -> tuple[str, bool | None]:
        """`rps 1,200 -> 1,320 (+10.0%)` and whether the change is beyond the repeats' spread
        (None: one repeat, not known)."""
        f = BY_KEY[key]
        a, b = self.before.figures[key], self.after.figures[key]
        if a.median is None or b.median is None:
            return f"{f.heading}: not measured", None
        text = f"{f.heading} {a.median:,.{f.digits}f} -> {b.median:,.{f.digits}f}"
        if a.median:
            text += f" ({(b.median - a.median) / a.median:+.1%})"
        if key == "rps" and set(self.before.flags + self.after.flags) & set(verdict.RATE_FLAGS):
            return text, None  # a rate set by a target or a flag: no change of capacity to judge
        if self.before.repeats > 1 and self.after.repeats > 1:
            return text, b.low > a.high or b.high < a.low
        return text, None

    @property
    def keys(self) -> tuple[str, ...]:
        return CHANGE_FIGURES_BY_DIMENSION.get(self.dimension, CHANGE_FIGURES)

    def sentence(self) -> str:
        parts, beyond = [], []
        for key in self.keys:
            text, clear = self.figure(key)
            parts.append(text)
            if clear:
                beyond.append(BY_KEY[key].heading)
        head = f"{self.case} on {self.same}, {self.dimension} {self.before_name} -> {self.after_name}: "
        text = head + "; ".join(parts)
        if self.before.repeats > 1 and self.after.repeats > 1:
            text += (
                f". Beyond the spread of the repeats: {', '.join(beyond)}."
                if beyond
                else ". Every change is within the spread of the repeats."
            )
        else:
            text += ". One repeat, so no spread is known (--repeats 3 tells which changes hold)."
        flagged = sorted(set(self.before.flags + self.after.flags) & set(verdict.RATE_FLAGS))
        if flagged:
            text += f" Rates flagged ({', '.join(flagged)}): rps does not compare capacity here."
        return text


# The dimensions a change is spoken of by, each with how its value is written and ordered.
DIMENSION_NAMES = ("Ktor", "JDK", "protocol", "RTT")


def _dims(run: Run) -> tuple[str, str, str, str]:
    return run.ktor or "?", run.java_major, run.protocol, f"{run.rtt_ms} ms"


def _dim_order(name: str, value: str) -> tuple:
    if name == "protocol":
        return (PROTOCOLS.index(value) if value in PROTOCOLS else len(PROTOCOLS),)
    return _version(value.removesuffix(" ms"))


def changes(group: Group) -> list[Change]:
    """Every pair of rows with the same case and exactly one of Ktor release, JDK, protocol and
    RTT changed."""
    keyed = {}
    for row in group.rows:
        run = row.runs[0]
        if run.dimensions or run.protocol != "http" or run.rtt_ms:
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
                    a[0], DIMENSION_NAMES[i], held or "the defaults", keyed[a], keyed[b], a[i + 1], b[i + 1]
                )
            )
    return out


def _shown(name: str, value: str) -> bool:
    """Whether a held dimension is worth naming (the release and JDK always; http and 0 ms not)."""
    return not ((name == "protocol" and value == "http") or (name == "RTT" and value == "0 ms"))


def _version(text: str | None) -> tuple:
    """3.10.0 after 3.5.1: numbers compared as numbers."""
    return tuple(int(p) if p.isdigit() else 0 for p in (text or "").split("."))


def busy_line(results: Results) -> str | None:
    """The report's first warning: runs taken while other work loaded the machine."""
    busy = [r for r in results.runs if "machine-busy" in r.verdict.flags]
    if not busy:
        return None
    worst = max(busy, key=lambda r: r.machine.others_share if r.machine else 0)
    share = worst.machine.others_share if worst.machine else 0
    return (
        f"The machine was busy: in {len(busy)} of {len(results.runs)} runs other processes used at least "
        f"{verdict.BUSY_SHARE:.0%} of the CPUs (up to {share:.0%}, in {worst.title()}). Their rates are "
        "not capacity; run again on a quiet machine."
    )


# --- one document, two renderings ------------------------------------------------------------


DIRECTIONS = (
    "Higher is better: "
    + ", ".join(f.heading for f in FIGURES if f.better == "higher")
    + ". Lower is better: "
    + ", ".join(f.heading for f in FIGURES if f.better == "lower")
    + "."
)


CHANGES_INTRO = (
    "Each line holds the case, the scenario, the load and all but one of Ktor release, JDK, protocol and "
    "round trip (RTT), and changes that one: medians before -> after (the change in percent). Higher rps "
    "is better; lower latency, errors, CPU, threads, heap and new connections are better. A change counts "
    "when it is beyond the spread (min-max) of the repeats."
)


def table(group: Group) -> render.Table:
    columns = [
        render.Column("case", lambda r: r.case),
        render.Column("network", lambda r: r.network),
        *[render.Column(f.heading, lambda r, k=f.key: r.cell(k)) for f in FIGURES],
        render.Column("what set the rate", lambda r: r.verdict_text()),
    ]
    return render.Table(columns, group.rows, numeric=[False, False, *[True] * len(FIGURES), False])


def charts(group: Group) -> list[str]:
    out = []
    for key, title in CHARTS:
        f = BY_KEY[key]
        spreads = [r.figures[key] for r in group.rows]
        out.append(
            render.bars(
                title,
                [r.case for r in group.rows],
                {title: [s.median for s in spreads]},
                f.digits,
                better=f.better,
                ranges={
                    title: [
                        (s.low, s.high) if r.repeats > 1 and s.low is not None else None
                        for r, s in zip(group.rows, spreads, strict=True)
                    ]
                },
                hatched=[key == "rps" and not r.capacity for r in group.rows],
                hatched_note="not capacity",
            )
        )
    return out


def intro(results: Results) -> str:
    env, machine = results.environment, results.environment["machine"]
    return (
        f"Started {results.started}, finished {results.finished}"
        + (" (interrupted: only the runs that finished)" if results.interrupted else "")
        + f"; {len(results.runs)} runs in {results.wall_seconds / 60:.1f} min. "
        f"Commit {env['commit'][:12]}{' (with local changes)' if env['dirty'] else ''}, "
        f"{machine['cpus']} CPUs ({machine['cpu_model']}), {machine['memory_gib']} GiB, "
        f"backend {results.backend['kind']}. Each figure is the median over repeats, with the range "
        "(min-max) when repeats differ. A rate marked (not capacity) was set by something other "
        "than the engine; the reason is listed under its table."
    )


def network_line(results: Results) -> str | None:
    """What lay between the proxy and nginx in these runs; None when nothing ever did."""
    plan = results.plan
    vias = sorted({r.network.via for r in results.runs if r.network and r.network.via != "none"})
    if not (plan.rtt or plan.jitter_ms or plan.bandwidth_kbps or vias):
        return None
    rtts = ", ".join(f"{t} ms" for t in plan.rtt) or "as the cases name them"
    bandwidth = (
        f"{plan.bandwidth_kbps:,} KB/s per connection each way" if plan.bandwidth_kbps else "not limited"
    )
    return (
        f"Network between the proxy and nginx: round trips {rtts}, jitter {plan.jitter_ms} ms, bandwidth "
        f"{bandwidth}; at 0 ms none (the proxy calls nginx itself), otherwise "
        f"{', '.join(vias) or 'Toxiproxy'}. "
        "A new connection's TCP handshake with Toxiproxy is local: its round trip is the modelled column "
        "(docs/network.md)."
    )


def settings(results: Results) -> list[str]:
    plan = results.plan

    def pairs(d: dict) -> str:
        return ", ".join(f"{k} ({pairs(v)})" if isinstance(v, dict) else f"{k} {v}" for k, v in d.items())

    lines = [
        f"Matrix: cases {', '.join(c.name for c in plan.cases)}; scenarios {', '.join(plan.scenarios)}; "
        f"loads {', '.join(ld.label for ld in plan.loads)}; {plan.repeats} repeat(s), interleaved.",
        f"Per run: a fresh proxy, warm-up up to {plan.warmup_s} s (until two 5 s windows agree "
        f"within 5% and the JIT is quiet), then a {plan.duration_s} s window after Locust's stats are reset.",
        f"Proxy: JAVA_OPTS {plan.java_opts}"
        + (f", extra {pairs(plan.proxy_env)}" if plan.proxy_env else "")
        + ".",
        f"Backend: {pairs(results.backend)}.",
        f"Versions: {pairs(results.environment['versions'])}.",
        f"Machine: {pairs(results.environment['machine'])}.",
    ]
    if plan.ktor or plan.java:
        lines.insert(
            1,
            f"Dimensions: Ktor {', '.join(plan.ktor) or 'the default build'}; "
            f"JDK {', '.join(plan.java) or 'the default java'} "
            "(each row names the release and the JDK's major version).",
        )
    if line := network_line(results):
        lines.insert(1, line)
    seen: dict[str, dict] = {}
    for run in results.runs:
        seen.setdefault(run.variant, run.proxy.settings)
    lines += [
        f"Engine settings of {case} (lab_proxy_info): "
        + ", ".join(f"{k}={v}" for k, v in sorted(s.items()) if k != "case")
        for case, s in seen.items()
    ]
    for run in results.runs:
        w = run.warmup
        counted = (
            f"the proxy did not answer its /metrics ({'; '.join(run.unanswered)})"
            if run.unanswered
            else f"the proxy counted {run.proxy.upstream_requests:.0f} upstream exchanges"
        )
        lines.append(
            f"Warm-up of {run.title()}: {w.seconds} s, {'settled' if w.settled else 'not settled'}, "
            f"window rates {w.window_rates}"
            + ("" if w.jit_nice is None else f", JIT compiler threads at nice {w.jit_nice} until the window")
            + f"; {counted}, Locust {run.locust.requests}."
        )
    return lines


def engine_notes(results: Results) -> list[str]:
    """What users should know of each engine in the report, beside its rows (cases.ENGINE_FACTS)."""
    engines = [e for e in ENGINE_FACTS if any(r.engine == e for r in results.runs)]
    # What the proxy says of an engine it ran on another release than the default (lab_proxy_info).
    said = {
        r.engine: r.proxy.settings["engine_note"] for r in results.runs if "engine_note" in r.proxy.settings
    }
    return [
        f"{ENGINE_TITLES[e]}: {ENGINE_FACTS[e]}." + (f" Here: {said[e]}." if e in said else "")
        for e in engines
    ]


def markdown(results: Results) -> str:
    gs = groups(results)
    lines = ["# Lab report", "", intro(results), "", "## Verdict", ""]
    if busy := busy_line(results):
        lines += [busy, ""]
    for g in gs:
        lines += [f"{g.heading}:", "", *[f"- {line}" for line in verdict_lines(g)], ""]
    if any(changes(g) for g in gs):
        lines += ["## One dimension changed", "", CHANGES_INTRO, ""]
        for g in gs:
            if cs := changes(g):
                lines += [f"{g.heading}:", "", *[f"- {c.sentence()}" for c in cs], ""]
    for g in gs:
        lines += [f"## {g.heading}", "", DIRECTIONS, "", table(g).markdown()]
        if reasons := [f"- {r.case}: {why}" for r in g.rows for why in r.reasons]:
            lines += ["", *reasons]
        lines.append("")
    lines += ["## The engines themselves", "", *[f"- {n}" for n in engine_notes(results)], ""]
    lines += ["## Settings", "", *[f"- {s}" for s in settings(results)], ""]
    return "\n".join(lines)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 75em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; }
.num { text-align: right; white-space: nowrap; } .text { text-align: left; }
tr.flagged td { background: #fff4e5; }
.busy { color: #a33; font-weight: bold; }
.verdict { background: #eef4fb; border-left: 4px solid #3572b0; padding: 0.5em 1em; }
.charts svg { display: block; margin: 1em 0; }
"""


def page(results: Results) -> str:
    gs = groups(results)

    def ul(items: list[str]) -> str:
        return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"

    body = [
        f"<h1>Lab report</h1><p>{html.escape(intro(results))}</p>",
        '<section class="verdict"><h2>Verdict</h2>',
    ]
    if busy := busy_line(results):
        body.append(f'<p class="busy">{html.escape(busy)}</p>')
    for g in gs:
        body.append(f"<h3>{html.escape(g.heading)}</h3>{ul(verdict_lines(g))}")
    body.append("</section>")
    if any(changes(g) for g in gs):
        body.append(f"<h2>One dimension changed</h2><p>{html.escape(CHANGES_INTRO)}</p>")
        for g in gs:
            if cs := changes(g):
                body.append(f"<h3>{html.escape(g.heading)}</h3>{ul([c.sentence() for c in cs])}")
    for g in gs:
        body.append(f"<h2>{html.escape(g.heading)}</h2><p>{html.escape(DIRECTIONS)}</p>")
        body.append(table(g).html(lambda r: "" if r.capacity else "flagged"))
        if reasons := [f"{r.case}: {why}" for r in g.rows for why in r.reasons]:
            body.append(ul(reasons))
        body.append('<div class="charts">' + "".join(charts(g)) + "</div>")
    body.append(f"<h2>The engines themselves</h2>{ul(engine_notes(results))}")
    body.append(f"<h2>Settings</h2>{ul(settings(results))}")
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Lab report</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_report(results_dir: Path) -> tuple[Path, Path]:
    results = load(results_dir)
    md, html_path = results_dir / "report.md", results_dir / "report.html"
    md.write_text(markdown(results))
    html_path.write_text(page(results))
    return md, html_path


def summary(report_md: str) -> str:
    """What `lab run` prints at its end: report.md up to its settings (the verdict and the
    tables), taken from the written report rather than rendered again."""
    return report_md.split("\n## Settings")[0]
