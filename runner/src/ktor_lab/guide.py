"""docs/guide.md: which engine and lifetime for a workload, written by `lab guide` from the results
of `lab run` kept under docs/guide/<workload>/ (results.json and its report.md).

Each workload is a `lab run` plan (WORKLOADS: its options beside lab run's defaults: 2 JVMs a row,
3 windows a JVM, the A/A pair, every comparison with its interval). A workload with results gets
the run's own first screen (conclusions.screen: the lifetime per engine and the engines among
singletons on CPU per request, each difference with its interval), its risks by name, the release,
JDK and machine it was measured on, and the smallest difference it finds 80% of the time. One
without says so and gives the command that measures it; the study page with indicative figures
is named beside it. Nothing on the page is written by hand: the docs test compares it with what
`lab guide` writes.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .cases import ENGINE_FACTS
from .conclusions import (
    Group,
    Screen,
    aa_check,
    engines_answer,
    family_line,
    groups,
    lifetime_answer,
    listed,
    risks,
    screen,
)
from .paths import REPO
from .results import Results, load

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


@dataclass
class Answer:
    """A workload's answer from its results: the first screen's lines, how sure, the risks."""

    workload: Workload
    results: Results
    group: Group

    @cached_property
    def screen(self) -> Screen:
        """The run's first screen (conclusions.screen), made once for the table and the section."""
        return screen(self.group)

    @property
    def use(self) -> str:
        """The summary table's cell: the leading engines among singletons, and the lifetime."""
        s = self.screen
        leaders = sorted({row.engine for row, _ in s.engines.leaders})
        dearer = [c for _, _, c in s.lifetimes if c is not None and c.clear and c.difference > 0]
        untold = [a.engine for a, _, c in s.lifetimes if c is not None and not c.clear]
        lifetime = "one client for the process" if dearer else "no clear lifetime"
        if dearer and untold:
            lifetime += f" (no clear difference for {', '.join(untold)})"
        return f"{' or '.join(leaders) or 'no engine clearly'}; {lifetime}"

    @property
    def measured_on(self) -> str:
        runs = self.results.runs
        ktor = ", ".join(sorted({r.ktor for r in runs if r.ktor})) or "?"
        java = ", ".join(sorted({r.java_major for r in runs})) or "?"
        machine = self.results.environment.get("machine", {})
        return f"Ktor {ktor}, JDK {java}, {machine.get('cpus', '?')} CPUs ({machine.get('cpu_model', '?')})"

    def lines(self) -> list[str]:
        s, g = self.screen, self.group
        engines = sorted({row.case.engine for row, _ in s.engines.leaders})
        plan = self.results.plan
        short = listed([r for r in g.rows if not r.kept_rate(g.load)])
        return [
            *(f"{line}\n" for line in (lifetime_answer(s), engines_answer(s)) if line),
            f"- Measured with `{self.workload.command}` on {self.measured_on}: "
            f"{plan.forks} JVMs a row x {plan.repeats} windows of {plan.duration_s} s, at "
            f"{g.load.describe()}; the run's report: [report.md](guide/{self.workload.slug}/report.md).",
            *(
                [f"- Could not keep the rate in every window, so not compared: {', '.join(short)}."]
                if short and g.load.model == "rate"
                else []
            ),
            *(f"- Not run: {case.name}: {why.split('; ')[0]}." for case, why in plan.skipped()),
            f"- {family_line(s)}",
            f"- {aa_check(g)}",
            *(f"- Risk: {line}" for line in risks(self.results, g)),
            *(f"- Engine: {e}: {ENGINE_FACTS[e]}." for e in engines),
            f"- The study with more of this workload: [{self.workload.study}]({self.workload.study}).",
        ]


def answer(w: Workload) -> Answer | None:
    """The workload's answer from its stored results; None when it has none."""
    if not (w.folder / "results.json").exists():
        return None
    results = load(w.folder)
    (group,) = groups(results)  # a workload's plan is one scenario at one load
    return Answer(w, results, group)


def page(workloads: tuple[Workload, ...] = WORKLOADS) -> str:
    """docs/guide.md's text."""
    answers = {w.slug: answer(w) for w in workloads}
    out = [
        "# Which engine and lifetime, for your workload",
        "",
        "Written by `lab guide` from the results under [guide/](guide/): do not edit by hand (the docs",
        "test compares this page with what `lab guide` writes). Each workload is a `lab run` with its",
        "defaults (2 JVMs a row, 3 windows each, an A/A pair; [matrix.md](matrix.md) says how it",
        "decides): an engine or lifetime is named only when the run's test says so, each difference",
        "with its 95% interval, on CPU per request at the same rate for every row. A workload not",
        "measured yet says so, with the command that measures it.",
        "",
        "| workload | use | measured on |",
        "| --- | --- | --- |",
    ]
    for w in workloads:
        a = answers[w.slug]
        use, on = (a.use, a.measured_on) if a else ("not measured yet", "-")
        out.append(f"| [{w.title}](#{anchor(w.title)}) | {use} | {on} |")
    for w in workloads:
        out += ["", f"## {w.title}", ""]
        if a := answers[w.slug]:
            out += a.lines()
        else:
            out += [
                "Not measured to this page's standard yet. Measure it (about 40-60 minutes on 2 cores), then "
                "write this page again:",
                "",
                "```sh",
                f".venv/bin/{w.command}",
                ".venv/bin/lab guide",
                "```",
                "",
                f"Meanwhile, indicative figures (one JVM a row): [{w.study}]({w.study}).",
            ]
    return "\n".join(out) + "\n"


def anchor(title: str) -> str:
    """GitHub's anchor of a heading."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -")
    return kept.replace(" ", "-")


def write(path: Path = GUIDE) -> Path:
    path.write_text(page())
    return path
