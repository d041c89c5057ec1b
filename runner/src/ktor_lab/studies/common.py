"""What every study shares: its folder, results.json beside the settings, a table and a chart.

A study writes `results/study-<name>-<timestamp>/` holding results.json (environment, settings,
rows), report.md (the settings, the table, the chart's file name) and one SVG chart per figure.
The doc pages in docs/studies/ show a real run's table and chart.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from .. import metrics, render
from ..machine import environment


def now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def table(columns: Sequence[render.Column], rows: Sequence[dict]) -> str:
    """A study's table in Markdown (render.Table)."""
    return render.Table(columns, rows).markdown()


def write(
    d: Path,
    name: str,
    title: str,
    command: str,
    settings: dict,
    rows: list[dict],
    tables: list[tuple[str, str]],
    charts: list[tuple[str, str]],
    started: float,
    notes: Sequence[str] = (),
) -> Path:
    """results.json and report.md; `tables` are (heading, markdown), `charts` (file name, svg)."""
    env = environment()
    results = {
        "study": name,
        "title": title,
        "command": command,
        "started": datetime.fromtimestamp(started).astimezone().isoformat(timespec="seconds"),
        "finished": now(),
        "wall_seconds": round(time.time() - started, 1),
        "environment": env,
        "settings": settings,
        "rows": rows,
    }
    (d / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    for file_name, svg in charts:
        (d / file_name).write_text(svg)
    lines = [
        f"# {title}",
        "",
        f"`{command}`",
        "",
        f"Run {results['started']}, {results['wall_seconds']:.0f} s; commit `{env['commit'][:12]}`"
        f"{' (with local changes)' if env['dirty'] else ''}; {env['machine']['cpus']} CPUs "
        f"({env['machine']['cpu_model']}), {env['versions']['java']}.",
        "",
        "Settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items()) + ".",
        "",
    ]
    for heading, md in tables:
        lines += [f"## {heading}", "", md, ""]
    lines += [f"![{html.escape(render.svg_title(s))}]({f})" for f, s in charts]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    report = d / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def proxy_figures(url: str, *wanted: tuple[str, dict[str, str]]) -> list[float]:
    """One scrape of `url`/metrics; for each (sample name, labels) the sum of the matching samples."""
    samples = metrics.scrape(url)
    return [samples.sum(name, **labels) for name, labels in wanted]


def find(rows: Sequence[dict], key: str, **match):
    """`key` of the first row whose fields equal `match`, or None."""
    return next((r[key] for r in rows if all(r.get(k) == v for k, v in match.items())), None)
