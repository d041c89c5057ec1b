"""Each `lab study` preset at a tiny size, with real nginx, real proxies and real clients.

A study passes when it writes its table and charts and the figures show what the study is
about (the doc pages in docs/studies/ hold full-size runs).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ktor_lab import cli
from ktor_lab.paths import REPO
from ktor_lab.studies import STUDIES, common


def run_study(name: str, out: Path, *options: str) -> dict:
    assert cli.main(["study", name, *options, "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    report = (out / "report.md").read_text()
    assert results["study"] == name and results["rows"]
    assert results["environment"]["commit"] and results["settings"]
    for img in re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", report):
        ET.parse(out / img)  # each chart the report names exists and is well-formed
    return {"results": results, "report": report, "rows": results["rows"]}


def table_rows(report: str, heading: str) -> list[list[str]]:
    """The body rows of the markdown table under `## heading`."""
    part = report.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in part.splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_every_study_has_a_doc_page_that_names_its_command():
    for name in STUDIES:
        page = REPO / "docs" / "studies" / f"{name}.md"
        assert page.exists(), f"{page} is missing"
        text = page.read_text()
        assert f"lab study {name}" in text
        for img in re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", text):
            ET.parse(page.parent / img)


def test_threads_tiny_shows_okhttp_thread_per_request_and_its_default_of_5_per_host(tmp_path: Path):
    # 10 requests of 400 ms: OkHttp's default dispatcher lets 5 per host through (2 waves) on
    # 5 blocked threads; with the fair limit all 10 go at once, on 10 threads. CIO holds none.
    out = run_study(
        "threads",
        tmp_path,
        "--engines",
        "cio,okhttp",
        "--n",
        "10",
        "--delay-ms",
        "400",
        "--sample-at",
        "0.2",
        "--deadline",
        "10",
    )
    rows = {(r["engine"], r["limits"]): r for r in out["rows"]}
    assert set(rows) == {(e, lim) for e in ("cio", "okhttp") for lim in ("defaults", "fair")}
    assert all(r["ok"] == 10 and r["failed"] == 0 for r in rows.values())
    assert rows["okhttp", "defaults"]["waves"] == 2
    assert rows["okhttp", "defaults"]["completion_s"] >= 0.8
    assert rows["okhttp", "defaults"]["proxy_settings"]["dispatcher_max_requests_per_host"] == "5"
    assert rows["okhttp", "fair"]["waves"] == 1
    assert rows["okhttp", "fair"]["unparked_added"] >= 9
    assert 4 <= rows["okhttp", "defaults"]["unparked_added"] <= 7
    assert rows["cio", "fair"]["unparked_added"] <= 3
    assert rows["cio", "defaults"]["proxy_settings"]["max_connections_per_route"] == "100"
    table = table_rows(out["report"], "fair limits")
    assert [r[0] for r in table] == ["cio", "okhttp"]
    assert table[1][6] == f"{rows['okhttp', 'fair']['completion_s']:.1f}"


def test_grouped_bars_scale_to_the_largest_value():
    svg = common.svg_grouped_bars("t", ["a", "b"], {"x": [10.0, 5.0], "y": [None, 2.5]})
    root = ET.fromstring(svg)
    rects = root.iter("{http://www.w3.org/2000/svg}rect")
    bars = [r for r in rects if r.get("x") == "110" and r.get("y") != "26"]  # not the legend
    assert [float(r.get("width")) for r in bars] == [440.0, 220.0, 110.0]
    assert "n/a" in svg
