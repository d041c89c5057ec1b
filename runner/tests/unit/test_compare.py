"""`lab compare OLD NEW` (comparison.py): the ratio of each row's figure with its interval and
test, driven on synthetic windows; the rule checked by simulation (scipy draws, seeded)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from ktor_lab import cli, comparison
from ktor_lab.results import (
    LocustFigures,
    MachineFigures,
    PrometheusFigures,
    ProxyFigures,
    Results,
    Run,
    load,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "results-small"
LOAD = load(FIXTURE).plan.loads[0]


def results(
    cpu: dict[str, list[float]], rps: dict[str, list[float]] | None = None, ktor: str = ""
) -> Results:
    """A run of the fixture's plan whose rows have these windows (CPU s / 1000 req, rps)."""
    base = load(FIXTURE)
    out = copy.deepcopy(base)
    out.runs = []
    load_level = base.plan.loads[1]
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


def test_flagged_windows_are_left_out_and_counted_and_too_few_are_not_tested():
    old = results({"singleton-cio": [1.0, 1.0, 1.1, 0.9, 1.0]})
    new = results({"singleton-cio": [1.0, 1.0, 1.1, 0.9, 5.0]})
    new.runs[-1].machine = MachineFigures(cpus=2, window_s=10, others_share=0.5)  # judged machine-busy
    c = line(comparison.changes(old, new), "singleton-cio", "cpu")
    assert c.left_out == (0, 1) and len(c.new) == 4 and not c.significant
    one = results({"singleton-cio": [1.0]})
    assert line(comparison.changes(one, one), "singleton-cio", "cpu").words() == (
        "not tested: fewer than 2 windows a side"
    )


def test_between_two_runs_of_one_thing_a_change_is_named_about_as_often_as_alpha():
    """The decision rule (comparison.ratio_test, which every line uses), simulated: 5 windows a
    side from one distribution (10% noise), 20,000 draws: a change is named in about 5% and the
    interval holds the true ratio (1) in about 95%; a true 30% change is named in most draws."""
    rng = np.random.default_rng(7)
    draws = (20_000, 5)
    ratio, low, high, p = comparison.ratio_test(
        np.exp(rng.normal(0, 0.1, draws)), np.exp(rng.normal(0, 0.1, draws))
    )
    assert 0.04 < np.mean(p < comparison.ALPHA) < 0.06
    assert 0.94 < np.mean((low <= 1) & (1 <= high)) < 0.96
    # the test and the interval are one computation: a change is named exactly when 1 is outside
    assert np.array_equal(p < comparison.ALPHA, (low > 1) | (high < 1))
    moved = comparison.ratio_test(np.exp(rng.normal(0, 0.1, draws)), 1.3 * np.exp(rng.normal(0, 0.1, draws)))
    assert np.mean(moved[3] < comparison.ALPHA) > 0.9


def test_runs_of_different_plans_or_machines_are_refused_in_one_line_unless_forced(tmp_path, capsys):
    old = results({"singleton-cio": [1.0, 1.1, 0.9]})
    other = results({"singleton-cio": [1.0, 1.1, 0.9]})
    other.plan.duration_s += 5
    assert "different plans (window seconds" in comparison.mismatch(old, other)
    moved = results({"singleton-cio": [1.0, 1.1, 0.9]})
    moved.environment["machine"]["cpu_model"] = "AMD EPYC"
    assert "different machines (cpu_model" in comparison.mismatch(old, moved)
    assert comparison.mismatch(old, results({"per-call-apache": [2.0, 2.0]})) is None  # same plan, other rows

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
        assert "0 with a change" in out and "~ [" in out


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
    windows that agree within one JVM do not make two JVMs that differ look like a change."""
    old = results({"singleton-cio": [1.00, 1.01, 0.99, 1.20, 1.21, 1.19]})
    new = results({"singleton-cio": [1.10, 1.11, 1.09, 1.12, 1.13, 1.11]})
    for r in (old, new):
        for i, run in enumerate(r.runs):
            run.fork = 1 + i // 3
    c = line(comparison.changes(old, new), "singleton-cio", "cpu")
    jvm = [np.exp(np.log(w).mean()) for w in ([1.00, 1.01, 0.99], [1.20, 1.21, 1.19])]
    jvm_new = [np.exp(np.log(w).mean()) for w in ([1.10, 1.11, 1.09], [1.12, 1.13, 1.11])]
    expected = comparison.ratio_test(np.array(jvm), np.array(jvm_new))
    assert c.p == pytest.approx(float(expected[3])) and not c.significant
    windows = comparison.ratio_test(np.array(old_cpu := [1.00, 1.01, 0.99, 1.20, 1.21, 1.19]), np.array(
        [1.10, 1.11, 1.09, 1.12, 1.13, 1.11]))  # fmt: skip
    assert len(old_cpu) == 6 and float(windows[3]) < c.p  # windows as units would read more into it
