"""`lab compare OLD NEW` (comparison.py): the ratio of each row's figure with its interval and
test, driven on synthetic windows; the rule checked by simulation (scipy draws, seeded)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ktor_lab import cli, comparison
from ktor_lab.results import (
    LocustFigures,
    MachineFigures,
    PrometheusFigures,
    ProxyFigures,
    Results,
    Run,
    Warmup,
    load,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "results-small"
BASE = load(FIXTURE)
LOAD = BASE.plan.loads[0]


def results(
    cpu: dict[str, list[float]], rps: dict[str, list[float]] | None = None, ktor: str = ""
) -> Results:
    """A run of the fixture's plan whose rows have these windows (CPU s / 1000 req, rps)."""
    out = copy.deepcopy(dataclasses.replace(BASE, runs=[]))
    load_level = BASE.plan.loads[1]
    for case, values in cpu.items():
        lifetime, engine = case.split("-", 1) if case.startswith("singleton") else ("per-call", case[9:])
        for i, v in enumerate(values):
            out.runs.append(
                Run(
                    case=case,
                    engine=engine,
                    lifetime=lifetime,
                    scenario="static-small",
                    load=load_level,
                    repeat=i + 1,
                    locust=LocustFigures(
                        rps=(rps or {}).get(case, [300.0] * len(values))[i], p50_ms=2.0, p99_ms=9.0
                    ),
                    proxy=ProxyFigures(cpu_seconds_per_1000_requests=v),
                    ktor=ktor or None,
                    java="17.0.15",
                    dimensions=bool(ktor),
                    prometheus=PrometheusFigures(threads_live_max=40, heap_max_bytes=64 << 20),
                    warmup=Warmup(seconds=60, settled=True),  # warm: the verdict's rule keeps the window
                )
            )
    return out


def line(found: list[comparison.Change], row: str, key: str) -> comparison.Change:
    return next(c for c in found if c.row == row and c.figure.key == key)


def test_a_change_is_named_with_its_interval_and_no_change_gets_a_tilde_with_its_own():
    old = results(
        {"singleton-cio": [1.00, 1.05, 0.97, 1.02, 0.99], "per-call-apache": [3.0, 3.1, 2.9, 3.05, 2.95]}
    )
    new = results(
        {"singleton-cio": [1.21, 1.18, 1.25, 1.19, 1.22], "per-call-apache": [3.02, 2.94, 3.1, 3.0, 2.9]}
    )
    found = comparison.changes(old, new)
    cio = line(found, "singleton-cio", "cpu")
    assert cio.significant and 1.15 < cio.ratio < 1.25 and cio.low > 1 and cio.high > cio.ratio
    assert cio.words().startswith("+") and "[+" in cio.words()
    apache = line(found, "per-call-apache", "cpu")
    assert not apache.significant and apache.low < 1 < apache.high
    assert apache.words().startswith("~ [-") and "p=" in apache.words()
    # constant windows on both sides (the synthetic p50): no change, not an error
    assert line(found, "singleton-cio", "p50").words().startswith("~ [+0.0%, +0.0%]")
    text = "\n".join(comparison.lines("old", "new", found))
    assert "static-small rate/300/30" in text and "1 with a change" in text


def test_each_section_says_what_every_row_moved_by_and_why_that_is_not_a_change_s():
    """Every row 10% dearer in the new run (the machine, between two runs): the section's first line
    gives +10.0% for CPU per request over its rows, and the header says such a shift may be the
    machine's."""
    old = results({"singleton-cio": [1.00, 1.05, 0.97], "per-call-apache": [3.0, 3.1, 2.9]})
    new = results({"singleton-cio": [1.10, 1.155, 1.067], "per-call-apache": [3.3, 3.41, 3.19]})
    text = comparison.lines("old", "new", comparison.changes(old, new))
    (first,) = [x for x in text if x.startswith(comparison.EVERY_ROW)]
    assert "CPU s / 1000 req +10.0%" in first and "(2 rows)" in first
    # at a fixed rate every row was given its rate: rps is not compared, as the verdict ranks nothing on it
    assert "rps" not in first and line(comparison.changes(old, new), "singleton-cio", "rps").words() == (
        "not compared: target"
    )
    assert any("the machine's as much as the change's" in x for x in text[:3])


def test_flagged_windows_are_left_out_and_counted_and_too_few_are_not_tested():
    old = results({"singleton-cio": [1.0, 1.0, 1.1, 0.9, 1.0]})
    new = results({"singleton-cio": [1.0, 1.0, 1.1, 0.9, 5.0]})
    new.runs[-1].machine = MachineFigures(cpus=2, window_s=10, others_share=0.5)  # judged machine-busy
    c = line(comparison.changes(old, new), "singleton-cio", "cpu")
    assert c.left_out == (0, 1) and len(c.new) == 4 and not c.significant
    one = results({"singleton-cio": [1.0]})
    assert line(comparison.changes(one, one), "singleton-cio", "cpu").words() == (
        "not tested: no spread to test with (one window a side, no other row)"
    )


ROWS = [
    f"{lifetime}-{engine}"
    for lifetime in ("singleton", "per-call")
    for engine in ("cio", "apache5", "okhttp", "java")
]


def drawn(rng: np.random.Generator, costs: dict[str, float], forks: int = 2, windows: int = 3) -> Results:
    """A run of 8 rows as lab run measures them by default (2 JVMs x 3 windows): CPU per request
    `costs[row]` (1.0 when not named) times a spread per JVM (3%) and per window (10%), log-normal."""
    cpu = {}
    for row in ROWS:
        jvms = np.repeat(rng.normal(0, 0.03, forks), windows)
        cpu[row] = list(costs.get(row, 1.0) * np.exp(jvms + rng.normal(0, 0.1, forks * windows)))
    out = results(cpu)
    for run in out.runs:
        run.fork = 1 + (run.repeat - 1) // windows
    return out


def test_between_two_runs_of_one_thing_a_change_is_named_about_as_often_as_alpha():
    """The decision rule, simulated on the real `changes` path: two runs of 8 alike rows, 2 JVMs x
    3 windows, JVMs differing by 3% and windows by 10%. A line names a change in about 5% (the
    test allows 3-8% over its 960 lines), and its interval holds the true ratio (1) in about 95%;
    one row 20% dearer is named in most runs, where Welch's t on 2 JVMs a side alone rarely would."""
    rng = np.random.default_rng(7)
    lines = [c for _ in range(120) for c in comparison.changes(drawn(rng, {}), drawn(rng, {}), ("cpu",))]
    assert len(lines) == 120 * len(ROWS) and all(c.by_fork for c in lines)
    named = np.mean([c.significant for c in lines])
    held = np.mean([c.low <= 1 <= c.high for c in lines])
    print(
        f"lab compare on 2 JVMs x 3 windows: a change named in {named:.1%} of null lines, 1 inside {held:.1%}"
    )
    assert 0.03 <= named <= 0.08 and 0.92 <= held <= 0.97
    assert all(c.significant == (c.low > 1 or c.high < 1) for c in lines)  # one computation
    dearer = {"singleton-okhttp": 1.2}
    found = [
        line(comparison.changes(drawn(rng, {}), drawn(rng, dearer), ("cpu",)), "singleton-okhttp", "cpu")
        for _ in range(50)
    ]
    power = np.mean([c.significant and c.ratio > 1 for c in found])
    print(f"a 20% change in one row named in {power:.0%} of runs")
    assert power >= 0.65, power


def test_runs_of_different_plans_or_machines_are_refused_in_one_line_unless_forced(tmp_path, capsys):
    old = results({"singleton-cio": [1.0, 1.1, 0.9]})
    other = results({"singleton-cio": [1.0, 1.1, 0.9]})
    other.plan.duration_s += 5
    assert "different plans (window seconds" in comparison.mismatch(old, other)
    moved = results({"singleton-cio": [1.0, 1.1, 0.9]})
    moved.environment["machine"]["cpu_model"] = "AMD EPYC"
    assert "different machines (cpu_model" in comparison.mismatch(old, moved)
    assert comparison.mismatch(old, results({"per-call-apache": [2.0, 2.0]})) is None  # same plan, other rows
    settled = results({"singleton-cio": [1.0, 1.1, 0.9]})
    settled.plan.settle_s += 1
    assert "different plans (settle seconds" in comparison.mismatch(old, settled)
    stricter = results({"singleton-cio": [1.0, 1.1, 0.9]})
    for r in stricter.runs:
        r.warmup.jit_quiet_share = 0.02
    assert "(warm-up's JIT share: not recorded against 0.02)" in comparison.mismatch(old, stricter)

    for name, r in (("old", old), ("other", other)):
        (tmp_path / name).mkdir()
        r.write(tmp_path / name)
    assert cli.main(["compare", str(tmp_path / "old"), str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lab: compare: ") and "give --force" in err and err.count("\n") == 1
    assert cli.main(["compare", str(tmp_path / "old"), str(tmp_path / "other"), "--force"]) == 0
    out = capsys.readouterr().out
    assert "compared anyway (--force)" in out and "singleton-cio" in out
    assert cli.main(["compare", str(tmp_path / "old"), str(tmp_path / "missing")]) == 2
    assert "results.json does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("dry", [False, True])
def test_a_run_against_itself_shows_no_change(dry, capsys):
    assert cli.main(["compare", str(FIXTURE), str(FIXTURE), *(["--dry-run"] if dry else [])]) == 0
    out = capsys.readouterr().out
    if dry:
        assert out.startswith("lab compare: dry run; ")
    else:
        # Its windows were measured before the warm-up was recorded: today's verdict finds none warm,
        # so, as in the report lab run writes from it, no row is compared, and each line says why.
        assert "0 lines tested, 0 with a change" in out
        rows = [x for x in out.splitlines() if x.startswith(("singleton-", "per-call-"))]
        assert rows and all(
            "not compared: " in x and "not-warm" in x.split("not compared: ")[1] for x in rows
        )


def test_rows_pair_across_a_dimension_each_run_held_at_its_own_value():
    """After upgrading Ktor: lab run --ktor 3.4.1 against lab run --ktor 3.5.2 (rows named
    `singleton-cio ktor 3.4.1` and `... ktor 3.5.2`) compare row by row, and the header says so."""
    old = results({"singleton-cio": [1.0, 1.05, 0.97, 1.02, 0.99]}, ktor="3.4.1")
    new = results({"singleton-cio": [0.8, 0.82, 0.79, 0.81, 0.8]}, ktor="3.5.2")
    assert comparison.changed_dimensions(old, new) == {"ktor": ("3.4.1", "3.5.2")}
    c = line(comparison.changes(old, new), "singleton-cio", "cpu")
    assert c.significant and c.ratio < 0.85
    assert "(ktor: 3.4.1 -> 3.5.2)" in comparison.lines("a", "b", [c], comparison.what_changed(old, new))[0]
    # a plain run (the default release, rows without it in their names) pairs with --ktor 3.5.2's
    plain = results({"singleton-cio": [1.0, 1.05, 0.97]})
    for r in plain.runs:
        r.ktor = "3.5.2"
    assert comparison.changed_dimensions(plain, new) == {}
    assert line(comparison.changes(plain, new), "singleton-cio", "cpu").old


def test_another_backend_or_workers_is_another_plan():
    old = results({"singleton-cio": [1.0, 1.1, 0.9]})
    other = results({"singleton-cio": [1.0, 1.1, 0.9]})
    other.backend = {**other.backend, "kind": "compose"}
    assert "different plans (backend" in comparison.mismatch(old, other)
    more = results({"singleton-cio": [1.0, 1.1, 0.9]})
    more.plan.workers = 4
    assert "different plans (Locust workers" in comparison.mismatch(old, more)


def test_with_several_jvms_a_row_the_units_are_the_jvms_not_the_windows():
    """Two JVMs a row, three windows each: the test compares each JVM's geometric mean, so six
    windows that agree within one JVM do not make two JVMs that differ look like a change. With
    one row, the pooled spread is Student's two-sample t on the JVMs' logs."""
    old = results({"singleton-cio": [1.00, 1.01, 0.99, 1.20, 1.21, 1.19]})
    new = results({"singleton-cio": [1.10, 1.11, 1.09, 1.12, 1.13, 1.11]})
    for r in (old, new):
        for i, run in enumerate(r.runs):
            run.fork = 1 + i // 3
    c = line(comparison.changes(old, new), "singleton-cio", "cpu")
    jvm = [np.log(w).mean() for w in ([1.00, 1.01, 0.99], [1.20, 1.21, 1.19])]
    jvm_new = [np.log(w).mean() for w in ([1.10, 1.11, 1.09], [1.12, 1.13, 1.11])]
    expected = stats.ttest_ind(jvm_new, jvm)
    assert c.by_fork and c.p == pytest.approx(expected.pvalue) and not c.significant
    interval = expected.confidence_interval(0.95)
    assert (c.low, c.high) == pytest.approx((np.exp(interval.low), np.exp(interval.high)))
    windows = stats.ttest_ind(
        np.log([1.10, 1.11, 1.09, 1.12, 1.13, 1.11]), np.log([1.00, 1.01, 0.99, 1.20, 1.21, 1.19])
    )
    assert windows.pvalue < c.p  # windows as units would read more into it


def test_lab_compare_reads_a_kept_pair_of_runs_as_their_reports_do():
    """Two kept default runs (docs/matrix-runs): for every row and figure, `lab compare` takes the
    windows `lab run`'s report makes that row's figure of (rules.kept_windows), and tests it exactly
    where the report compares the row on that figure (rules.not_compared), saying the report's
    reason where it does not."""
    from ktor_lab import conclusions, rules

    runs = Path(__file__).parents[3] / "docs" / "matrix-runs"
    old, new = load(runs / "default-third"), load(runs / "default-fourth")
    found = comparison.changes(old, new)
    checked = 0
    for side, results_ in (("old", old), ("new", new)):
        for group in conclusions.groups(results_):
            for row in group.rows:
                for key in rules.COMPARED_FIGURES:
                    c = line(
                        [x for x in found if x.section == group.scenario + " " + group.load.label],
                        row.name,
                        key,
                    )
                    figure = rules.BY_KEY[key]
                    assert getattr(c, side) == row.figures[key].values, (row.name, key)
                    why = rules.why_not_compared(figure, group.load, row.runs)
                    assert not why or c.why_not, (row.name, key, why)
                    checked += 1
    assert checked >= 2 * 9 * len(rules.COMPARED_FIGURES)
