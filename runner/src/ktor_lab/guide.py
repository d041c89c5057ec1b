"""docs/guide.md: which engine and lifetime for a workload, written by `lab guide` from the results
of `lab run` kept under docs/guide/<workload>/ (results.json; beside it `lab guide` writes the run's
report.md and report.html again, and cpu.svg, the chart of its first screen's figure).

Each workload is a `lab run` plan (WORKLOADS: its options beside lab run's defaults). The page opens
with the scorecard, one row a workload: the answer (the leading singletons and the lifetime), how
firmly it is decided (different, the same within the margin, not decided: conclusions.screen), per
figure a user weighs (CPU per request, p99, threads, heap, new connections) the engines no other is
clearly ahead of and how far the rest are behind, and the engines left out or at risk; an engine
that stands out gets its reason from cases.ENGINE_BEHAVIOUR in its row, and every cell links the
report that measured it. Each workload's section gives its chart, every comparison with its
interval, the run (release, JDK, settings unlike today's defaults) and the A/A check. One without
results says so and gives the command that measures it. Nothing on the page is written by hand:
the docs test compares it with what `lab guide` writes.
"""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from . import confidence
from .cases import ENGINE_BEHAVIOUR, HTTP1_ONLY, Case
from .conclusions import (
    BY_KEY,
    COMPARED_UP_TO,
    Group,
    Row,
    Screen,
    aa_tests,
    between,
    budget_hint,
    groups,
    on_fewer_jvms,
    ratio,
    recommended_rows,
    screen,
    standing,
    stopped_answering,
)
from .paths import REPO
from .plan import Plan
from .results import Results, load
from .run_report import primary_chart, reports

GUIDE = REPO / "docs" / "guide.md"
RESULTS = REPO / "docs" / "guide"


@dataclass(frozen=True)
class Workload:
    """A question a user brings, as the `lab run` that answers it."""

    slug: str  # its folder under docs/guide/
    title: str
    options: tuple[str, ...]  # lab run's options beside its defaults
    study: str  # the study page (under docs/) with indicative figures meanwhile
    root: Path = RESULTS  # where its folder is

    @property
    def folder(self) -> Path:
        return self.root / self.slug

    @property
    def command(self) -> str:
        return shlex.join(["lab", "run", *self.options, "--out", f"docs/guide/{self.slug}"])


# The workloads, in the order the page gives them. Loads: the same work for every row, below the
# capacity of the engines a user would choose on 2 cores (large bodies at 75 MB/s, uploads at 50, the
# slow upstream with 500 requests in flight: 250 rps x its 2 s answer).
WORKLOADS = (
    Workload("small-gets", "Small GETs, the upstream on loopback", (), "matrix.md"),
    Workload("https", "HTTPS/1.1 to the upstream", ("--protocols", "https"), "studies/protocols.md"),
    Workload("h2", "HTTP/2 over TLS to the upstream", ("--protocols", "h2"), "studies/protocols.md"),
    Workload(
        "rtt-20", "The upstream 20 ms away", ("--rtt", "20", "--loads", "rate/200/100"), "studies/distance.md"
    ),
    Workload(
        "rtt-80", "The upstream 80 ms away", ("--rtt", "80", "--loads", "rate/200/200"), "studies/distance.md"
    ),
    Workload(
        "large", "Large downloads (15 MB)", ("--scenarios", "static-large", "--loads", "rate/5/20"),
        "studies/streaming.md",
    ),
    Workload(
        "uploads", "Uploads (1 MB)", ("--scenarios", "upload", "--loads", "rate/50/40"),
        "studies/streaming.md",
    ),
    Workload(
        "slow", "A slow upstream (2 s), 500 requests in flight",
        ("--scenarios", "slow", "--loads", "rate/250/600"), "studies/dispatchers.md",
    ),
    Workload(
        "virtual", "JDK 25 with virtual threads", ("--java", "25", "--dispatcher", "virtual"),
        "studies/dispatchers.md",
    ),
)  # fmt: skip


# The plan's settings a kept run may have taken before today's defaults: the Plan field, the `lab run`
# option that sets it, and how the option reads a value.
SETTINGS = (
    ("forks", "--forks", str),
    ("repeats", "--windows", str),
    ("duration_s", "--duration", str),
    ("warmup_s", "--warmup", str),
    ("settle_s", "--settle", str),
    ("spare", "--spare", str),
    ("warm_first", "--warm-first", lambda v: v.label if v else "none"),
    ("margin", "--margin", lambda v: f"{v:.0%}"),
    ("cpus", "--cpus", str),
)

# The figures a user weighs beside CPU per request, each a column of the scorecard.
WEIGHED = ("p99", "threads", "heap")


@dataclass
class Answer:
    """A workload's answer from its results: the first screen's lines, how sure, the figures a user
    weighs beside it, the engines left out or behind with their reason."""

    workload: Workload
    results: Results
    group: Group

    @cached_property
    def screen(self) -> Screen:
        """The run's first screen (conclusions.screen), made once for the table and the section."""
        return screen(self.group)

    @property
    def report(self) -> str:
        return f"guide/{self.workload.slug}/report.md"

    def link(self, text: str) -> str:
        return f"[{text}]({self.report})"

    @property
    def use(self) -> str:
        """The scorecard's answer: the leading engines among singletons, and the lifetime."""
        s, m = self.screen, self.group.margin
        leaders = [] if s.engines.values_only else [row.engine for row, _ in s.engines.leaders]
        decided = [(c.decision(m), c.difference) for _, _, c in s.lifetimes if c is not None]
        dearer = any(d == confidence.DIFFERENT and diff > 0 for d, diff in decided)
        cheaper = any(d == confidence.DIFFERENT and diff < 0 for d, diff in decided)
        lifetime = "one client" if dearer and not cheaper else "no clear lifetime"
        return f"{' or '.join(leaders) or 'no engine clearly'}; {lifetime}"

    @property
    def firmness(self) -> str:
        """How firmly the leader is decided: `different` (clearly ahead of every other engine),
        `the same within 10%`, or `not decided (okhttp -13% to +17%)`, at the run's margin."""
        s, m = self.screen, self.group.margin
        others = [(r, c) for r, c in s.engines.leaders[1:] if c is not None]
        if s.engines.values_only:
            return "too noisy"
        if not s.engines.leaders:
            return "no engine ranked"
        if not others:
            return "different" if s.engines.behind else "alone"
        if all(c.decision(m) == confidence.SAME for _, c in others):
            return f"the same within {m:.0%}"
        return (
            "not decided ("
            + "; ".join(f"{r.engine} {between(c).replace(' and ', ' to ')}" for r, c in others)
            + ")"
        )

    def cell(self, key: str) -> str:
        """A figure's cell among singletons: the engines no other is clearly ahead of, with how far
        behind the others are; `no clear difference`; or `too noisy` where the run finds only a
        difference of more than COMPARED_UP_TO."""
        rows = recommended_rows(self.group)[1]
        st = self.screen.engines if key == self.group.cpu_key else standing(self.group, BY_KEY[key], rows)
        if st.values_only:
            return "too noisy"
        if not st.leaders:
            return "not ranked"
        if not st.behind:
            return "no clear difference"
        behind = "; ".join(f"{r.engine} {c.difference:+.0%}{reason(r, key)}" for r, c in st.behind)
        return f"{', '.join(r.engine for r, _ in st.leaders)} ({behind})"

    @property
    def connections(self) -> str:
        """Which singletons open a connection for (nearly) every request."""
        each = sorted({r.engine for r in recommended_rows(self.group)[1] if r.per_request()})
        return f"{', '.join(each)}: one per request" if each else "every engine reuses"

    def left_out_or_at_risk(self) -> list[str]:
        """The engines not run, the rows left out of the first screen's comparisons, and the risks
        (conclusions.risks' leak, stopped answering, unlimited connections), each with its reason
        from cases.ENGINE_BEHAVIOUR where it has one: `cio: no HTTP/2`."""
        g, st = self.group, self.screen.engines
        out: dict[str, list[str]] = {}

        def say(engine: str, text: str) -> None:
            if text not in out.setdefault(engine, []):
                out[engine].append(text)

        for case, why in self.results.plan.skipped():
            say(case.engine, skip_reason(case, why))
        compared = {r.name for r, _ in st.leaders + st.behind}
        compared |= {r.name for a, b, c in self.screen.lifetimes if c is not None for r in (a, b)}
        for r in g.rows:
            who = f"per-call {r.engine}" if r.case.lifetime == "per-call" else r.engine
            if r.copy <= 1 and r.name not in compared and r.figures[st.figure.key].mean is not None:
                facts = ENGINE_BEHAVIOUR[r.engine]
                tls = r.per_request("tls_full") and "tls_full" in facts
                flags = r.why_not(st.figure).removeprefix(f"{r.called} (").removesuffix(")")
                say(
                    who,
                    facts["tls_full"] if tls else "short of the rate" if flags.startswith("short") else flags,
                )
            if "leak" in r.flags:
                say(who, ENGINE_BEHAVIOUR[r.engine].get("leak", "a leak"))
            if stopped_answering(r):
                say(who, "stopped answering")
        for engine in sorted({r.engine for r in g.rows}):
            if "unlimited" in ENGINE_BEHAVIOUR[engine]:
                say(engine, ENGINE_BEHAVIOUR[engine]["unlimited"])
        alike: dict[str, list[str]] = {}  # engines with the same reasons, named together
        for engine, texts in out.items():
            alike.setdefault(", ".join(texts), []).append(engine)
        return [f"{', '.join(engines)}: {texts}" for texts, engines in alike.items()]

    @property
    def release(self) -> str:
        runs = self.results.runs
        ktor = ", ".join(sorted({r.ktor for r in runs if r.ktor})) or "?"
        java = ", ".join(sorted({r.java_major for r in runs})) or "?"
        return f"Ktor {ktor}, JDK {java}"

    @property
    def shape(self) -> str:
        """`2 CPUs (AMD EPYC), 2 JVMs a row x 3 windows of 10 s`: the machine and the run's size."""
        m, plan = self.results.environment.get("machine", {}), self.results.plan
        return (
            f"{m.get('cpus', '?')} CPUs ({m.get('cpu_model', '?')}), {plan.forks} JVMs a row x "
            f"{plan.repeats} windows of {plan.duration_s} s"
        )

    def unlike_today(self) -> list[str]:
        """`--settle 3 (today 2)`: the settings the run took where its command today would take others
        (lab run's defaults, Plan.default, where the workload's options do not set them: a run kept
        from before a default changed), as the options that would repeat it."""
        today, plan = Plan.default(), self.results.plan
        return [
            f"{option} {show(getattr(plan, field))} (today {show(getattr(today, field))})"
            for field, option, show in SETTINGS
            if option not in self.workload.options and getattr(plan, field) != getattr(today, field)
        ]

    def scorecard_row(self) -> str:
        w, link = self.workload, self.link
        cells = [
            f"[{w.title}](#{anchor(w.title)})",
            link(self.use),
            link(self.firmness),
            link(self.cell(self.group.cpu_key)),
            *(link(self.cell(key)) for key in WEIGHED),
            link(self.connections),
            link("; ".join(self.left_out_or_at_risk()) or "none"),
        ]
        return "| " + " | ".join(cells) + " |"

    def aa(self) -> str:
        """The A/A pair's CPU per request, in the family of its figures (conclusions.aa_tests)."""
        g = self.group
        said = [
            f"A/A {a.called.removesuffix(f' #{a.copy}')}: {signed(c.difference)} ({c.span()})"
            for a, _, key, c in aa_tests(g)
            if key == g.cpu_key
        ]
        return f"{'; '.join(said)}." if said else "No A/A pair."

    def facts(self) -> list[str]:
        """What the run was measured on and with: its release, machine and size, and its settings
        unlike today's defaults (`--settle 3 (today 2)`)."""
        return [self.release, self.shape, *self.unlike_today()]

    def lines(self, said: tuple[str, ...] = ()) -> list[str]:
        """The section: the chart, the comparisons with their intervals, the run (its command, load
        and facts but those `said` once above, or its own of a setting said), the A/A check."""
        s, g, slug = self.screen, self.group, self.workload.slug
        mine = self.facts()
        today = {f.split()[0] for f in said if f.startswith("--")} - {f.split()[0] for f in mine}
        today -= set(self.workload.options)  # the command says those
        own = "".join(f", {fact}" for fact in mine if fact not in said) + "".join(
            f", {o} {show(getattr(self.results.plan, field))}" for field, o, show in SETTINGS if o in today
        )
        return [
            f"![CPU per request](guide/{slug}/{CHART})",
            "",
            *(f"{line}\n" for line in (against_best(s), per_call(s)) if line),
            f"- `{self.workload.command}`: at {g.load.label}{own} ([report.md]({self.report}), "
            f"[report.html](guide/{slug}/report.html)).",
            f"- {self.aa()} {power_line(s)}",
        ]


def against_best(s: Screen) -> str:
    """`CPU per request against apache5: okhttp +2% (-13.1% to +17.4%; --budget 47m would decide
    it); java +92% (+61.0% to +130.0%).`: every engine ranked, against the first screen's
    best, with its interval (conclusions.screen), and those left out."""
    st, g = s.engines, s.group
    if st.best is None:
        return ""
    m, best = g.margin, st.best
    said = []
    for r, c in st.leaders[1:] + st.behind:
        if c is None:
            continue
        hint = budget_hint(g, [c]).removeprefix("lab run ") if c.decision(m) == confidence.UNKNOWN else ""
        span = f"the same within {m:.0%}: {c.tost_span()}" if c.decision(m) == confidence.SAME else c.span()
        said.append(f"{r.engine} {on_fewer_jvms(g, f'{c.difference:+.0%} ({span})', r, best)}")
        if hint:
            said[-1] = f"{said[-1][:-1]}; {hint})"
    out = f" Left out: {', '.join(r.why_not(s.figure) for r in st.left_out)}." if st.left_out else ""
    return f"CPU per request against {best.engine}: {'; '.join(said) or 'nothing else ranked'}.{out}"


def per_call(s: Screen) -> str:
    """`A client per call against one: cio 1.32x (1.15-1.52x), ...; java not compared.`: the first
    screen's lifetime comparisons, each with its interval."""
    g, m = s.group, s.group.margin
    words = {confidence.SAME: f", the same within {m:.0%}", confidence.UNKNOWN: ", not decided"}
    said = [
        f"{a.engine} {on_fewer_jvms(g, ratio(c), a, b)}{words.get(c.decision(m), '')}"
        for a, b, c in s.lifetimes
        if c is not None
    ]
    out = [a.engine for a, _, c in s.lifetimes if c is None]
    if not said and not out:
        return ""
    return (
        "A client per call against one: "
        + "; ".join(said + ([f"{', '.join(out)} not compared"] if out else []))
        + "."
    )


def signed(share: float) -> str:
    """`+1.5%`, and `+0.0%` for a share that rounds to nothing (never `-0.0%`)."""
    return f"{share if round(share, 3) else 0.0:+.1%}"


def skip_reason(case: Case, why: str) -> str:
    """Why a plan did not run `case`, short: the engine's own reason (cases.ENGINE_BEHAVIOUR) for
    the setting that refused it (HTTP/2 on an engine without it, a dispatcher that changes
    nothing of it), else the plan's own words."""
    facts = ENGINE_BEHAVIOUR[case.engine]
    if case.protocol == "h2" and case.engine in HTTP1_ONLY and "no_h2" in facts:
        return facts["no_h2"]
    if "dispatcher" in why and "dispatcher" in facts:
        return facts["dispatcher"]
    return why.split("; ")[0]


def reason(row: Row, key: str) -> str:
    """`: a thread per request in flight`: why `row`'s engine is behind on figure `key`, from
    cases.ENGINE_BEHAVIOUR: its own entry for the figure, on CPU per request its connection per
    request where it opens one, else its `cpu` entry; "" where the table has none."""
    facts = ENGINE_BEHAVIOUR[row.engine]
    if key.startswith("cpu"):
        key = "conns" if row.per_request() and "conns" in facts else "cpu"
    return f": {facts[key]}" if key in facts else ""


def power_line(s: Screen) -> str:
    """`Detects 37%.`: the smallest difference between two engines the first
    screen finds POWER of the time (what it could have missed)."""
    d = s.engines.detectable
    return f"Detects {d:.0%}." if d is not None else ""


# Each workload's chart of the first screen's figure, written beside its results by `lab guide`.
CHART = "cpu.svg"


def answer(w: Workload) -> Answer | None:
    """The workload's answer from its stored results; None when it has none."""
    if not (w.folder / "results.json").exists():
        return None
    results = load(w.folder)
    (group,) = groups(results)  # a workload's plan is one scenario at one load
    return Answer(w, results, group)


HOW = (
    "Each row is one `lab run` at one rate. A cell names the singletons none is clearly ahead of, and "
    "how far the rest are behind; *too noisy*: the run detects only differences above "
    f"{COMPARED_UP_TO:.0%}. *How firm*: *different*, *the same within {confidence.MARGIN:.0%}*, or *not "
    "decided* ([matrix.md](matrix.md)). In a section, *A/A*: two copies of one case, whose CPU per "
    f"request's interval should hold 0; *detects N%*: the difference between two engines a run finds "
    f"{confidence.POWER:.0%} of the time."
)


def page(workloads: tuple[Workload, ...] | None = None) -> str:
    """docs/guide.md's text (of WORKLOADS unless `workloads`)."""
    workloads = WORKLOADS if workloads is None else workloads
    answers = {w.slug: answer(w) for w in workloads}
    out = [
        "# Which engine and lifetime, for your workload",
        "",
        "Which Ktor client engine and lifetime to use, per workload, as measured: written by `lab "
        "guide` from the runs under [guide/](guide/), never by hand.",
        "",
        "| workload | use | how firm | CPU / request | p99 | threads | heap | new connections | "
        "left out or at risk, and why |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for w in workloads:
        a = answers[w.slug]
        out.append(
            a.scorecard_row() if a else f"| [{w.title}](#{anchor(w.title)}) | not measured yet |" + " - |" * 7
        )
    measured = [a for a in answers.values() if a]
    counts = Counter(fact for a in measured for fact in a.facts())
    said = tuple(fact for fact, n in counts.items() if n * 2 > len(measured))  # most runs': said once
    out += ["", HOW + (f" Every run, unless said: {', '.join(said)}." if said else "")]
    for w in workloads:
        out += ["", f"## {w.title}", ""]
        if a := answers[w.slug]:
            out += a.lines(said)
        else:
            out += [
                "Not measured yet. Measure it (about 40-60 minutes on 2 cores), then write this page again:",
                "",
                "```sh",
                f".venv/bin/{w.command}",
                ".venv/bin/lab guide",
                "```",
                "",
                f"Meanwhile, indicative figures (one JVM a row): [{w.study}]({w.study}).",
            ]
    return "\n".join(out) + "\n"


def charts(workloads: tuple[Workload, ...] | None = None) -> dict[Path, str]:
    """Each measured workload's chart (run_report.primary_chart), by path."""
    workloads = WORKLOADS if workloads is None else workloads
    return {w.folder / CHART: primary_chart(a.group) for w in workloads if (a := answer(w))}


def kept_reports(docs: Path | None = None) -> dict[Path, str]:
    """The report.md and report.html of every `lab run` kept under docs/ (a folder with its
    results.json and results.csv), by path: written again from its results, so that no kept report
    says what the code would not."""
    out = {}
    for csv in sorted((docs or REPO / "docs").rglob("results.csv")):
        out[csv.parent / "report.md"], out[csv.parent / "report.html"] = reports(load(csv.parent))
    return out


def anchor(title: str) -> str:
    """GitHub's anchor of a heading."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -")
    return kept.replace(" ", "-")
