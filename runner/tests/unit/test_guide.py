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
    assert "Lifetime: keep one HttpClient for the process (singleton)" in text
    assert "the CPU per request of one client for the process" in text and "x (" in text  # ratio (low-high x)
    assert "Measured with `lab run --out docs/guide/small-gets` on Ktor 3.5.2, JDK 17" in text
    assert "Risk: Unlimited connections" in text and "Engine: okhttp: blocks one thread" in text
    assert "A/A check: two proxies of singleton-cio" in text and "every interval includes 0" in text
    assert "this run finds a difference of" in text.lower()


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
    assert "differs from what lab guide writes: run lab guide" in capsys.readouterr().out
