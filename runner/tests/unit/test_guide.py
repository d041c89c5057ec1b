"""docs/guide.md is written by `lab guide` from the runs under docs/guide/: these tests hold the
page to its results (a hand-written figure that disagrees fails here) and check what it says of
a measured workload and of one not measured yet."""

from __future__ import annotations

import json
import shutil

from ktor_lab import guide
from ktor_lab.cli import main
from ktor_lab.guide import WORKLOADS, Workload


def test_docs_guide_md_is_what_lab_guide_writes():
    assert guide.GUIDE.read_text() == guide.page(), (
        "docs/guide.md is not what `lab guide` writes from docs/guide/*/results.json: "
        "run `.venv/bin/lab guide` (never edit the page by hand)"
    )


def test_a_measured_workload_answers_from_its_run_with_the_interval_of_every_difference():
    small = guide.answer(WORKLOADS[0])
    assert small is not None, "docs/guide/small-gets/results.json: the default lab run"
    text = "\n".join(small.lines())
    assert small.use.startswith(("apache5 or okhttp", "okhttp or apache5")), small.use
    assert small.use.endswith("; one client"), small.use
    assert "A client per call against one: cio 1.32x (1.15-1.52x)" in text  # ratio (low-high x)
    assert "CPU per request against apache5: okhttp +1% (-12.6% to +17.5%; --budget 47m would" in text
    assert (
        "`lab run --out docs/guide/small-gets`: Ktor 3.5.2, JDK 17, 2 CPUs" in text
        and "at rate/400/40" in text
    )
    assert "A/A singleton-cio, CPU per request: -0.0% (-17.1% to +20.5%)." in text
    assert f"![CPU per request](guide/small-gets/{guide.CHART})" in text


def test_the_scorecard_gives_each_workload_one_row_every_cell_linked_to_the_report_that_measured_it():
    text = guide.page()
    rows = [x for x in text.splitlines() if x.startswith("| [") and "](#" in x]
    assert len(rows) == len(WORKLOADS), rows
    for w, row in zip(WORKLOADS, rows, strict=True):
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 9, cells
        assert all(c.endswith(f"](guide/{w.slug}/report.md)") for c in cells[1:]), (w.slug, cells)
    small = rows[0]
    # What a user weighs beside CPU per request, from the run: okhttp's threads are behind, with
    # their reason; p99 and heap are too noisy to compare in this run (detectable above 100%).
    assert "(okhttp +61%: a thread per request in flight)" in small
    assert "[too noisy](guide/small-gets/report.md) |" in small
    assert "cio +121%: a connection per request, pipelining off (KTOR-7009)" in small
    assert "per-call java: leaks threads, stopped answering; java: no connection limit" in small
    h2 = rows[2]
    assert "[the same within 10%](guide/h2/report.md)" in h2 and "cio: no HTTP/2" in h2
    https = rows[1]
    assert "cio: short of the rate: a full TLS handshake per request" in https


def test_every_engine_behind_on_a_figure_it_has_a_reason_for_gets_that_reason_in_its_row():
    """The engine behaviour table (cases.ENGINE_BEHAVIOUR) gives why an engine stands out; the
    scorecard says it where the run shows it: an engine behind on threads gets its threads reason,
    one behind on CPU per request that opens a connection per request gets that reason."""
    from ktor_lab.cases import ENGINE_BEHAVIOUR
    from ktor_lab.conclusions import BY_KEY, recommended_rows, standing

    missing = []
    for w in WORKLOADS:
        a = guide.answer(w)
        rows = recommended_rows(a.group)[1]
        for key in ("threads", a.group.cpu_key):
            st = a.screen.engines if key == a.group.cpu_key else standing(a.group, BY_KEY[key], rows)
            for r, _ in [] if st.longer else st.behind:
                want = guide.reason(r, key)
                if want and want not in a.cell(key):
                    missing.append((w.slug, key, r.engine))
    assert not missing, missing
    assert "threads" in ENGINE_BEHAVIOUR["okhttp"] and "conns" in ENGINE_BEHAVIOUR["cio"]


def test_the_guide_is_a_page_a_person_finishes():
    """At most 1,500 words with its scorecard; the scorecard before the first section."""
    text = guide.page()
    assert len(text.split()) <= 1500, len(text.split())
    assert text.index("| workload | use | how firm |") < text.index("\n## ")


def test_a_run_kept_from_before_a_default_changed_says_which_settings_today_s_would_change(tmp_path):
    folder = tmp_path / "small-gets"
    folder.mkdir()
    data = json.loads((WORKLOADS[0].folder / "results.json").read_text())
    data["plan"]["settle_s"] = 7
    (folder / "results.json").write_text(json.dumps(data))
    a = guide.answer(Workload("small-gets", "Small GETs", (), "matrix.md", root=tmp_path))
    assert "--settle 7 (today 2)" in a.unlike_today(), a.unlike_today()
    assert "--settle 7 (today 2)" in "\n".join(a.lines())


def test_the_answer_follows_the_results_not_the_page(tmp_path):
    """Make per call as cheap as one client for every engine in a copy of the run: the guide's
    lifetime answer for that copy stops naming a lifetime."""
    folder = tmp_path / "small-gets"
    folder.mkdir()
    data = json.loads((WORKLOADS[0].folder / "results.json").read_text())
    singleton = {}
    for run in data["runs"]:
        if run["lifetime"] == "singleton" and run.get("copy", 0) <= 1:
            singleton.setdefault((run["engine"], run["fork"]), []).append(run["proxy"])
    for run in data["runs"]:
        if run["lifetime"] == "per-call" and (run["engine"], run["fork"]) in singleton:
            twin = singleton[(run["engine"], run["fork"])][(run["repeat"] - 1) % 2]
            for key in (
                "cpu_seconds",
                "jit_cpu_seconds_in_window",
                "upstream_requests",
                "cpu_seconds_per_1000_requests",
            ):
                if key in twin:
                    run["proxy"][key] = twin[key]
    (folder / "results.json").write_text(json.dumps(data))
    a = guide.answer(Workload("small-gets", "Small GETs", (), "matrix.md", root=tmp_path))
    assert a is not None and "one client for the process" not in a.use, a.use


def test_a_workload_not_measured_says_so_with_the_command_that_measures_it(tmp_path):
    w = Workload("nowhere", "Somewhere unmeasured", ("--protocols", "h2"), "studies/protocols.md")
    text = guide.page((w,))
    assert "| [Somewhere unmeasured](#somewhere-unmeasured) | not measured yet | - |" in text
    assert text.count("| [Somewhere unmeasured]") == 1 and "| - | - | - | - | - | - | - |" in text
    assert ".venv/bin/lab run --protocols h2 --out docs/guide/nowhere" in text
    assert "indicative figures (one JVM a row): [studies/protocols.md](studies/protocols.md)" in text


def test_lab_guide_check_fails_on_a_hand_edit(tmp_path, monkeypatch, capsys):
    page = tmp_path / "guide.md"
    shutil.copy(guide.GUIDE, page)
    monkeypatch.setattr(guide, "GUIDE", page)
    monkeypatch.setattr(guide, "REPO", tmp_path)
    assert main(["guide", "--check"]) == 0
    page.write_text(page.read_text().replace("apache5", "cio", 1))
    assert main(["guide", "--check"]) == 1
    assert "differ from what lab guide writes: run lab guide" in capsys.readouterr().out


def test_lab_guide_check_fails_on_a_chart_that_is_not_the_run_s(tmp_path, monkeypatch, capsys):
    """Each workload's chart (cpu.svg) is written from its run; one edited by hand fails --check."""
    root = tmp_path / "guide"
    shutil.copytree(guide.RESULTS / "h2", root / "h2")
    w = Workload("h2", "HTTP/2", ("--protocols", "h2"), "studies/protocols.md", root=root)
    page = tmp_path / "guide.md"
    page.write_text(guide.page((w,)))
    monkeypatch.setattr(guide, "WORKLOADS", (w,))
    monkeypatch.setattr(guide, "GUIDE", page)
    monkeypatch.setattr(guide, "REPO", tmp_path)
    for path, text in guide.charts((w,)).items():
        path.write_text(text)
    assert main(["guide", "--check"]) == 0
    chart = root / "h2" / guide.CHART
    assert chart.read_text().startswith("<svg") and "okhttp, singleton" in chart.read_text()
    chart.write_text(chart.read_text().replace("okhttp", "cio", 1))
    assert main(["guide", "--check"]) == 1
    assert "h2/cpu.svg differ from what lab guide writes" in capsys.readouterr().out


def test_every_kept_run_s_report_md_and_report_html_are_what_the_lab_writes_from_its_results():
    """A `lab run` kept under docs/ keeps its report.md and report.html, each what the lab writes
    from its results.json today: a report left from older code, or edited by hand, fails here
    (`lab guide` writes them again)."""
    files = guide.kept_reports()
    folders = {p.parent for p in files}
    assert {guide.RESULTS / "small-gets", guide.REPO / "docs" / "matrix-runs" / "default"} <= folders
    differ = [
        str(p.relative_to(guide.REPO)) for p, text in files.items() if not p.exists() or p.read_text() != text
    ]
    assert not differ, f"run .venv/bin/lab guide: {differ}"
