"""What every study shares: its folder, results.json beside the settings, a table and a chart.

A study writes `results/study-<name>-<timestamp>/` holding results.json (environment, settings,
rows), report.md (the settings, the table, the chart's file name) and one SVG chart per figure.
The doc pages in docs/studies/ show a real run's table and chart.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import requests

from ..paths import REPO

PALETTE = ("#3572b0", "#d9822b", "#5b9a3c", "#8f5aa8", "#b03535", "#777777")


def out_dir(name: str, out: Path | None) -> Path:
    d = out or REPO / "results" / f"study-{name}-{datetime.now():%Y%m%d-%H%M%S}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


class Column:
    """One table column: heading, how to read it from a row, how many digits."""

    def __init__(self, heading: str, get: Callable[[dict], object], digits: int = 0):
        self.heading, self.get, self.digits = heading, get, digits

    def text(self, row: dict) -> str:
        v = self.get(row)
        if v is None:
            return "-"
        if isinstance(v, str):
            return v
        if isinstance(v, bool):
            return "yes" if v else "no"
        return f"{v:,.{self.digits}f}"


def table(columns: Sequence[Column], rows: Sequence[dict]) -> str:
    """A markdown table: columns of numbers right-aligned, the others left-aligned."""
    cells = [[c.text(r) for c in columns] for r in rows]

    def numeric(i: int) -> bool:
        return any(c.get(r) is not None and not isinstance(c.get(r), str) for c in [columns[i]] for r in rows)

    lines = [
        "| " + " | ".join(c.heading for c in columns) + " |",
        "|" + "".join("---:|" if numeric(i) else "---|" for i in range(len(columns))),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def svg_grouped_bars(
    title: str,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    digits: int = 0,
    unit: str = "",
) -> str:
    """Horizontal bars: one block per group (e.g. an engine), one bar per series (e.g. N)."""
    bar_h, gap, block_gap, left, width = 16, 3, 12, 130, 440
    names = list(series)
    values = [v for vs in series.values() for v in vs if v is not None]
    top = max(values + [1e-9])
    legend_h = 20
    block_h = len(names) * (bar_h + gap) + block_gap
    height = 30 + legend_h + len(groups) * block_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{left + width + 130}" '
        f'height="{height}" font-family="sans-serif">',
        f"<title>{html.escape(title)}</title>",
        '<rect width="100%" height="100%" fill="#fff"/>',
        f'<text x="0" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    x = left
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<rect x="{x}" y="26" width="12" height="12" fill="{color}"/>')
        parts.append(f'<text x="{x + 16}" y="36" font-size="11">{html.escape(name)}</text>')
        x += 24 + 7 * len(name)
    y0 = 30 + legend_h
    for g, group in enumerate(groups):
        y = y0 + g * block_h
        mid = y + (len(names) * (bar_h + gap)) / 2 + 4
        parts.append(
            f'<text x="{left - 6}" y="{mid:.0f}" font-size="12" text-anchor="end">{html.escape(group)}</text>'
        )
        for i, name in enumerate(names):
            v = series[name][g]
            by = y + i * (bar_h + gap)
            if v is None:
                parts.append(f'<text x="{left + 4}" y="{by + 12}" font-size="11">n/a</text>')
                continue
            w = max(width * v / top, 0.5)
            color = PALETTE[i % len(PALETTE)]
            parts.append(f'<rect x="{left}" y="{by}" width="{w:.1f}" height="{bar_h}" fill="{color}"/>')
            parts.append(
                f'<text x="{left + w + 4:.1f}" y="{by + 12}" font-size="11">{v:,.{digits}f}{unit}</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


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
    from ..matrix import environment

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
    lines += [f"![{html.escape(t)}]({f})" for f, t in ((f, _svg_title(s)) for f, s in charts)]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    report = d / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def _svg_title(svg: str) -> str:
    start = svg.find("<title>") + len("<title>")
    return html.unescape(svg[start : svg.find("</title>")])


def proxy_metric(url: str, *wanted: tuple[str, dict[str, str]]) -> list[float]:
    """One scrape of `url`/metrics; for each (sample name, labels) the sum of the matching samples."""
    from prometheus_client.parser import text_string_to_metric_families

    sums = [0.0] * len(wanted)
    text = requests.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            for i, (name, labels) in enumerate(wanted):
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    sums[i] += s.value
    return sums


def find(rows: Sequence[dict], key: str, **match):
    """`key` of the first row whose fields equal `match`, or None."""
    return next((r[key] for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, int(-(-q * len(sorted_values) // 100)) - 1))
    return sorted_values[k]
