"""docs/guide.md is written by `lab guide` from the runs under docs/guide/: these tests hold the
page to its results (a hand-written figure that disagrees fails here) and check what it says of
a measured workload and of one not measured yet."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ktor_lab import conclusions, confidence, guide
from ktor_lab.cli import main
from ktor_lab.guide import WORKLOADS, Workload


def test_docs_guide_md_is_what_lab_guide_writes():
    assert guide.GUIDE.read_text() == guide.page(), (
        "docs/guide.md is not what `lab guide` writes from docs/guide/*/results.json: "
        "run `.venv/bin/lab guide` (never edit the page by hand)"
    )


def test_a_measured_workload_answers_from_its_run_with_the_interval_of_every_difference():
    """The section of the default run's workload gives each comparison of its first screen with
    the interval the report gives (conclusions.ratio, Comparison.span), the command, the A/A pair."""
    from ktor_lab.conclusions import ratio

    small = guide.answer(WORKLOADS[0])
    assert small is not None, "docs/guide/small-gets/results.json: the default lab run"
    text = "\n".join(small.lines())
    s = small.screen
    assert small.use.startswith(("apache5 or okhttp", "okhttp or apache5")), small.use
    assert small.use.endswith("; one client"), small.use
    for single, _, c in s.lifetimes:
        assert (f"{single.engine} {ratio(c)}" if c else f"{single.engine} not compared") in text
    best, m = s.engines.best, small.group.margin
    for r, c in s.engines.leaders[1:] + s.engines.behind:
        same = c.decision(m) == confidence.SAME
        span = f"the same within {m:.0%}: {c.tost_span()}" if same else c.span()
        assert f"{r.engine} {c.difference:+.0%} ({span}" in text, r.engine
    assert f"CPU per request against {best.engine}: " in text
    assert "`lab run --out docs/guide/small-gets`: at rate/400/40" in text
    (aa,) = [c for a, _, key, c in conclusions.aa_tests(small.group) if key == small.group.cpu_key]
    assert f"\n- A/A singleton-cio: {guide.signed(aa.difference)} ({aa.span()})." in text
    # A setting most runs took unlike today's (said once above the sections) that this run did not
    # take: its own value is said in its line (the kept runs: small-gets at --settle 2, most at 3).
    page = guide.GUIDE.read_text()  # what lab guide writes (test_docs_guide_md_is_what_lab_guide_writes)
    said = page.split(" Every run, unless said: ")[1].split("\n")[0]
    section = page.split(f"\n## {WORKLOADS[0].title}\n")[1].split("\n## ")[0]
    mine, checked = small.facts(), 0
    for field, option, show in guide.SETTINGS:
        if f"{option} " in said and not any(f.startswith(f"{option} ") for f in mine):
            assert f", {option} {show(getattr(small.results.plan, field))}" in section, option
            checked += 1
    assert checked, "no setting said above the sections that small-gets lacks: this check has no case"
    assert f"![CPU per request](guide/small-gets/{guide.CHART})" in text


def test_a_close_call_not_decided_says_the_budget_that_would_decide_it():
    """Every workload whose leaders are not decided (some are, some are not, in the kept runs) says
    in its section the --budget that would decide them, beside the interval."""
    page, undecided = guide.GUIDE.read_text(), 0
    for w in WORKLOADS:
        a = guide.answer(w)
        m = a.group.margin
        open_ = [
            c
            for _, c in a.screen.engines.leaders[1:]
            if c is not None and c.decision(m) == confidence.UNKNOWN
        ]
        section = page.split(f"\n## {w.title}\n")[1].split("\n## ")[0]
        if open_:
            undecided += 1
            assert "would decide it" in section and "--budget " in section, w.slug
    assert undecided, "no kept workload is undecided: nothing to check"


def test_a_share_that_rounds_to_nothing_reads_plus_0_never_minus_0():
    """Run A's A/A pair read -0.0004: the guide says +0.0%, a difference keeps its sign."""
    assert [guide.signed(x) for x in (-0.0004, 0.0, 0.0004, -0.012)] == ["+0.0%", "+0.0%", "+0.0%", "-1.2%"]


def test_the_scorecard_gives_each_workload_one_row_every_cell_linked_to_the_report_that_measured_it():
    from ktor_lab.cases import ENGINE_BEHAVIOUR
    from ktor_lab.conclusions import BY_KEY, recommended_rows, standing

    text = guide.page()
    rows = [x for x in text.splitlines() if x.startswith("| [") and "](#" in x]
    assert len(rows) == len(WORKLOADS), rows
    cells = {}
    for w, row in zip(WORKLOADS, rows, strict=True):
        cells[w.slug] = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells[w.slug]) == 9, cells[w.slug]
        assert all(c.endswith(f"](guide/{w.slug}/report.md)") for c in cells[w.slug][1:]), cells[w.slug]
    head = [c.strip() for c in text.splitlines()[4].strip("|").split(" | ")]
    column = {name: i for i, name in enumerate(head)}
    small, run = cells["small-gets"], guide.answer(WORKLOADS[0])
    # What a user weighs beside CPU per request, from the run: okhttp's threads behind, with their
    # reason; p99 too noisy to compare (detectable above 100%) where the run says so, else ranked;
    # CIO behind on CPU per request for its connection per request; per-call Java's leak.
    ranked = recommended_rows(run.group)[1]
    threads = {r.engine: c for r, c in standing(run.group, BY_KEY["threads"], ranked).behind}
    assert (
        f"(okhttp {threads['okhttp'].difference:+.0%}: {ENGINE_BEHAVIOUR['okhttp']['threads']})"
        in small[column["threads"]]
    )
    p99 = standing(run.group, BY_KEY["p99"], ranked)
    assert small[column["p99"]].startswith("[too noisy]") == p99.values_only
    cio = next(c for r, c in run.screen.engines.behind if r.engine == "cio")
    assert f"cio {cio.difference:+.0%}: {ENGINE_BEHAVIOUR['cio']['conns']}" in small[column["CPU / request"]]
    risks = small[column["left out or at risk, and why"]]
    assert f"per-call java: {ENGINE_BEHAVIOUR['java']['leak']}" in risks
    h2 = cells["h2"]
    assert h2[column["how firm"]].startswith("[the same within 10%]")
    assert f"cio: {ENGINE_BEHAVIOUR['cio']['no_h2']}" in h2[-1]
    assert f"cio, per-call cio: {ENGINE_BEHAVIOUR['cio']['tls_full']}" in cells["https"][-1]
    # A row left out of the lifetime's comparison is named with why: at the slow upstream per-call
    # apache5 failed (errors, unresponsive), per-call cio fell short of its rate.
    assert "per-call apache5: errors, unresponsive" in cells["slow"][-1]
    assert "per-call cio: short of the rate" in cells["slow"][-1]
    assert f"apache5: {ENGINE_BEHAVIOUR['apache5']['dispatcher']}" in cells["virtual"][-1]


def test_every_engine_behind_on_a_figure_it_has_a_reason_for_gets_that_reason_in_its_row():
    """The engine behaviour table (cases.ENGINE_BEHAVIOUR) gives why an engine stands out; the
    scorecard says it where the run shows it: an engine behind on threads gets its threads reason,
    one behind on CPU per request that opens a connection per request gets that reason, another its
    own reason on CPU (Java's: Ktor's dispatcher)."""
    from ktor_lab.cases import ENGINE_BEHAVIOUR
    from ktor_lab.conclusions import BY_KEY, CONNECTION_PER_REQUEST, recommended_rows, standing

    missing, seen = [], 0
    for w in WORKLOADS:
        a = guide.answer(w)
        rows = recommended_rows(a.group)[1]
        for key in ("threads", a.group.cpu_key):
            st = a.screen.engines if key == a.group.cpu_key else standing(a.group, BY_KEY[key], rows)
            for r, c in [] if st.longer else st.behind:
                facts = ENGINE_BEHAVIOUR[r.engine]
                per_request = (r.figures["conns"].mean or 0) >= CONNECTION_PER_REQUEST
                if key == "threads":
                    want = facts.get("threads")
                else:  # on CPU per request: a connection per request where it opens one, else its own
                    want = facts["conns"] if per_request and "conns" in facts else facts.get("cpu")
                if want:
                    seen += 1
                    if f"{r.engine} {c.difference:+.0%}: {want}" not in a.cell(key):
                        missing.append((w.slug, key, r.engine))
    assert seen >= 20 and not missing, (seen, missing)


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
    assert a is not None and a.use.endswith("; no clear lifetime"), a.use
    assert guide.answer(WORKLOADS[0]).use.endswith("; one client")


def test_a_workload_not_measured_says_so_with_the_command_that_measures_it(tmp_path):
    w = Workload("nowhere", "Somewhere unmeasured", ("--protocols", "h2"), "studies/protocols.md")
    text = guide.page((w,))
    assert "| [Somewhere unmeasured](#somewhere-unmeasured) | not measured yet | - |" in text
    assert text.count("| [Somewhere unmeasured]") == 1 and "| - | - | - | - | - | - | - |" in text
    assert ".venv/bin/lab run --protocols h2 --out docs/guide/nowhere" in text
    assert "indicative figures (one JVM a row): [studies/protocols.md](studies/protocols.md)" in text


def one_workload_guide(tmp_path, monkeypatch) -> Path:
    """A guide of one workload (h2, its run copied) written by `lab guide`, its charts too: what
    --check then reads, in place of the nine workloads' (the page's own test is above)."""
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
    return root


def test_lab_guide_check_fails_on_a_hand_edit_of_the_page_or_of_a_chart(tmp_path, monkeypatch, capsys):
    """The page and each workload's chart (cpu.svg) are written from the runs; either edited by
    hand fails --check."""
    root = one_workload_guide(tmp_path, monkeypatch)
    assert main(["guide", "--check"]) == 0
    page, chart = guide.GUIDE, root / "h2" / guide.CHART
    written = page.read_text()
    page.write_text(written.replace("apache5", "cio", 1))
    assert main(["guide", "--check"]) == 1
    assert "guide.md differ from what lab guide writes: run lab guide" in capsys.readouterr().out
    page.write_text(written)
    assert chart.read_text().startswith("<svg") and "okhttp, singleton" in chart.read_text()
    chart.write_text(chart.read_text().replace("okhttp", "cio", 1))
    assert main(["guide", "--check"]) == 1
    out = capsys.readouterr().out
    assert "h2/cpu.svg differ from what lab guide writes" in out and "guide.md" not in out


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
