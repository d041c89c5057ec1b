"""Tables and bar charts, one way: a table renders as Markdown or HTML from the same rows, and
every chart the lab draws (reports and studies) is one kind of self-contained SVG."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PALETTE = ("#3572b0", "#d9822b", "#5b9a3c", "#8f5aa8", "#b03535", "#777777")


@dataclass
class Column:
    """One table column: heading, how to read it from a row, how many digits for numbers."""

    heading: str
    get: Callable[[object], object]
    digits: int = 0

    def text(self, row) -> str:
        v = self.get(row)
        if v is None:
            return "-"
        if isinstance(v, str):
            return v
        if isinstance(v, bool):
            return "yes" if v else "no"
        return f"{v:,.{self.digits}f}"


class Table:
    """Rows under columns; columns of numbers are right-aligned, the others left-aligned."""

    def __init__(self, columns: Sequence[Column], rows: Sequence, numeric: Sequence[bool] | None = None):
        self.columns, self.rows = list(columns), list(rows)
        self.numeric = list(numeric) if numeric is not None else [self._numeric(c) for c in self.columns]

    def _numeric(self, column: Column) -> bool:
        values = [column.get(r) for r in self.rows]
        return any(v is not None and not isinstance(v, str | bool) for v in values)

    def cells(self) -> list[list[str]]:
        return [[c.text(r) for c in self.columns] for r in self.rows]

    def markdown(self) -> str:
        lines = [
            "| " + " | ".join(c.heading for c in self.columns) + " |",
            "|" + "".join("---:|" if n else "---|" for n in self.numeric),
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.cells()]
        return "\n".join(lines)

    def html(self, row_class: Callable[[object], str] | None = None) -> str:
        def cell(tag: str, text: str, numeric: bool) -> str:
            return f'<{tag} class="{"num" if numeric else "text"}">{html.escape(text)}</{tag}>'

        head = "".join(cell("th", c.heading, n) for c, n in zip(self.columns, self.numeric, strict=True))
        body = []
        for row, texts in zip(self.rows, self.cells(), strict=True):
            cls = row_class(row) if row_class else ""
            attr = f' class="{cls}"' if cls else ""
            body.append(
                f"<tr{attr}>"
                + "".join(cell("td", t, n) for t, n in zip(texts, self.numeric, strict=True))
                + "</tr>"
            )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def bars(
    title: str,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    digits: int = 0,
    unit: str = "",
    better: str = "",
    ranges: dict[str, Sequence[tuple[float, float] | None]] | None = None,
    hatched: Sequence[bool] = (),
    hatched_note: str = "",
    notes: Sequence[str] = (),
) -> str:
    """Horizontal bars: one block per group (e.g. a case), one bar per series (e.g. N), a legend
    when there are several series. `better` ("higher" or "lower") is written under the title;
    `ranges` draws each bar's min-max; a group marked in `hatched` is drawn hatched and grey
    with `hatched_note` beside its value (e.g. a rate that is not the case's capacity); `notes`, a
    group's own, go beside its values too (e.g. what its interval stands on)."""
    bar_h = 16 if len(series) > 1 else 22
    gap, block_gap, left, width = 3, 10, 150, 440
    names = list(series)
    values = [v for vs in series.values() for v in vs if v is not None]
    values += [hi for rs in (ranges or {}).values() for r in rs if r for hi in r[1:]]
    top = max(values + [1e-9])
    legend_h = 20 if len(names) > 1 else 0
    head_h = 44 if better else 30
    block_h = len(names) * (bar_h + gap) + block_gap
    height = head_h + legend_h + len(groups) * block_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{left + width + 160}" '
        f'height="{height}" font-family="sans-serif">',
        f"<title>{html.escape(title)}</title>",
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="3" height="6" fill="#bbb"/></pattern></defs>',
        '<rect width="100%" height="100%" fill="#fff"/>',
        f'<text x="0" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    if better:
        parts.append(f'<text x="0" y="32" font-size="11" fill="#555">{html.escape(better)} is better</text>')
    if len(names) > 1:
        x = left
        for i, name in enumerate(names):
            color = PALETTE[i % len(PALETTE)]
            parts.append(f'<rect x="{x}" y="{head_h - 4}" width="12" height="12" fill="{color}"/>')
            parts.append(f'<text x="{x + 16}" y="{head_h + 6}" font-size="11">{html.escape(name)}</text>')
            x += 24 + 7 * len(name)
    y0 = head_h + legend_h
    for g, group in enumerate(groups):
        y = y0 + g * block_h
        mid = y + (len(names) * (bar_h + gap)) / 2 + 4
        parts.append(
            f'<text x="{left - 6}" y="{mid:.0f}" font-size="12" text-anchor="end">{html.escape(group)}</text>'
        )
        flagged = g < len(hatched) and hatched[g]
        for i, name in enumerate(names):
            v = series[name][g]
            by = y + i * (bar_h + gap)
            text_y = by + bar_h / 2 + 4
            if v is None:
                parts.append(f'<text x="{left + 4}" y="{text_y:.0f}" font-size="11">n/a</text>')
                continue
            w = max(width * v / top, 0.5)
            color = "url(#hatch)" if flagged else PALETTE[i % len(PALETTE)]
            parts.append(f'<rect x="{left}" y="{by}" width="{w:.1f}" height="{bar_h}" fill="{color}"/>')
            r = (ranges or {}).get(name, [None] * len(groups))[g]
            if r and r[0] != r[1]:
                x1, x2 = left + width * r[0] / top, left + width * r[1] / top
                cy = by + bar_h / 2
                parts.append(f'<line x1="{x1:.1f}" x2="{x2:.1f}" y1="{cy}" y2="{cy}" stroke="#000"/>')
            said = [hatched_note if flagged else "", notes[g] if g < len(notes) else ""]
            label = f"{v:,.{digits}f}{unit}" + (f" ({'; '.join(n for n in said if n)})" if any(said) else "")
            end = max(left + w, left + width * r[1] / top if r else 0)
            parts.append(
                f'<text x="{end + 4:.1f}" y="{text_y:.0f}" font-size="11">{html.escape(label)}</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def series(
    title: str,
    lines: dict[str, Sequence[tuple[float, float]]],
    x_label: str = "minutes",
    digits: int = 0,
    better: str = "",
) -> str:
    """Points over time, one colour per line (e.g. a row's windows at their start), joined in order;
    the axes start at 0 and end at the largest x and y, both labelled; a legend names the lines."""
    left, width, plot_h = 60, 520, 200
    names = [n for n, pts in lines.items() if pts]
    xs = [x for n in names for x, _ in lines[n]]
    ys = [y for n in names for _, y in lines[n]]
    top_x, top_y = max(xs + [1e-9]), max(ys + [1e-9])
    head_h = 44 if better else 30
    legend_rows = (len(names) + 2) // 3
    height = head_h + plot_h + 30 + 18 * legend_rows
    y0, y1 = head_h, head_h + plot_h
    parts = frame(title, f"{better} is better" if better else "", left, width, y0, y1, height)
    parts += [
        f'<text x="{left - 4}" y="{y0 + 4}" font-size="10" text-anchor="end">{top_y:,.{digits}f}</text>',
        f'<text x="{left + width}" y="{y1 + 14}" font-size="10" text-anchor="end">'
        f"{top_x:,.1f} {html.escape(x_label)}</text>",
    ]
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        points = [(left + width * x / top_x, y1 - plot_h * y / top_y) for x, y in lines[name]]
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1"/>')
        parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{color}"/>' for px, py in points]
    parts += legend(names, left, width, y1 + 30)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def percentiles(
    title: str,
    lines: dict[str, Sequence[tuple[float, float]]],
    dashed: dict[str, Sequence[tuple[float, float]]] | None = None,
    digits: int = 1,
    note: str = "",
) -> str:
    """A percentile plot, as HdrHistogram's plotter draws one: latency (ms, from 0) against the
    percentile on a log scale of 1 / (1 - p), p50 to p99.99 labelled; one colour a line (`lines`:
    {name: [(percentile, ms)]}), and in `dashed` the same names' second figure in that colour."""
    left, width, plot_h, head_h = 60, 520, 220, 44
    dashed = dashed or {}
    names = [n for n, pts in lines.items() if pts]
    top_y = max([y for pts in [*lines.values(), *dashed.values()] for _, y in pts] + [1e-9])
    ticks = (50.0, 90.0, 99.0, 99.9, 99.99)
    span = math.log10(1 / (1 - ticks[-1] / 100)) - math.log10(2)

    def px(p: float) -> float:
        return left + width * (math.log10(1 / (1 - min(p, ticks[-1]) / 100)) - math.log10(2)) / span

    legend_rows = (len(names) + 2) // 3
    height = head_h + plot_h + 34 + 18 * legend_rows
    y0, y1 = head_h, head_h + plot_h
    parts = frame(title, note or "lower is better", left, width, y0, y1, height)
    parts += [
        f'<text x="{left - 4}" y="{y0 + 4}" font-size="10" text-anchor="end">{top_y:,.{digits}f} ms</text>',
    ]
    for x, t in ((px(t), t) for t in ticks):
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y1}" stroke="#eee"/>')
        parts.append(f'<text x="{x:.1f}" y="{y1 + 14}" font-size="10" text-anchor="middle">p{t:g}</text>')
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        for pts, style in ((lines[name], ""), (dashed.get(name, ()), ' stroke-dasharray="4 3"')):
            if pts:
                path = " ".join(f"{px(p):.1f},{y1 - plot_h * y / top_y:.1f}" for p, y in pts)
                parts.append(
                    f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"{style}/>'
                )
    parts += legend(names, left, width, y1 + 34)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def frame(title: str, note: str, left: int, width: int, y0: float, y1: float, height: float) -> list[str]:
    """A chart's opening: the svg, its title (and `note` under it, when there is one), and the axes
    from (left, y1) up to y0 and across `width`, with the 0 of the y axis."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{left + width + 40}" '
        f'height="{height}" font-family="sans-serif">',
        f"<title>{html.escape(title)}</title>",
        '<rect width="100%" height="100%" fill="#fff"/>',
        f'<text x="0" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    if note:
        parts.append(f'<text x="0" y="32" font-size="11" fill="#555">{html.escape(note)}</text>')
    return parts + [
        f'<line x1="{left}" x2="{left}" y1="{y0}" y2="{y1}" stroke="#999"/>',
        f'<line x1="{left}" x2="{left + width}" y1="{y1}" y2="{y1}" stroke="#999"/>',
        f'<text x="{left - 4}" y="{y1}" font-size="10" text-anchor="end">0</text>',
    ]


def legend(names: Sequence[str], left: int, width: int, top: int) -> list[str]:
    """A swatch of each line's colour (PALETTE, in order) and its name, three to a row from `top`."""
    parts = []
    for i, name in enumerate(names):
        lx, ly = left + (i % 3) * (width // 3), top + 18 * (i // 3)
        parts.append(
            f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>'
        )
        parts.append(f'<text x="{lx + 14}" y="{ly}" font-size="11">{html.escape(name)}</text>')
    return parts


def svg_title(svg: str) -> str:
    start = svg.find("<title>") + len("<title>")
    return html.unescape(svg[start : svg.find("</title>")])
