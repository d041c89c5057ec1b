"""The studies that ask what `lab run` measures, as presets of it: one registration each.

A `PlanStudy` is its question, its parts (each a list of `lab run` options: the cases, scenario,
load and dimensions it asks for) and the dimensions it compares. `lab study NAME` runs every part
through `lab run`'s own pipeline (each proxy warmed once, forks, interleaved windows, windows left
out and spared, the tests over JVMs with their intervals), one part after the other, each into a
folder of its own that `lab report` and `lab compare` read as any run's. The options a user adds
are `lab run`'s and follow each part's, so they win (`--forks 3`, `--cases singleton-okhttp`).

The study's page, report.md beside the parts, is made from the parts' results.json alone (`lab
report` makes it again): the verdict in words first (each change of a compared dimension, summed up
per figure over the cases), then per part a table of every change with its interval and the link
to the part's own report.
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .. import conclusions, confidence, measure, run_report
from ..backends import NativeBackend
from ..cases import BY_FIELD
from ..commands import run as lab_run
from ..conclusions import Change, Group
from ..confidence import Comparison
from ..errors import LabError
from ..plan import Plan
from ..render import Column, Table
from ..results import Results
from ..results import load as load_results
from ..rules import BY_KEY, STUDY_FIGURES, not_compared
from ..rundirs import results_dir
from ..verdict import RATE_FLAGS

# The file that makes a folder a study's (its name, command and parts), beside the parts' folders.
STUDY_FILE = "study.json"


@dataclass(frozen=True)
class Part:
    """One `lab run` of a study: its folder's name, what it asks in a few words, its options."""

    name: str
    what: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class PlanStudy:
    name: str
    title: str
    help: str
    question: str  # the page's first paragraph: what the study asks and how
    parts: tuple[Part, ...] | Callable[[], tuple[Part, ...]]
    # The dimensions (cases.DIMENSIONS' fields) whose one-changed comparisons are the verdict; none:
    # each part's first screen (its engines and lifetimes) is.
    compares: tuple[str, ...] = ()
    figures: tuple[str, ...] = STUDY_FIGURES  # the figures its tables give per change
    # More of the verdict in words, from the parts' results (by part name).
    words: Callable[[dict[str, Results]], list[str]] | None = None
    notes: tuple[str, ...] = ()  # what the study does not measure here, and where it is measured
    # Whether each group's first screen (per call against singleton per engine, the engines ranked)
    # is part of the verdict; always when the study compares no dimension.
    screens: bool = False

    def all_parts(self) -> tuple[Part, ...]:
        return self.parts() if callable(self.parts) else self.parts

    def add_parser(self, sub) -> None:
        parts = self.all_parts()
        p = sub.add_parser(
            self.name,
            help=self.help,
            description=f"{self.question} Each part is `lab run` with its options, then yours (the same "
            "options as lab run's; yours win).",
            epilog="parts:\n"
            + "\n".join(f"  {x.name}: {x.what}\n    lab run {shlex.join(x.argv)}" for x in parts),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_run_options(p)
        p.add_argument(
            "--parts",
            default=",".join(x.name for x in parts),
            help="comma-separated parts to run (default: %(default)s)",
        )


def add_lab_run(p: argparse.ArgumentParser) -> None:
    """`lab run`'s options but --backend and --grafana (a study runs natively)."""
    lab_run.add_measuring(p)
    lab_run.add_shared(p)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """add_lab_run's options, none with a value of its own: what a user gives is laid over each
    part's options; the help says lab run's default."""
    add_lab_run(p)
    for action in p._actions:  # noqa: SLF001 (argparse has no other way to reach a help text)
        if action.dest == "out":
            action.help = "results folder (default: results/study-NAME-<timestamp>)"
        if action.dest in ("help", "out"):
            continue
        if action.help and "%(default)s" in action.help:
            action.help = action.help.replace("%(default)s", str(action.default).replace("%", "%%"))
        action.default = argparse.SUPPRESS
    p.set_defaults(out=None)


def run_parser() -> argparse.ArgumentParser:
    """`lab run`'s options alone, to read a part's."""
    p = argparse.ArgumentParser(prog="lab run", add_help=False)
    add_lab_run(p)
    return p


def given(args: argparse.Namespace) -> dict:
    """The `lab run` options the user gave (the study's parser holds no default of them)."""
    dests = {a.dest for a in run_parser()._actions}  # noqa: SLF001
    return {k: v for k, v in vars(args).items() if k in dests and k != "out"}


def part_plan(part: Part, user: dict) -> Plan:
    """The part's `lab run` plan: its options, then the user's over them; LabError for any that
    cannot run, naming it."""
    try:
        args = run_parser().parse_args(part.argv)
    except SystemExit:  # argparse has printed what it refused
        raise LabError(f"part {part.name}: lab run {shlex.join(part.argv)} is refused") from None
    for k, v in user.items():  # a repeatable option (--set) adds to the part's; the others replace
        setattr(args, k, getattr(args, k) + v if isinstance(v, list) else v)
    try:
        return lab_run.plan_of(args)
    except LabError as e:
        raise LabError(f"part {part.name}: {e}") from None


def chosen_parts(study: PlanStudy, args: argparse.Namespace) -> list[Part]:
    """The parts --parts names, in its order; LabError for a name the study has not."""
    by_name = {x.name: x for x in study.all_parts()}
    names = [n.strip() for n in args.parts.split(",") if n.strip()]
    if bad := [n for n in names if n not in by_name]:
        raise LabError(f"--parts: {bad[0]!r} is not one of {', '.join(by_name)}")
    if not names:
        raise LabError(f"--parts: give one or more of {', '.join(by_name)}")
    return [by_name[n] for n in names]


def planned_parts(study: PlanStudy, args: argparse.Namespace) -> list[tuple[Part, Plan]]:
    """Every chosen part's plan, all checked before anything starts."""
    user = given(args)
    return [(part, part_plan(part, user)) for part in chosen_parts(study, args)]


def dry_run(study: PlanStudy, planned: list[tuple[Part, Plan]], out: object) -> list[str]:
    lines, total = [], 0.0
    for part, plan in planned:
        NativeBackend().check(plan, machine=False)
        lines += skipped(part, plan)
        lines.append(
            f"{part.name}: " + lab_run.announce(plan, True, f"{out}/{part.name}").removeprefix("lab run: ")
        )
        total += measure.planned_seconds(plan)
    lines.append(f"the study: at most about {measure.format_seconds(total)} in all (spare windows apart)")
    return lines


def skipped(part: Part, plan: Plan) -> list[str]:
    """The combinations the part's plan skips, each with its reason; counted beyond FEW."""
    said = [f"{case.name}: {why.split('; ')[0]}" for case, why in plan.skipped()]
    if len(said) <= FEW:
        return [f"{part.name}: skips {s}" for s in said]
    return [f"{part.name}: skips {len(said)} combinations its cases cannot take, e.g. {said[0]}"]


def run_parts(
    study: PlanStudy, planned: list[tuple[Part, Plan]], args: argparse.Namespace, command: str
) -> tuple[Path, list]:
    """Every chosen part (`planned_parts`) through `lab run`'s pipeline, each on native parts of its
    own, into `<out>/<part>/`; study.json first, the study's page after each part (also when one
    stops or fails). Returns the page's path and every window measured."""
    for _, plan in planned:
        NativeBackend().check(plan)
    d = results_dir(args.out, study.name)
    started = time.time()
    said = {
        "study": study.name,
        "command": command,
        "parts": [p.name for p, _ in planned],
        "argv": {p.name: list(p.argv) for p, _ in planned},
    }
    (d / STUDY_FILE).write_text(json.dumps(said, indent=2) + "\n")
    runs: list = []
    for part, plan in planned:
        folder = d / part.name
        print(f"lab study {study.name}: part {part.name}: {part.what}", flush=True)
        print(lab_run.announce(plan, True, folder), flush=True)
        for line in skipped(part, plan):
            print(f"lab study {study.name}: {line}", flush=True)
        backend = NativeBackend()
        try:
            backend.open(plan, folder)
            results = measure.run_plan(plan, backend, folder)
        finally:
            backend.close()
            if (folder / "results.json").exists() and load_results(folder).runs:
                run_report.write_report(folder)
            write_page(d, study)  # what finished so far, whatever happens next
        runs += results.runs
        if results.interrupted:
            raise KeyboardInterrupt
    print(
        f"lab study {study.name}: {len(planned)} part(s) in {measure.format_seconds(time.time() - started)}"
    )
    return d / "report.md", runs


def check_out(out: Path | None) -> None:
    """A study writes into a new or empty folder: its page is made from what is there (checked by
    `lab study` before anything starts)."""
    if out is not None and out.is_dir() and any(out.iterdir()):
        what = "a study's results are" if is_study(out) else "files are"
        raise LabError(f"--out {out}: {what} there already; give a new or empty folder")


# --- the page, from the parts' results --------------------------------------------------------


def write_page(d: Path, study: PlanStudy) -> Path:
    """report.md of `study`'s folder `d` (study.json and its parts' results.json)."""
    path = d / "report.md"
    path.write_text(page_of(d, study))
    return path


def page_of(d: Path, study: PlanStudy, base: str = "") -> str:
    """The page of `study`'s folder `d`, its links to the parts' reports under `base` (a page kept
    beside the folder: `replay/`), and its command as run but for --out (where it wrote)."""
    said = json.loads((d / STUDY_FILE).read_text())
    argv = {name: tuple(a) for name, a in said.get("argv", {}).items()}
    command = said["command"] if not base else without_out(said["command"])
    return page(study, command, results_in(d), said["parts"], argv, base)


def without_out(command: str) -> str:
    """`lab study replay --loads X --out /tmp/r` -> `lab study replay --loads X` (also `--out=X`
    and the prefixes argparse takes for it, `--ou X`)."""

    def is_out(word: str) -> bool:
        name = word.split("=", 1)[0]
        return len(name) >= 3 and "--out".startswith(name)

    words = shlex.split(command)
    kept = []
    for i, w in enumerate(words):
        if is_out(w) or (i > 0 and is_out(words[i - 1]) and "=" not in words[i - 1]):
            continue
        kept.append(w)
    return shlex.join(kept)


def is_study(d: Path) -> bool:
    """Whether `d` is a folder `lab study` wrote of `lab run` parts."""
    return (d / STUDY_FILE).exists()


def study_in(d: Path) -> str:
    """The name of the study that wrote the folder `d`."""
    return json.loads((d / STUDY_FILE).read_text())["study"]


def results_in(d: Path) -> dict[str, Results]:
    """The results of each part of the study folder `d` that measured at least one window."""
    names = json.loads((d / STUDY_FILE).read_text())["parts"]
    held = {n: load_results(d / n) for n in names if (d / n / "results.json").exists()}
    return {n: r for n, r in held.items() if r.runs}


def page(
    study: PlanStudy,
    command: str,
    results: dict[str, Results],
    planned: Sequence[str] = (),
    argv: dict[str, tuple[str, ...]] | None = None,
    base: str = "",
) -> str:
    """The study's page: its question, the verdict in words, then per part its command, design and
    every change of a compared dimension with its interval. `planned`: the parts the command ran
    (one without results is named); `argv`: each part's options as they ran (study.json); `base`:
    where the parts' folders are, from the page."""
    parts = {p.name: p for p in study.all_parts()}
    argv = argv or {}
    lines = [f"# {study.title}", "", study.question, "", f"`{command}`", "", "## Verdict", ""]
    lines += [f"- {w}" for w in verdict(study, results)] or ["- No part was measured."]
    lines += [f"- Part {n}: not measured (stopped or failed before its first window)." for n in planned
              if n not in results]  # fmt: skip
    for name, r in results.items():
        lines += [f"- {name}: {said}"] if (said := smaller(study, parts.get(name), r)) else []
    lines += [f"- Part {p.name} ({p.what}): not in this run (`lab study {study.name} --parts {p.name}`)."
              for p in study.all_parts() if p.name not in results and p.name not in planned]  # fmt: skip
    lines += [f"- {n}" for n in study.notes]
    lines += ["", ADJUSTED, ""]
    for name, r in results.items():
        part = parts.get(name)
        lines += [f"## {name}: {heading(part, r)}", ""]
        if options := argv.get(name) or (part.argv if part else ()):
            lines += [f"`lab run {shlex.join(options)}`, then the options of the command above.", ""]
        lines += [design(r) + f" Its lab report: [{base}{name}/report.md]({base}{name}/report.md).", ""]
        # Per group, its compared changes (its first screen is said in the verdict, once).
        for g in conclusions.groups(r):
            if rows := [c for c in conclusions.changes(g) if compared(study, c)]:
                lines += [f"{g.heading}:", "", changes_table(study, rows), ""]
    return "\n".join(lines) + "\n"


def smaller(study: PlanStudy, part: Part | None, r: Results) -> str:
    """What the part's own design measures and this run did not (cases, dimension values, JVMs,
    windows), and the command that measures it all; "" when the run measured all of it."""
    if part is None:
        return ""
    try:
        full = part_plan(part, {})
    except LabError:  # the part's own design cannot be planned here: nothing to measure it against
        return ""
    missing = []
    ran_cases = {c.id for c in r.plan.cases}
    if cases := [c.id for c in full.cases if c.id not in ran_cases]:
        missing.append(f"{', '.join(cases)} (cases)")
    ran_loads = {x.label for x in r.plan.loads}
    if loads := [x.label for x in full.loads if x.label not in ran_loads]:
        missing.append(f"loads {', '.join(loads)}")
    if scenarios := [x for x in full.scenarios if x not in r.plan.scenarios]:
        missing.append(f"scenarios {', '.join(scenarios)}")
    for k, values in full.dims.items():
        d = BY_FIELD[k]
        ran = r.plan.dims.get(k, [d.default])
        if left := [d.show(v) for v in values if v not in ran]:
            missing.append(f"{d.title} {', '.join(left)}")
    if r.plan.forks < full.forks or r.plan.repeats < full.repeats:
        missing.append(f"{full.forks} JVMs x {full.repeats} windows a row")
    if not missing:
        return ""
    return (
        f"measured without {'; '.join(missing)}, a smaller run than the part's own "
        f"(`lab study {study.name} --parts {part.name}` measures all of it: at most about "
        f"{measure.format_seconds(measure.planned_seconds(full))})."
    )


def heading(part: Part | None, r: Results) -> str:
    """What a part measures, as it says; and the loads it ran at beyond its own, where the command's
    --loads added them (those it left out are said under the verdict, by smaller())."""
    if part is None:
        return ""
    try:
        own = {x.label for x in part_plan(part, {}).loads}
    except LabError:
        return part.what
    ran = [x.label for x in r.plan.loads]
    extra = [x for x in ran if x not in own]
    if not extra:
        return part.what
    if len(extra) == len(ran):  # none of its own: its words name a load that was not run
        return f"{part.what}; measured at {', '.join(extra)} instead (--loads)"
    return f"{part.what}; also at {', '.join(extra)} (--loads)"


# How the page's changes are tested, said once under the verdict.
ADJUSTED = (
    "Each change is tested over the JVMs (the spread pooled over the part's rows), its p values adjusted "
    "over every change, case and figure of its part and load (Benjamini-Hochberg: everything the verdict "
    "can name), each interval at the level that goes with it. `~`: no clear difference; `not compared`: "
    "a row flagged, short of its rate, or a rate set by the load (rps at a fixed rate); `untested`: no "
    "spread to test with."
)


def design(r: Results) -> str:
    p = r.plan
    text = (
        f"{len(p.cases)} cases, {p.forks} JVMs a row x {p.repeats} windows of {p.duration_s} s, each JVM "
        f"warmed once (up to {p.warmup_s} s); {len(r.runs)} windows in "
        f"{measure.format_seconds(r.wall_seconds)}."
    )
    return text + (f" Interrupted: {len(r.runs)} of {len(p.runs())} windows." if r.interrupted else "")


def compared(study: PlanStudy, c: Change) -> bool:
    titles = {BY_FIELD[f].title for f in study.compares}
    return c.dimension in titles


def keys(study: PlanStudy, g: Group) -> tuple[str, ...]:
    """The study's figures with the group's CPU per request (with the JIT when it was not seen)."""
    return tuple(g.cpu_key if k == "cpu_no_jit" else k for k in study.figures)


def reasons_not_judged(c: Change, key: str) -> list[str]:
    """Why a change is not judged on `key`: the flags that keep its rows apart, or `not measured`."""
    return not_compared(BY_KEY[key], c.group.load, c.before.runs, c.after.runs) or ["not measured"]


def why_not(c: Change, key: str, name: str = "") -> str:
    """`singleton-cio (not-warm)`: the case of a change not judged on `key` (or `name`), and why."""
    return f"{name or c.case} ({', '.join(reasons_not_judged(c, key))})"


def case_names(cs: Sequence[Change]) -> dict[int, str]:
    """Each change's case, with what it holds that the step's other changes do not (`per-call-cio
    with pipelining on`), so that two changes of one case at two settings read apart."""
    held = [c.same.split(", ") if c.same else [] for c in cs]
    common = set.intersection(*map(set, held)) if held else set()
    return {
        id(c): c.case + (f" with {', '.join(own)}" if (own := [h for h in hs if h not in common]) else "")
        for c, hs in zip(cs, held, strict=True)
    }


def family(study: PlanStudy, cs: Sequence[Change]) -> dict[tuple[int, str], Comparison | None]:
    """Every comparison the page can claim for a group, by (id of its change, figure): each compared
    change on each of the study's figures (None: not judged), its p value adjusted over all of them
    at once. One family: the verdict names a change on any figure of any case, so its error is
    controlled over that whole page, not over each figure's cases alone."""
    if not cs:
        return {}
    pairs = [(c, k) for c in cs for k in keys(study, cs[0].group)]
    # None: not one to judge (Change.judged: either row flagged on the figure or short of its fixed
    # rate, or rps where a target set the rate)
    found = [c.comparison(k) if c.judged(k) else None for c, k in pairs]
    adjusted = iter(confidence.adjust([x for x in found if x is not None]))
    return {
        (id(c), k): next(adjusted) if x is not None else None for (c, k), x in zip(pairs, found, strict=True)
    }


def short(c: Comparison | None) -> str:
    """`+12.0% (+5.1% to +20.3%)`, `~ (-3.0% to +8.2%)` when the test names no difference, `not
    compared`, or `+4.0% (untested)`; for a figure on the linear scale (a count that may be 0) the
    difference in its own units, `+998.1 (+990.2 to +1,006.0)`."""
    if c is None:
        return "not compared"
    if c.difference is None:
        return "-"
    if not c.log and c.d is not None:  # a count that may be 0: its difference in its own units
        change, span = f"{c.d:+,.1f}", c.units_span()
    else:
        change, span = f"{c.difference:+.1%}", c.span()
    if c.p is None:
        return f"{change} (untested)"
    span = f" ({span})" if span else ""
    return f"{change}{span}" if c.clear else f"~{span}"


def by_step(cs: Sequence[Change]) -> dict[tuple[str, str, str], list[Change]]:
    """Changes by the step they make (the dimension, from, to): each step a family of its cases."""
    out: dict[tuple[str, str, str], list[Change]] = {}
    for c in cs:
        out.setdefault((c.dimension, c.before_name, c.after_name), []).append(c)
    return out


def changes_table(study: PlanStudy, rows: Sequence[Change]) -> str:
    ks = keys(study, rows[0].group)
    tested = family(study, rows)
    cells = {id(c): {k: short(tested[(id(c), k)]) for k in ks} for c in rows}
    columns = [
        Column("case", lambda c: c.case),
        Column("held", lambda c: c.same),
        Column("change", lambda c: f"{c.dimension} {c.before_name} -> {c.after_name}"),
        *[Column(BY_KEY[k].heading, lambda c, k=k: cells[id(c)][k]) for k in ks],
    ]
    return Table(columns, rows, numeric=[False, False, False, *[True] * len(ks)]).markdown()


def verdict(study: PlanStudy, results: dict[str, Results]) -> list[str]:
    """Per part and group: each change of a compared dimension summed up per figure over the cases
    (and with `screens`, or comparing none, the first screen at each value of the compared
    dimensions); then the study's own words."""
    out = []
    for name, r in results.items():
        for g in conclusions.groups(r):
            if study.screens or not study.compares:
                for label, sub in subgroups(study, g):
                    said = [*run_report.answer(sub), conclusions.engines_power(conclusions.screen(sub))]
                    out.append(f"{name}, {g.heading}{label}: " + " ".join(x for x in said if x))
            found = [c for c in conclusions.changes(g) if compared(study, c)]
            tested = family(study, found)
            for (dim, a, b), cs in by_step(found).items():
                out.append(f"{name}, {g.heading}, {dim} {a} -> {b}: " + summed(study, g, cs, tested))
            if said := power(g, tested):
                out.append(f"{name}, {g.heading}: {said}")
    if study.words:
        out += study.words(results)
    return out


def power(g: Group, tested: dict[tuple[int, str], Comparison | None]) -> str:
    """What the part could have missed: the smallest change in CPU per request its comparisons find
    POWER of the time, adjusted as they were (the largest over the cases: the least precise)."""
    cpu = [c for (_, k), c in tested.items() if k == g.cpu_key and c is not None]
    found = [d for c in cpu if (d := c.detectable()) is not None]
    if not found:
        return ""
    return (
        f"this run finds a change in CPU per request of {max(found):.0%} or more "
        f"{confidence.POWER:.0%} of the time (its {cpu[0].family} comparisons adjusted together); "
        "a smaller one may be there and not named."
    )


def subgroups(study: PlanStudy, g: Group) -> list[tuple[str, Group]]:
    """The group's rows at each value of the compared dimensions (`, RTT 20 ms, pipelining off`),
    so that a first screen weighs rows of one setting; the whole group when it compares none."""
    if not study.compares:
        return [("", g)]
    out: dict[str, list] = {}
    place: dict[str, tuple] = {}
    for row in g.rows:
        run = row.runs[0]
        shown = [(BY_FIELD[f], BY_FIELD[f].show(run.dim(f))) for f in study.compares]
        label = "".join(f", {d.title} {text}" for d, text in shown)
        place[label] = tuple(d.order(text) for d, text in shown)
        out.setdefault(label, []).append(row)
    return [(label, replace(g, rows=briefly(out[label]))) for label in sorted(out, key=place.__getitem__)]


def briefly(rows: list) -> list:
    """Copies of `rows` named by what sets them apart among themselves (the label says the rest)."""
    copies = [replace(r) for r in rows]
    conclusions.name_briefly(copies)
    return copies


def summed(
    study: PlanStudy, g: Group, cs: list[Change], tested: dict[tuple[int, str], Comparison | None]
) -> str:
    """Per figure: for which of the cases it is clearly higher or lower (`tested`: the group's family),
    for how many there is no clear difference, and which are not compared or untested; a change not
    compared on any figure is named once, at the end."""
    ks = keys(study, g)
    named = case_names(cs)
    never = [c for c in cs if all(tested[(id(c), k)] is None for k in ks)]
    rest = [c for c in cs if c not in never]
    said = []
    for k in ks if rest else ():
        comps = [(named[id(c)], tested[(id(c), k)]) for c in rest]
        judgeable = [(n, x) for n, x in comps if x is not None and x.difference is not None]
        unjudged = [why_not(c, k, named[id(c)]) for c, (_, x) in zip(rest, comps, strict=True) if x is None]
        if not judgeable and all(w.endswith("(not measured)") for w in unjudged):
            continue  # measured for none of the cases (or on one side only: carriers before virtual)
        if not judgeable and k == "rps" and all(rate_set(c) for c in rest):
            continue  # every rate was the load's (a fixed rate held): nothing to compare, as ADJUSTED says
        up = [(n, x.difference) for n, x in judgeable if x.clear and x.difference > 0]
        down = [(n, x.difference) for n, x in judgeable if x.clear and x.difference < 0]
        same = [n for n, x in judgeable if x.p is not None and not x.clear]
        bits = [f"{way} for {among(found)}" for way, found in (("higher", up), ("lower", down)) if found]
        for what, names in (
            ("no clear difference", same),
            ("untested", [n for n, x in judgeable if x.p is None]),
            ("not compared", unjudged),
        ):
            if names:
                bits.append(f"{what} for {', '.join(names) if len(names) <= FEW else len(names)}")
        said.append(f"{BY_KEY[k].words or BY_KEY[k].heading} {', '.join(bits)}")
    if never:
        said.append("not compared on any figure: " + ", ".join(why_never(c, ks, named[id(c)]) for c in never))
    n = len(cs)
    if not said:
        return f"of {n} case{'s' if n != 1 else ''}, nothing measured to compare."
    return f"of {n} case{'s' if n != 1 else ''}, " + "; ".join(said) + "."


def rate_set(c: Change) -> bool:
    """Whether a target or the load model set either row's rate (RATE_FLAGS)."""
    return any(set(r.flags) & set(RATE_FLAGS) for r in (c.before, c.after))


def why_never(c: Change, ks: Sequence[str], name: str) -> str:
    """`singleton-cio with RTT 80 ms (errors, not-warm)`: a change judged on none of `ks`, and every
    reason any figure gave."""
    # rps's rate flags (a held target) say why rps is not compared, not why the change is not
    reasons = {r for k in ks if k != "rps" for r in reasons_not_judged(c, k)}
    reasons = reasons or set(reasons_not_judged(c, "rps"))
    if len(reasons) > 1:
        reasons.discard("not measured")
    return f"{name} ({', '.join(sorted(reasons))})"


# Up to this many cases are named in a summed-up line; more are counted.
FEW = 3


def among(found: list[tuple[str, float]]) -> str:
    """`singleton-cio (+12%)`, or `5 (+8% to +40%)`."""
    if len(found) <= FEW:
        return ", ".join(f"{n} ({d:+.0%})" for n, d in found)
    values = [d for _, d in found]
    return f"{len(found)} ({min(values):+.0%} to {max(values):+.0%})"
