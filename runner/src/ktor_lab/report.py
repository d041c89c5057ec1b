"""`lab report DIR`: report.md and one self-contained report.html from DIR/results.json.

One table per scenario and load level, one row per case: the median over repeats with the
spread (min-max) beside it, and what set the rate (verdict.py). Charts are inline SVG, so
the HTML needs nothing else to open. Every setting behind the numbers follows the tables.
"""

from __future__ import annotations

import html
import json
import statistics
from pathlib import Path

from . import verdict

# (key, heading, how to read it from a run, digits)
COLUMNS = [
    ("rps", "rps", lambda r: r["locust"]["rps"], 0),
    ("p50", "p50 ms", lambda r: r["locust"]["p50_ms"], 1),
    ("p95", "p95 ms", lambda r: r["locust"]["p95_ms"], 1),
    ("p99", "p99 ms", lambda r: r["locust"]["p99_ms"], 1),
    ("errors", "errors", lambda r: r["locust"]["failures"], 0),
    ("cpu", "CPU s / 1000 req", lambda r: r["proxy"].get("cpu_seconds_per_1000_requests"), 3),
    ("threads", "threads max", lambda r: r["prometheus"].get("threads_live_max"), 0),
    ("unparked", "active unparked max", lambda r: r["prometheus"].get("threads_active_unparked_max"), 0),
    ("heap", "heap max MiB", lambda r: _mib(r["prometheus"].get("heap_max_bytes")), 0),
]
CHARTS = [
    ("rps", "Requests per second"),
    ("p99", "p99 latency (ms)"),
    ("cpu", "Proxy CPU seconds per 1000 requests"),
    ("threads", "Live threads (max)"),
    ("heap", "Heap used (max, MiB)"),
]


def _mib(v):
    return None if v is None else v / (1 << 20)


def load(results_dir: Path) -> dict:
    path = results_dir / "results.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: give the folder `lab run` wrote")
    return json.loads(path.read_text())


def groups(results: dict) -> list[dict]:
    """Runs grouped by (scenario, load), then by case in the plan's order, with medians and spreads."""
    out: dict[tuple, dict] = {}
    case_order = results["plan"]["cases"]
    for run in results["runs"]:
        run["verdict"] = verdict.judge(run)  # today's rules, whatever the run recorded
        g = out.setdefault(
            (run["scenario"], run["load"]["label"]),
            {"scenario": run["scenario"], "load": run["load"], "cases": {}},
        )
        g["cases"].setdefault(run["case"], []).append(run)
    for g in out.values():
        rows = []
        for case in sorted(g["cases"], key=case_order.index):
            runs = g["cases"][case]
            row = {"case": case, "runs": runs, "repeats": len(runs)}
            for key, _, get, _ in COLUMNS:
                values = [v for v in (get(r) for r in runs) if v is not None]
                row[key] = statistics.median(values) if values else None
                row[key + "_min"] = min(values) if values else None
                row[key + "_max"] = max(values) if values else None
            flags = sorted({f for r in runs for f in r["verdict"]["flags"]})
            row["flags"] = flags
            row["capacity"] = all(r["verdict"]["capacity"] for r in runs)
            row["reasons"] = sorted({why for r in runs for why in r["verdict"]["reasons"]})
            rows.append(row)
        g["rows"] = rows
    return list(out.values())


def cell(row: dict, key: str, digits: int) -> str:
    v = row[key]
    if v is None:
        return "-"
    text = f"{v:,.{digits}f}"
    if row["repeats"] > 1 and row[key + "_min"] != row[key + "_max"]:
        text += f" ({row[key + '_min']:,.{digits}f}-{row[key + '_max']:,.{digits}f})"
    return text


def rate_cell(row: dict) -> str:
    """The rps, never presented as capacity when something else set it."""
    text = cell(row, "rps", 0)
    return text if row["capacity"] else f"{text} *not capacity*"


def verdict_text(row: dict) -> str:
    """The flags; `capacity` first when none of them is a rate flag (a leak is shown beside it)."""
    return ", ".join((["capacity"] if row["capacity"] else []) + row["flags"])


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = [
        "# Lab report",
        "",
        f"Started {results['started']}, finished {results['finished']}"
        + (" (**interrupted**: only the runs that finished)" if results.get("interrupted") else "")
        + f"; {len(results['runs'])} runs in {results.get('wall_seconds', 0) / 60:.1f} min. "
        f"Commit `{env['commit'][:12]}`{' (with local changes)' if env['dirty'] else ''}, "
        f"{env['machine']['cpus']} CPUs ({env['machine']['cpu_model']}), {env['machine']['memory_gib']} GiB, "
        f"backend {results['backend']['kind']}.",
        "",
        "Each figure is the median over repeats, with the range (min-max) when repeats differ. "
        '"What set the rate" says whether the rps is the case\'s capacity; when it is not, the rps '
        "is marked *not capacity* and the reason is listed below the table.",
        "",
    ]
    for g in groups(results):
        lines += [f"## {g['scenario']}, {describe_load(g['load'])}", ""]
        head = ["case", *[c[1] for c in COLUMNS], "what set the rate"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|---|" + "---:|" * len(COLUMNS) + "---|")
        for row in g["rows"]:
            cells = [
                row["case"],
                rate_cell(row),
                *[cell(row, k, d) for k, _, _, d in COLUMNS[1:]],
                verdict_text(row),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        reasons = [(row["case"], why) for row in g["rows"] for why in row["reasons"]]
        if reasons:
            lines += ["", *[f"- {case}: {why}" for case, why in reasons]]
        lines.append("")
    lines += settings_markdown(results)
    return "\n".join(lines) + "\n"


def describe_load(load: dict) -> str:
    if load["model"] == "rate":
        return f"rate model, {load['target_rps']:g} rps target, {load['users']} users"
    wait = "no wait" if load["wait_max"] == 0 else f"{load['wait_min']:g}-{load['wait_max']:g} s wait"
    return f"closed model, {load['users']} users, {wait}"


def settings_markdown(results: dict) -> list[str]:
    plan, env, backend = results["plan"], results["environment"], results["backend"]
    lines = [
        "## Settings",
        "",
        f"- Matrix: cases {', '.join(plan['cases'])}; scenarios {', '.join(plan['scenarios'])}; "
        f"loads {', '.join(ld['label'] for ld in plan['loads'])}; {plan['repeats']} repeat(s), interleaved.",
        f"- Per run: a fresh proxy, warm-up up to {plan['warmup_s']} s (until two 5 s windows agree "
        f"within 5% and the JIT is quiet), then a {plan['duration_s']} s window after Locust's stats "
        "are reset.",
        f"- Proxy: JAVA_OPTS `{plan['java_opts']}`"
        + (f", extra {plan['proxy_env']}" if plan.get("proxy_env") else "")
        + ".",
        f"- Backend: {json.dumps(backend)}",
        f"- Versions: {json.dumps(env['versions'])}",
        f"- Machine: {json.dumps(env['machine'])}",
        "",
        "Engine settings in force (the proxy's `lab_proxy_info`), per case:",
        "",
    ]
    seen = {}
    for run in results["runs"]:
        seen.setdefault(run["case"], run["proxy"]["settings"])
    for case, s in seen.items():
        lines.append(
            f"- {case}: " + ", ".join(f"{k}={v}" for k, v in sorted(s.items()) if k not in ("case",))
        )
    lines += ["", "Warm-up of each run (seconds, settled, rates of the 5 s windows):", ""]
    for run in results["runs"]:
        w = run.get("warmup", {})
        lines.append(
            f"- {run['case']} {run['scenario']} {run['load']['label']} #{run['repeat']}: "
            f"{w.get('seconds', 0)} s, "
            f"{'settled' if w.get('settled') else 'not settled'}, {w.get('window_rates', [])}; proxy counted "
            f"{run['proxy']['upstream_requests']:.0f} upstream exchanges, Locust {run['locust']['requests']}"
        )
    return lines + [""]


def svg_bars(title: str, rows: list[dict], key: str, digits: int) -> str:
    """A horizontal bar chart, one bar per case; flagged runs are drawn hatched and grey."""
    bar_h, gap, left, width = 22, 6, 150, 440
    values = [r[key] for r in rows]
    top = max([v for v in values if v is not None] + [r[key + "_max"] or 0 for r in rows] + [1e-9])
    height = 30 + len(rows) * (bar_h + gap)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{left + width + 120}" height="{height}">',
        f"<title>{html.escape(title)}</title>",
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="3" height="6" fill="#bbb"/></pattern></defs>',
        f'<text x="0" y="16" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, row in enumerate(rows):
        y = 26 + i * (bar_h + gap)
        v = row[key]
        parts.append(
            f'<text x="{left - 6}" y="{y + 15}" font-size="12" text-anchor="end">'
            f"{html.escape(row['case'])}</text>"
        )
        if v is None:
            parts.append(f'<text x="{left + 4}" y="{y + 15}" font-size="12">n/a</text>')
            continue
        w = width * v / top
        fill = "#3572b0" if row["capacity"] or key != "rps" else "url(#hatch)"
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{fill}"/>')
        if row["repeats"] > 1 and row[key + "_min"] is not None:
            x1, x2 = left + width * row[key + "_min"] / top, left + width * row[key + "_max"] / top
            parts.append(
                f'<line x1="{x1:.1f}" x2="{x2:.1f}" y1="{y + bar_h / 2}" y2="{y + bar_h / 2}" stroke="#000"/>'
            )
        label = f"{v:,.{digits}f}" + ("" if row["capacity"] or key != "rps" else " (not capacity)")
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 15}" font-size="12">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(results: dict) -> str:
    md_lines = markdown(results)
    body = []
    for g in groups(results):
        body.append(f"<h2>{html.escape(g['scenario'])}, {html.escape(describe_load(g['load']))}</h2>")
        head = "".join(
            f"<th>{html.escape(h)}</th>" for h in ["case", *[c[1] for c in COLUMNS], "what set the rate"]
        )
        rows_html = []
        for row in g["rows"]:
            cells = [
                row["case"],
                rate_cell(row),
                *[cell(row, k, d) for k, _, _, d in COLUMNS[1:]],
                verdict_text(row),
            ]
            cls = "" if row["capacity"] else ' class="flagged"'
            rows_html.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        body.append(
            f'<table class="results"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows_html)}</tbody></table>"
        )
        reasons = [(row["case"], why) for row in g["rows"] for why in row["reasons"]]
        if reasons:
            body.append(
                "<ul>" + "".join(f"<li>{html.escape(c)}: {html.escape(w)}</li>" for c, w in reasons) + "</ul>"
            )
        digits = {k: d for k, _, _, d in COLUMNS}
        body.append(
            '<div class="charts">'
            + "".join(svg_bars(t, g["rows"], k, digits[k]) for k, t in CHARTS)
            + "</div>"
        )
    settings = "\n".join(settings_markdown(results))
    intro = md_lines.split("\n## ")[0].split("\n", 2)[2]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Lab report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table.results {{ border-collapse: collapse; margin: 1em 0; }}
table.results th, table.results td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
table.results td:first-child, table.results td:last-child {{ text-align: left; }}
tr.flagged td {{ background: #fff4e5; }}
.charts svg {{ display: block; margin: 1em 0; }}
pre {{ white-space: pre-wrap; background: #f6f6f6; padding: 1em; }}
</style></head><body>
<h1>Lab report</h1>
<p>{html.escape(intro.strip())}</p>
{"".join(body)}
<h2>Settings</h2>
<pre>{html.escape(settings.removeprefix("## Settings").strip())}</pre>
</body></html>
"""


def write_report(results_dir: Path) -> tuple[Path, Path]:
    results = load(results_dir)
    md, page = results_dir / "report.md", results_dir / "report.html"
    md.write_text(markdown(results))
    page.write_text(render_html(results))
    return md, page
