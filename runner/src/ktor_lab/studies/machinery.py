"""The small runner of the studies that measure what `lab run` does not (JMH, bursts of slow
requests, transfers, faults): a plan of runs -> typed rows -> tables, charts and words. The studies
that ask what `lab run` measures are presets of it instead (plans.py).

Such a study (one module each) declares a `Study`: its options, its plan (the runs, checked before
anything starts), the parts its runs share, how one run is measured into rows (dataclasses),
and its report (tables, charts, words) from those rows. `run` does the rest: the folder
`results/study-<name>-<timestamp>/`, one progress line per run, results.json (environment,
settings, rows), report.md and one SVG per chart. The doc pages in docs/studies/ show a real
run's tables and charts.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from .. import metrics, render
from ..backends import Backend, NativeBackend
from ..cases import ENGINES, LIFETIMES, Case, all_of
from ..machine import environment
from ..network import Network
from ..rundirs import results_dir

# Seconds a study's fresh proxy takes to start (a JVM, until /health answers) and to stop: 3-4 s
# on the lab's 2 cores in the threads and streaming studies' runs (docs/studies/); the items of
# those studies (and of faults and protocols' uploads) count it once per proxy in their dry run.
PROXY_START_S = 5

Item = TypeVar("Item")
Row = TypeVar("Row")
Parts = TypeVar("Parts")


class PlannedItem(Protocol):
    """One run of a study's plan, as its dry run counts it: its kind, what each is, its most time."""

    KIND: ClassVar[str]
    EACH: ClassVar[str]

    def planned_seconds(self) -> float: ...


@dataclass
class Report:
    """A study's page: its settings, tables (heading, markdown), charts (file name, svg), notes."""

    title: str
    settings: dict[str, Any]
    tables: list[tuple[str, str]] = field(default_factory=list)
    charts: list[tuple[str, str]] = field(default_factory=list)
    notes: Sequence[str] = ()


@dataclass(frozen=True)
class Study(Generic[Item, Row, Parts]):
    name: str
    help: str
    add_options: Callable[[argparse.ArgumentParser], None]
    plan: Callable[[argparse.Namespace], list[Item]]  # ValueError for options that cannot run
    parts: Callable[[argparse.Namespace, Path], contextlib.AbstractContextManager[Parts]]
    measure: Callable[[Parts, Item, argparse.Namespace], list[Row]]
    report: Callable[[list[Row], argparse.Namespace], Report]
    progress: Callable[[Row], str] = str  # one line per row as it is measured
    # What must be installed: "upstream" (nginx, java, the proxy jar), or "java" (java and the jars
    # only).
    needs: str = "upstream"
    # The published claim the study replays, in words (kept in results.json and report.md, so that
    # its page quotes it from there).
    claim: str = ""

    def add_parser(self, sub) -> None:
        p = sub.add_parser(self.name, help=self.help)
        self.add_options(p)
        p.add_argument(
            "--out",
            type=Path,
            default=None,
            help=f"results folder (default: results/study-{self.name}-<time>)",
        )


def add_engines(p: argparse.ArgumentParser) -> None:
    """`--engines`, as every study that runs per engine takes it (all by default)."""
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated (default: {all_of(ENGINES, 'engines')})",
    )


def add_lifetimes(p: argparse.ArgumentParser) -> None:
    """`--lifetimes`, as every study that runs per case takes it (both by default)."""
    p.add_argument("--lifetimes", default=",".join(LIFETIMES), help="comma-separated (default: both)")


def run_items(study: Study, args: argparse.Namespace, command: str, items: list) -> Path:
    """Measures every run of `items` (the study's plan), writes results.json, the charts and
    report.md; returns its path."""
    started = time.time()
    d = results_dir(args.out, study.name)
    rows: list = []
    with study.parts(args, d) as parts:
        for i, item in enumerate(items, 1):
            for row in study.measure(parts, item, args):
                rows.append(row)
                print(f"[{i}/{len(items)}] {study.progress(row)}", flush=True)
    return write(d, study, command, study.report(rows, args), [plain(r) for r in rows], started)


@runtime_checkable
class Recorded(Protocol):
    """A row that writes itself into results.json (rows, plans and profiles that hold more than
    their fields say)."""

    def to_json(self) -> dict: ...


def plain(row) -> dict:
    """A row as results.json holds it: its own `to_json` (a Recorded), else its fields (rows are
    dataclasses)."""
    return row.to_json() if isinstance(row, Recorded) else asdict(row)


def write(d: Path, study: Study, command: str, report: Report, rows: list[dict], started: float) -> Path:
    """results.json and report.md (and the charts beside them) in `d`."""
    env, claim = environment(), study.claim
    results = {
        "study": study.name,
        "title": report.title,
        "command": command,
        "started": datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds"),
        "finished": datetime.now().astimezone().isoformat(timespec="seconds"),
        "wall_seconds": round(time.time() - started, 1),
        "environment": env,
        "settings": report.settings,
        **({"claim": claim} if claim else {}),
        "rows": rows,
    }
    (d / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    for file_name, svg in report.charts:
        (d / file_name).write_text(svg)
    lines = [
        f"# {report.title}",
        "",
        f"`{command}`",
        "",
        f"Run {results['started']}, {results['wall_seconds']:.0f} s; commit `{env['commit'][:12]}`"
        f"{' (with local changes)' if env['dirty'] else ''}; {env['machine']['cpus']} CPUs "
        f"({env['machine']['cpu_model']}), {env['versions']['java']}.",
        "",
        "Settings: " + ", ".join(f"{k} = {v}" for k, v in report.settings.items()) + ".",
        "",
        *([f"The claim replayed: {claim}", ""] if claim else []),
    ]
    for heading, md in report.tables:
        lines += [f"## {heading}", "", md, ""]
    lines += [f"![{html.escape(render.svg_title(s))}]({f})" for f, s in report.charts]
    if report.notes:
        lines += ["", *[f"- {n}" for n in report.notes]]
    path = d / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


# --- what several studies use ----------------------------------------------------------------


def table(columns: Sequence[render.Column], rows: Sequence) -> str:
    """A study's table in Markdown (render.Table)."""
    return render.Table(columns, rows).markdown()


def median_of(values: Iterable[float | None]) -> float | None:
    """The median of the values that are known (not None); None when none is."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def find(rows: Sequence, key: str, **match):
    """`key` of the first row whose fields equal `match`, or None (rows are dataclasses)."""
    return next((getattr(r, key) for r in rows if all(getattr(r, k) == v for k, v in match.items())), None)


def proxy_figures(url: str, *wanted: tuple[str, dict[str, str]]) -> list[float]:
    """One scrape of `url`/metrics; for each (sample name, labels) the sum of the matching samples."""
    samples = metrics.scrape(url)
    return [samples.sum(name, **labels) for name, labels in wanted]


@contextlib.contextmanager
def proxies(args: argparse.Namespace, d: Path, with_nginx: bool = True) -> Iterator[Backend]:
    """The parts of a study whose own clients measure through a proxy (transfers, bursts, faults),
    or nginx directly (the engines study's JMH jars): nginx (unless not `with_nginx`) on the
    native backend, whose start_case starts each proxy as `lab run` does, with the study's
    --java-opts. Logs in `d`/logs."""
    backend = NativeBackend()
    try:
        backend.open_upstream(d / "logs", args.java_opts, with_nginx)
        yield backend
    finally:
        backend.close()


@contextlib.contextmanager
def proxy_up(backend: Backend, case: Case, upstream_url: str | None = None, **settings: str) -> Iterator[str]:
    """`case`'s proxy (its variables and `settings`) started through `backend`, to nginx or to
    `upstream_url`; yields its URL, and stops it on leaving."""
    handle = backend.start_case(case, settings, Network(case.rtt_ms), upstream_url=upstream_url)
    try:
        yield handle.url
    finally:
        backend.stop_case(handle)


@contextlib.contextmanager
def nothing(args: argparse.Namespace, d: Path) -> Iterator[Path]:
    """No shared parts: the runs start their own (a JMH jar); they get the study's folder."""
    yield d
