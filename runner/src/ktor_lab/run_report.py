"""The report of a `lab run`: report.md and one self-contained report.html from the same data.

What it concludes is conclusions.py's; this module only writes it. It opens with the answer (which
lifetime, which engines, on CPU per request with the interval of every difference) and its chart,
then the details (how it was tested, the A/A check, the other figures, the risks by name, what the
figures are not), then one table per scenario and load (one row per case: each figure its centre
with half its 95% interval), charts (inline SVG: the HTML
needs nothing else to open), and an appendix with the settings and the warm-ups (collapsed in the
HTML).
"""

from __future__ import annotations

import csv
import html
import math
from pathlib import Path

from lab_latency import curve

from . import render, verdict
from .cases import DIMENSIONS, ENGINE_FACTS, ENGINE_TITLES
from .conclusions import (
    Group,
    Row,
    aa_check,
    changes,
    changes_said,
    engines_answer,
    family_line,
    groups,
    lifetime_answer,
    machine_speed,
    noise_sources,
    not_this,
    other_figures,
    risks,
    screen,
    value_cell,
    warmth,
)
from .plan import WARM_FIRST_SCENARIO
from .results import Results, load
from .rules import BY_KEY, WINDOW_FIGURES, merged_histogram

# The figures whose cells say "not exposed" for an engine whose pool the proxy cannot see.
POOL_KEYS = ("pool_in_use", "pool_idle")
CHARTS = [
    ("rps", "Requests per second"),
    ("p99", "p99 latency (ms)"),
    ("cpu", "Proxy CPU seconds per 1000 requests"),
    ("cpu_no_jit", "Proxy CPU seconds per 1000 requests, less the JIT's compiling"),
    ("threads", "Live threads (max)"),
    ("heap", "Heap used (max, MiB)"),
]
APPENDIX = "## Appendix: settings and warm-ups"


def cell(row: Row, key: str) -> str:
    e = row.figures[key]
    if (
        e.mean is None
        and key in POOL_KEYS
        and row.runs[0].proxy.settings.get("pool_metrics") == "not exposed"
    ):
        return "not exposed"
    text = value_cell(row, BY_KEY[key])
    at_rate = row.runs[0].load.model == "rate" and row.kept_rate(row.runs[0].load)
    if key == "rps" and not row.capacity and e.mean is not None and not at_rate:
        text += " (not capacity)"
    return text


def verdict_text(row: Row) -> str:
    """The flags; `capacity` first when none of them is a rate flag (a leak is shown beside it)."""
    return ", ".join((["capacity"] if row.capacity else []) + row.flags)


def busy_line(results: Results, made: list[Group]) -> str | None:
    """The report's first warning: windows taken while other work loaded the machine, and what
    became of them (left out of their rows' figures, or their rows flagged)."""
    busy = [r for r in results.runs if "machine-busy" in r.verdict.flags]
    if not busy:
        return None
    worst = max(busy, key=lambda r: r.machine.others_share if r.machine else 0)
    share = worst.machine.others_share if worst.machine else 0
    left_out = sum(1 for g in made for row in g.rows for r in row.left if "machine-busy" in r.verdict.flags)
    kept = len(busy) - left_out
    text = (
        f"The machine was busy: in {len(busy)} of {len(results.runs)} windows other processes used at least "
        f"{verdict.BUSY_SHARE:.0%} of the CPUs (up to {share:.0%}, in {worst.title()})."
    )
    if left_out:
        text += f" {left_out} of them are left out of their rows' figures (each row kept enough quiet ones)."
    if kept:
        text += (
            f" {kept} could not be left out: their rows' rates are not capacity; run again on a quiet one."
        )
    return text


def answer(g: Group) -> list[str]:
    """The first screen of one scenario and load: which lifetime, which engines, on the primary
    figure with the interval of every difference (conclusions.screen)."""
    s = screen(g)
    lines = [line for line in (lifetime_answer(s), engines_answer(s)) if line]
    if not lines and len(alone := [r for r in g.rows if r.copy <= 1]) == 1:
        one = alone[0]
        what = (
            f"One case, {one.called.removesuffix(' #1')}, as an A/A pair"
            if one.copy
            else f"One row, {one.called}"
        )
        lines = [f"{what}: nothing here to compare it with; its figures are in the table below."]
    return lines


def details(results: Results, g: Group) -> list[str]:
    """Below the answer: how it was tested, the A/A check, the other figures, the risks."""
    s = screen(g)
    return [*([family_line(s)] if s.tests else []), aa_check(g), *other_figures(g), *risks(results, g)]


def primary_chart(g: Group) -> str:
    """The first screen's figure per engine and lifetime, with the 95% interval of each row; a row
    measured on fewer JVMs than the group's others (their windows left out) says on how many."""
    f = BY_KEY[g.cpu_key]
    rows = [r for r in g.rows if r.figures[f.key].mean is not None]
    most = g.jvms
    title = f"{f.heading} by engine and lifetime, 95% intervals"
    return render.bars(
        title,
        [r.label for r in rows],
        {title: [r.figures[f.key].mean for r in rows]},
        f.digits,
        better=f.better,
        ranges={
            title: [(e.low, e.high) if e.low is not None else None for e in (r.figures[f.key] for r in rows)]
        },
        hatched=[not r.comparable(f) for r in rows],
        hatched_note="flagged: not ranked",
        notes=[f"on {r.proxies} of {most} JVMs" if r.proxies < most else "" for r in rows],
    )


def directions(group: Group) -> str:
    """How to read a group's table: what each figure is, and which way is better."""
    figures = shown(group)
    return (
        "Each figure is the row's centre (the geometric mean of its JVMs' windows) ± half its 95% interval "
        "(a share of the centre; in the figure's own units where some window is 0, as for counts) "
        "(none for a row flagged on it, which no test uses); "
        "a column no row measured "
        "is left out. Higher is better: "
        + ", ".join(f.heading for f in figures if f.better == "higher")
        + ". Lower is better: "
        + ", ".join(f.heading for f in figures if f.better == "lower")
        + "."
        + (
            " CPU less the JIT: the proxy's CPU without what its JIT compiler threads used in the window "
            "(the JVM still warming, not the requests' cost); the verdicts use it."
            if any(f.key == "cpu_no_jit" for f in figures)
            else ""
        )
    )


CHANGES_INTRO = (
    "Each line holds the case, the scenario, the load and all but one of Ktor release, JDK, protocol, "
    "round trip (RTT) and dispatcher, and changes that one: centres before -> after, with the change and its "
    "test (the verdict's: its JVMs, the spread pooled over the group's rows). A change is named only when "
    "the test says so, its p value adjusted over every line and figure of the group (Benjamini-Hochberg) and "
    "each interval with it."
)


def shown(group: Group) -> list:
    """The figures some row of the group has (a column no row measured, e.g. TLS handshakes over
    plain HTTP or pinned virtual threads on platform threads, is left out)."""
    return [f for f in WINDOW_FIGURES if any(cell(r, f.key) != "-" for r in group.rows)]


def table(group: Group) -> render.Table:
    figures = shown(group)
    columns = [
        render.Column("case", lambda r: r.name),
        render.Column(
            "windows", lambda r: str(r.windows) + (f" ({r.proxies} JVMs)" if r.proxies > 1 else "")
        ),
        render.Column("network", lambda r: r.network),
        *[render.Column(f.heading, lambda r, k=f.key: cell(r, k)) for f in figures],
        render.Column("what set the rate", verdict_text),
    ]
    return render.Table(columns, group.rows, numeric=[False, True, False, *[True] * len(figures), False])


def charts(group: Group) -> list[str]:
    out = []
    for key, title in CHARTS:
        f = BY_KEY[key]
        estimates = [r.figures[key] for r in group.rows]
        if all(e.mean is None for e in estimates):
            continue  # the JIT not seen (the compose backend)
        out.append(
            render.bars(
                title,
                [r.name for r in group.rows],
                {title: [e.mean for e in estimates]},
                f.digits,
                better=f.better,
                ranges={title: [(e.low, e.high) if e.low is not None else None for e in estimates]},
                hatched=[key == "rps" and not r.capacity for r in group.rows],
                hatched_note="not capacity",
            )
        )
    return out


# Where the percentile plot has its points: 1 / (1 - p) from 2 (p50) to 10,000 (p99.99), log-spaced.
PLOT_PERCENTILES = tuple(
    100 * (1 - 1 / 10 ** (math.log10(2) + i * (4 - math.log10(2)) / 48)) for i in range(49)
)


def percentile_plot(group: Group) -> list[str]:
    """Each row's latency distribution, its kept windows' histograms merged (lab_latency): from the
    intended start (solid) and from the send (dashed), p50 to p99.99; none for runs without them."""
    solid, dashed = {}, {}
    for r in group.rows:
        if (h := merged_histogram(tuple(w.locust.latency_intended for w in r.runs))) is not None:
            solid[r.name] = curve(h, PLOT_PERCENTILES)
            sent = merged_histogram(tuple(w.locust.latency_sent for w in r.runs))
            dashed[r.name] = curve(sent, PLOT_PERCENTILES)
    if not solid:
        return []
    return [
        render.percentiles(
            "latency by percentile (every kept window of a row merged)",
            solid,
            dashed,
            1,
            "solid: from the intended start; dashed: from the send; lower is better",
        )
    ]


def over_time(group: Group, start: float) -> list[str]:
    """Each row's windows at their start, minutes into the run: rps and p99 (Locust's), so drift,
    a slow first round or one odd window shows where the tables give only their spread."""
    out = []
    for key, title in (("rps", "rps per window over the run"), ("p99", "p99 ms per window over the run")):
        f = BY_KEY[key]
        lines = {
            r.name: [((w.window.start - start) / 60, v) for w in sorted(r.runs, key=lambda w: w.window.start)
                     if (v := f.get(w)) is not None and w.window.start]
            for r in group.rows
        }  # fmt: skip
        if any(len(pts) > 1 for pts in lines.values()):
            out.append(render.series(title, lines, "minutes into the run", f.digits, f.better))
    return out


def intro(results: Results) -> str:
    env, machine = results.environment, results.environment["machine"]
    plan = results.plan
    proxies = len({(r.row, r.fork) for r in results.runs})
    how = (
        "a fresh proxy per window, each warmed"
        if any(r.after == "fresh" for r in results.runs)
        else f"{proxies} proxies, each warmed once, measured in windows interleaved across them"
    )
    return (
        f"Started {results.started}, finished {results.finished}"
        + (" (interrupted: only the windows that finished)" if results.interrupted else "")
        + f"; {len(results.runs)} windows of {plan.duration_s} s in {results.wall_seconds / 60:.1f} min, "
        f"{how}. "
        f"Commit {env['commit'][:12]}{' (with local changes)' if env['dirty'] else ''}, "
        f"{machine['cpus']} CPUs ({machine['cpu_model']}), {machine['memory_gib']} GiB, "
        f"backend {results.backend['kind']}." + placement_line(results) + close_calls_line(results)
    )


def placement_line(results: Results) -> str:
    """Where the proxy under load ran (lab run --cpus), as its windows recorded it; "" by default."""
    if results.plan.cpus == "none":
        return ""
    seen = ", ".join(sorted({r.proxy.cpus for r in results.runs if r.proxy.cpus})) or "?"
    how = f"--cpus {results.plan.cpus}"
    return f" The proxy under load on CPU {seen}, the lab's other parts on the rest ({how})."


def close_calls_line(results: Results) -> str:
    """What the close calls took (lab run --budget): their rounds, rows and minutes, and how they
    ended; "" where the run had no budget for them."""
    plan = results.plan
    if not plan.budget_s or plan.forks < 2:
        return ""
    if not results.races:
        said = results.race_end or "no comparison of the first screen was left undecided by the plan's JVMs"
        return f" Close calls: none raced ({said}; budget {plan.budget_s / 60:.0f} min)."
    spent = sum(r.seconds for r in results.races)
    rows = sorted({row for r in results.races for row in r.rows})
    return (
        f" Close calls: {len(results.races)} round(s) of one more JVM for {', '.join(rows)}, "
        f"{spent / 60:.1f} of the run's {results.wall_seconds / 60:.1f} min "
        f"(budget {plan.budget_s / 60:.0f} min); "
        f"{results.race_end or 'stopped'}."
    )


def network_line(results: Results) -> str | None:
    """What lay between the proxy and nginx in these runs; None when nothing ever did."""
    plan = results.plan
    vias = sorted({r.network.via for r in results.runs if r.network and r.network.via != "none"})
    rtt = plan.dims.get("rtt_ms", [])
    if not (rtt or plan.jitter_ms or plan.bandwidth_kbps or vias):
        return None
    rtts = ", ".join(f"{t} ms" for t in rtt) or "as the cases name them"
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


def _pairs(d: dict) -> str:
    return ", ".join(f"{k} ({_pairs(v)})" if isinstance(v, dict) else f"{k} {v}" for k, v in d.items())


def quiet(results: Results) -> str:
    """The JIT's part of the warm-up rule, as the run's warm-ups recorded it: the share of a core
    its compiler threads had to stay under; `the JIT is quiet` for results that did not record it."""
    share = next((r.warmup.jit_quiet_share for r in results.runs if r.warmup.jit_quiet_share), None)
    if share is None:
        return "the JIT is quiet"
    return f"the JIT's compiler threads used under {share:.0%} of a core"


def settings(results: Results) -> list[str]:
    """The settings behind the numbers, short: the plan, the proxy, what every proxy shared, then
    per case only the engine settings that are its own."""
    plan = results.plan
    lines = [
        f"Matrix: cases {', '.join(c.name for c in plan.cases)}; scenarios {', '.join(plan.scenarios)}; "
        f"loads {', '.join(ld.label for ld in plan.loads)}; {plan.repeats} window(s) per row of "
        f"{plan.duration_s} s, interleaved; {plan.forks} proxy(ies) per row"
        + (f"; A/A pair: {plan.aa}" if plan.aa else "")
        + ".",
        f"Per proxy: warm-up up to {plan.warmup_s} s per scenario and load (until two 5 s windows agree "
        f"within 5% and {quiet(results)})"
        + (
            f", after a first one at {plan.warm_first.label} on {WARM_FIRST_SCENARIO} (the same rule)"
            if plan.warm_first
            else ""
        )
        + f"; a window on a proxy that idled first gets {plan.settle_s} s of unmeasured load.",
        f"Proxy: JAVA_OPTS {plan.java_opts}"
        + (f", extra {_pairs(plan.proxy_env)}" if plan.proxy_env else "")
        + ".",
        f"Backend: {_pairs(results.backend)}.",
        f"Versions: {_pairs(results.environment['versions'])}.",
        f"Machine: {_pairs(results.environment['machine'])}.",
    ]
    if dims := {d: plan.dims[d.field] for d in DIMENSIONS if d.field in plan.dims and d.field != "rtt_ms"}:
        named = "; ".join(f"{d.title} {', '.join(d.show(v) for v in values)}" for d, values in dims.items())
        both = " (each row names the release and the JDK's major version)" if plan.has_dimensions else ""
        lines.insert(1, f"Dimensions: {named}{both}.")
    if line := network_line(results):
        lines.insert(1, line)
    seen: dict[str, dict] = {}
    for run in results.runs:
        seen.setdefault(run.row, {k: v for k, v in run.proxy.settings.items() if k != "case"})
    if seen:
        keys = set.intersection(*(set(s) for s in seen.values()))
        common = {k: v for k, v in next(iter(seen.values())).items() if k in keys}
        common = {k: v for k, v in common.items() if all(s.get(k) == v for s in seen.values())}
        lines.append(
            "Settings every proxy reported alike (lab_proxy_info): "
            + ", ".join(f"{k}={v}" for k, v in sorted(common.items()))
        )
        lines += [
            f"Settings of {row} of its own: "
            + (", ".join(f"{k}={v}" for k, v in sorted(s.items()) if k not in common) or "none")
            for row, s in seen.items()
        ]
    return lines


def warmups(results: Results) -> list[str]:
    """One line per proxy and scenario and load: how long its warm-up took, and its rates."""
    lines = []
    for run in results.runs:
        if run.after not in ("warm-up", "fresh"):
            continue
        w = run.warmup
        first = (
            f"first {w.first_seconds} s at {w.first_load} on {w.first_scenario}, {w.first_end}"
            + (f", the JIT's CPU s per 5 s {w.first_window_jit_s}" if w.first_window_jit_s else "")
            + "; then "
            if w.first_load
            else ""
        )
        lines.append(
            f"Warm-up of {run.title()}: {first}{w.seconds} s, {w.end}, "
            f"5 s rates {w.window_rates}"
            + (f", the JIT's CPU s per 5 s {w.window_jit_s}" if w.window_jit_s else "")
            + ("" if w.jit_nice is None else f", JIT compiler threads at nice {w.jit_nice} until the window")
            + "."
        )
    idle = [r for r in results.runs if r.idle_proxies_cores is not None]
    if idle:
        most = max(r.idle_proxies_cores for r in idle)
        lines.append(
            f"The proxies up and idle during a window ({idle[0].idle_proxies} of them) used up to {most:.3f} "
            "cores together (Prometheus' scrapes, their own timers)."
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


def markdown(results: Results, gs: list[Group] | None = None) -> str:
    """report.md; `gs`: the results' groups when made already (page() reads the same)."""
    gs = groups(results) if gs is None else gs
    lines = ["# Lab report", "", intro(results), "", "## Verdict", ""]
    if busy := busy_line(results, gs):
        lines += [busy, ""]
    for g in gs:
        lines += [
            f"### {g.heading}",
            "",
            " ".join(answer(g)),
            "",
            *[f"- {line}" for line in details(results, g)],
            "",
        ]
    lines += [f"What these figures are not: {not_this(results)}", ""]
    if any(changes(g) for g in gs):
        lines += ["## One dimension changed", "", CHANGES_INTRO, ""]
        for g in gs:
            if said := changes_said(g):
                lines += [f"{g.heading}:", "", *[f"- {x}" for x in said], ""]
    for g in gs:
        lines += [f"## {g.heading}", "", directions(g), "", table(g).markdown()]
        if reasons := [f"- {r.name}: {why}" for r in g.rows for why in r.reasons]:
            lines += ["", *reasons]
        lines.append("")
    lines += ["## The engines themselves", "", *[f"- {n}" for n in engine_notes(results)], ""]
    lines += [APPENDIX, ""]
    lines += [f"- {w}" for g in gs if (w := warmth(g))]
    lines += [f"- {m}" for g in gs if (m := machine_speed(g))]
    lines += [f"- {n}" for g in gs if (n := noise_sources(g))]
    lines += [f"- {s}" for s in settings(results)]
    lines += [f"- {w}" for w in warmups(results)]
    lines.append("")
    return "\n".join(lines)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 75em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; }
.num { text-align: right; white-space: nowrap; } .text { text-align: left; }
tr.flagged td { background: #fff4e5; }
.busy { color: #a33; font-weight: bold; }
.answer { font-size: 1.15em; }
.verdict { background: #eef4fb; border-left: 4px solid #3572b0; padding: 0.5em 1em; }
.charts svg { display: block; margin: 1em 0; }
details { margin: 1em 0; } summary { cursor: pointer; font-weight: bold; }
"""


def page(results: Results, gs: list[Group] | None = None) -> str:
    """report.html; `gs` as markdown()'s."""
    gs = groups(results) if gs is None else gs
    start = min((r.window.start for r in results.runs if r.window.start), default=0.0)

    def ul(items: list[str]) -> str:
        return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"

    body = [
        f"<h1>Lab report</h1><p>{html.escape(intro(results))}</p>",
        '<section class="verdict"><h2>Verdict</h2>',
    ]
    if busy := busy_line(results, gs):
        body.append(f'<p class="busy">{html.escape(busy)}</p>')
    for g in gs:
        body.append(
            f'<h3>{html.escape(g.heading)}</h3><p class="answer">{html.escape(" ".join(answer(g)))}</p>'
        )
        body.append(f'<div class="charts">{primary_chart(g)}</div>{ul(details(results, g))}')
    body.append(f"<p>What these figures are not: {html.escape(not_this(results))}</p></section>")
    if any(changes(g) for g in gs):
        body.append(f"<h2>One dimension changed</h2><p>{html.escape(CHANGES_INTRO)}</p>")
        for g in gs:
            if said := changes_said(g):
                body.append(f"<h3>{html.escape(g.heading)}</h3>{ul(said)}")
    for g in gs:
        body.append(f"<h2>{html.escape(g.heading)}</h2><p>{html.escape(directions(g))}</p>")
        body.append(table(g).html(lambda r: "" if r.capacity else "flagged"))
        if reasons := [f"{r.name}: {why}" for r in g.rows for why in r.reasons]:
            body.append(ul(reasons))
        body.append(
            '<div class="charts">' + "".join(charts(g) + percentile_plot(g) + over_time(g, start)) + "</div>"
        )
    body.append(f"<h2>The engines themselves</h2>{ul(engine_notes(results))}")
    appendix = [w for g in gs if (w := warmth(g))] + [m for g in gs if (m := machine_speed(g))]
    appendix += [n for g in gs if (n := noise_sources(g))]
    appendix += settings(results) + warmups(results)
    body.append(
        f"<details><summary>{html.escape(APPENDIX.removeprefix('## '))}</summary>{ul(appendix)}</details>"
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Lab report</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def reports(results: Results) -> tuple[str, str]:
    """report.md's and report.html's texts, from one grouping of the results."""
    gs = groups(results)
    return markdown(results, gs), page(results, gs)


def write_report(results_dir: Path) -> tuple[Path, Path]:
    """report.md, report.html and results.csv (one line per window) from results.json."""
    results = load(results_dir)
    md, html_path = results_dir / "report.md", results_dir / "report.html"
    for path, text in zip((md, html_path), reports(results), strict=True):
        path.write_text(text)
    write_csv(results, results_dir / "results.csv")
    return md, html_path


# What names a window in results.csv, before its figures (rules.WINDOW_FIGURES, by their headings).
# What names a window: its row and case, each dimension (by its field: ktor, java, protocol, ...),
# then where it sits in the run.
CSV_KEYS = ("row", "case", "engine", "lifetime", *(d.field for d in DIMENSIONS),
            "scenario", "load", "fork", "window", "after", "start", "seconds")  # fmt: skip


def write_csv(results: Results, path: Path) -> None:
    """One line per window: what names it, every figure of the report's tables, and its flags."""

    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow([*CSV_KEYS, *(fig.heading for fig in WINDOW_FIGURES), "flags"])
        for r in results.runs:
            names = {"load": r.load.label, "window": r.repeat, "start": r.window.start}
            names |= {d.field: r.java if d.field == "java" else r.dim(d.field) for d in DIMENSIONS}
            names["seconds"] = r.window.seconds
            keys = [names[k] if k in names else getattr(r, k) for k in CSV_KEYS]
            values = [fig.get(r) for fig in WINDOW_FIGURES]
            out.writerow(
                [*keys, *("" if v is None else round(v, 6) for v in values), " ".join(r.verdict.flags)]
            )


def summary(report_md: str) -> str:
    """What `lab run` prints at its end: report.md up to its appendix (the verdict and the tables),
    taken from the written report rather than rendered again."""
    return report_md.split("\n" + APPENDIX)[0]
