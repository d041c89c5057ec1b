"""What a `lab run` concludes, from windows made up here: a lead only when the test says so, every
difference with its interval, ties said as ties, the A/A pair never a lead, flagged windows left
out and not their rows, the lifetime answer, the risks by name. The statistics are scipy's
(confidence.py); the decision rule as a whole is simulated in test_verdict_simulation.py."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest
from scipy import stats

from ktor_lab import conclusions, confidence, metrics, rules, run_report
from ktor_lab.cases import Case
from ktor_lab.confidence import Estimate
from ktor_lab.plan import Load, Plan
from ktor_lab.results import (
    ConnectionFigures,
    Leak,
    LocustFigures,
    MachineFigures,
    PrometheusFigures,
    ProxyFigures,
    Results,
    Run,
    Warmup,
)

LOAD = Load("closed", 50)


def window(name: str, n: int, rps: float, cpu: float, threads: float = 50, heap: float = 100 << 20) -> Run:
    """Window `n` of the row `name` (`singleton-okhttp`, `singleton-okhttp #2`)."""
    case_name, _, copy = name.partition(" #")
    case = Case.parse(case_name)
    return Run(
        case=case.id,
        engine=case.engine,
        lifetime=case.lifetime,
        scenario="static-small",
        load=LOAD,
        repeat=n,
        warmup=Warmup(seconds=60, settled=True),
        locust=LocustFigures(rps=rps, p99_ms=30.0, requests=int(rps * 10), cpu_peak_percent={"local": 50}),
        proxy=ProxyFigures(upstream_requests=rps * 10, cpu_seconds_per_1000_requests=cpu),
        prometheus=PrometheusFigures(threads_live_max=threads, heap_max_bytes=heap),
        copy=int(copy or 0),
        after="warm-up" if n == 1 else "idle",
        idle_s=None if n == 1 else 120.0,
    )


def results_of(rows: dict[str, list[tuple[float, float]]]) -> Results:
    """Rows of (rps, cpu) windows, interleaved as lab run takes them."""
    runs = [
        window(name, i + 1, rps, cpu) for i in range(5) for name, ws in rows.items() for rps, cpu in [ws[i]]
    ]
    cases = list(dict.fromkeys(Case.parse(n.split(" #")[0]) for n in rows))
    plan = Plan(cases, ["static-small"], [LOAD], repeats=5)
    environment = {
        "commit": "0123456789abcdef",
        "dirty": False,
        "machine": {"cpus": 2, "cpu_model": "test", "memory_gib": 1},
        "versions": {},
    }
    return Results(plan=plan, backend={"kind": "native"}, environment=environment, started="", runs=runs)


def jittered(centre: float, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [centre * (1 + rng.uniform(-spread, spread)) for _ in range(5)]


def test_an_estimate_is_the_geometric_mean_of_its_jvms_with_student_s_interval():
    values = [100.0, 102.0, 98.0, 101.0, 99.0]
    e = Estimate.of(values)  # one JVM: its windows are the units
    logs = np.log(values)
    low, high = stats.t.interval(0.95, 4, loc=logs.mean(), scale=stats.sem(logs))
    assert (e.n, e.mean) == (5, pytest.approx(math.exp(logs.mean())))
    assert (e.low, e.high) == (pytest.approx(math.exp(low)), pytest.approx(math.exp(high)))
    # Two JVMs of three windows: the units are the JVMs' means of logs (one degree of freedom alone).
    two = Estimate.of([100, 102, 98, 110, 112, 108], [1, 1, 1, 2, 2, 2])
    units = np.log([100, 102, 98]).mean(), np.log([110, 112, 108]).mean()
    assert two.fork_count == 2 and two.mean == pytest.approx(math.exp(np.mean(units)))
    assert two.pool.df == 1 and two.pool.by_fork
    assert Estimate.of([None, 7.0]).half_width is None and Estimate.of([]).mean is None


def test_a_difference_is_named_by_the_test_and_given_with_its_interval():
    a = Estimate.of([100, 101, 99, 100, 100])
    b = Estimate.of([110, 111, 109, 110, 110])
    c = confidence.compare(a, b)
    welch = stats.ttest_ind(np.log(b.values), np.log(a.values))  # two rows, pooled: Student's t
    assert c.p == pytest.approx(welch.pvalue) and c.clear
    assert c.difference == pytest.approx(0.10, abs=0.001) and 0 < c.low < 0.10 < c.high
    assert c.words().startswith("+10.0% (+") and "p=" in c.words()
    overlap = confidence.compare(a, Estimate.of([101, 99, 103, 98, 100]))
    assert not overlap.significant and overlap.low < 0 < overlap.high
    assert overlap.words().startswith("no clear difference (-")
    # One window a side: no spread to test with.
    assert confidence.compare(Estimate.of([1.0]), Estimate.of([2.0])).p is None


def test_the_standing_names_leaders_and_those_clearly_behind_never_the_aa_copy():
    results = results_of(
        {
            "singleton-okhttp #1": [(r, 0.25) for r in jittered(4000, 0.01, 1)],
            "singleton-okhttp #2": [(r, 0.25) for r in jittered(4080, 0.01, 2)],
            "singleton-apache5": [(r, 0.26) for r in jittered(4010, 0.01, 3)],
            "singleton-cio": [(r, 0.50) for r in jittered(2600, 0.01, 4)],
        }
    )
    (group,) = conclusions.groups(results)
    s = conclusions.standing(group, rules.BY_KEY["rps"])
    leaders = [r.name for r, _ in s.leaders]
    assert "singleton-apache5" in leaders and "singleton-cio" not in leaders
    assert [r.name for r, _ in s.behind] == ["singleton-cio"] and "singleton-okhttp #2" not in leaders
    text = conclusions.standing_sentence(s)
    assert (
        "no clear difference among them" in text and "clearly behind" in text and "singleton-cio 2," in text
    )
    assert "This run finds a difference of" in text
    line = conclusions.aa_check(group)
    assert line.startswith("A/A check: two proxies of singleton-okhttp (#1, #2)")


def test_a_family_s_p_values_and_intervals_are_adjusted_together():
    a = Estimate.of([100, 101, 99, 100, 100])
    far = Estimate.of([110, 111, 109, 110, 110])
    near = Estimate.of([100.5, 99.5, 100, 101, 99])
    raw = [confidence.compare(a, far), confidence.compare(a, near)]
    tests = confidence.adjust(raw)
    assert [c.p for c in tests] == pytest.approx(list(stats.false_discovery_control([c.p for c in raw])))
    assert tests[0].clear and not tests[1].clear and " of 2" in tests[0].words()
    # One of two named: intervals at 1 - 1 x 0.05 / 2, wider than the 95% ones.
    assert tests[0].level == pytest.approx(0.975) and tests[0].high - tests[0].low > raw[0].high - raw[0].low
    assert tests[1].low < 0 < tests[1].high
    assert confidence.adjust(tests[:1]) == tests[:1]  # one test: nothing to adjust


def test_the_first_screen_answers_lifetime_engines_and_risks():
    results = results_of(
        {
            "singleton-okhttp": list(zip(jittered(4000, 0.01, 1), jittered(0.25, 0.01, 5), strict=True)),
            "per-call-okhttp": list(zip(jittered(2000, 0.01, 2), jittered(0.65, 0.01, 6), strict=True)),
            "singleton-cio": list(zip(jittered(2600, 0.01, 3), jittered(0.50, 0.01, 7), strict=True)),
            "per-call-cio": list(zip(jittered(1800, 0.01, 4), jittered(0.70, 0.01, 8), strict=True)),
            "singleton-apache": list(zip(jittered(3000, 0.01, 9), jittered(0.40, 0.01, 10), strict=True)),
        }
    )
    for run in results.runs:
        if run.engine == "cio":
            run.connections = ConnectionFigures(new=1000, per_1000_requests=1000.0)
        if run.case == "per-call-okhttp":
            run.leak = Leak(60, 40, 900, 30, 40)  # 860 threads kept
        if run.engine == "apache":
            run.proxy.settings = {"engine_note": "apache: Ktor 3.4.1, its last release; deprecated"}
    (group,) = conclusions.groups(results)
    s = conclusions.screen(group)
    lifetime = conclusions.lifetime_answer(s)
    assert lifetime.startswith(
        "Lifetime: keep one HttpClient for the process (singleton): a client per call cost "
    )
    assert "okhttp 2.58x (2." in lifetime and "cio 1.40x (1." in lifetime
    engines = conclusions.engines_answer(s)
    assert (
        engines.startswith("Among singleton clients, okhttp uses the least CPU per request")
        and "clearly more: " in engines
    )
    assert s.family == 2 + 3 and sorted(s.claims()) == [
        "engines singleton-okhttp < singleton-apache",
        "engines singleton-okhttp < singleton-cio",
        "lifetime cio",
        "lifetime okhttp",
    ]
    risks = " ".join(conclusions.risks(results, group))
    assert "Leak: kept threads or open files after the load: per-call-okhttp." in risks
    assert (
        "Deprecated: Apache (HttpAsyncClient 4) is deprecated in favour of apache5 (apache: Ktor 3.4.1"
        in risks
    )
    assert "A connection per request: singleton-cio, per-call-cio" in risks
    md = run_report.markdown(results)
    first_screen = md.split("## Verdict")[1].split("\n## ")[0]
    assert "Lifetime: keep one HttpClient" in first_screen and "What these figures are not" in first_screen
    assert first_screen.index("Lifetime:") < first_screen.index("- How:") < first_screen.index("- A/A check")
    assert "Settings every proxy" not in first_screen and md.index("## Appendix") > md.index("| case |")
    page = run_report.page(results)
    answer, chart = page.index('<p class="answer">'), page.index("by engine and lifetime, 95% intervals")
    assert answer < chart < page.index("How: ")


def test_warmth_compares_windows_after_idling_with_the_first():
    results = results_of(
        {
            "singleton-okhttp": [
                (4000.0, 0.25),
                (4100.0, 0.25),
                (4050.0, 0.25),
                (3950.0, 0.25),
                (4000.0, 0.25),
            ],
            "singleton-cio": [(2600.0, 0.5)] * 5,
        }
    )
    (group,) = conclusions.groups(results)
    line = conclusions.warmth(group)
    assert line.startswith("Warmth: windows after the proxy idled (120-120 s) against its first")
    assert "rps 1.00x (median of 2 rows, 1.00-1.01x)" in line


def busy(run: Run, share: float) -> Run:
    run.machine = MachineFigures(cpus=2, others_cores=2 * share, others_share=share)
    return run


def test_a_flagged_window_is_left_out_of_its_row_not_the_row_out_of_the_ranking():
    results = results_of(
        {
            "singleton-okhttp": [(r, 0.25) for r in jittered(4000, 0.01, 1)],
            "singleton-apache5": [(r, 0.22) for r in jittered(4600, 0.01, 2)],
            "singleton-cio": [(r, 0.50) for r in jittered(2600, 0.01, 3)],
        }
    )
    apache5 = [r for r in results.runs if r.case == "singleton-apache5"]
    busy(apache5[2], 0.19).locust.rps = 2000.0  # one window of five with other work on the machine
    okhttp = [r for r in results.runs if r.case == "singleton-okhttp"]
    for r in okhttp[:2]:  # the JIT still compiled in two of its five windows
        r.proxy.jit_cpu_seconds_in_window, r.window.seconds = 3.0, 10.0
    collapsed = okhttp[4]  # errors and scrapes missed: what the engine did stays in its row
    collapsed.locust.failures, collapsed.prometheus.scrapes_tried = 400, 5
    collapsed.prometheus.scrapes_answered = 2
    cio = [r for r in results.runs if r.case == "singleton-cio"]
    for r in cio[:4]:
        busy(r, 0.30)  # four of five: too few left to leave them out
    (group,) = conclusions.groups(results)
    rows = {r.name: r for r in group.rows}
    kept = rows["singleton-apache5"]
    assert kept.windows == 4 and len(kept.left) == 1 and kept.capacity
    assert kept.figures["rps"].mean > 4400  # the busy window's 2,000 rps is not in the centre
    assert any("1 of 5 windows left out of its figures" in why for why in kept.reasons)
    assert rows["singleton-okhttp"].windows == 3 and "not-warm" not in rows["singleton-okhttp"].flags
    assert "errors" in rows["singleton-okhttp"].flags
    whole = rows["singleton-cio"]
    assert whole.windows == 5 and not whole.left and not whole.capacity and "machine-busy" in whole.flags
    s = conclusions.standing(group, rules.BY_KEY["rps"])
    assert [r.name for r, _ in s.leaders] == ["singleton-apache5"] and not s.behind
    said = conclusions.standing_sentence(s)
    assert "Left out: singleton-okhttp (errors), singleton-cio (machine-busy)." in said
    first = run_report.busy_line(results, [group])
    assert first is not None and "5 of 15 windows" in first
    assert "1 of them are left out" in first and "4 could not be left out" in first


def test_a_row_alone_is_never_said_to_lead():
    results = results_of(
        {
            "singleton-okhttp": [(r, 0.25) for r in jittered(4000, 0.01, 1)],
            "singleton-cio": [(r, 0.50) for r in jittered(2600, 0.01, 3)],
        }
    )
    for r in results.runs:
        if r.engine == "cio":
            r.locust.failures = 500  # errors in every window: not comparable
    (group,) = conclusions.groups(results)
    text = conclusions.standing_sentence(conclusions.standing(group, rules.BY_KEY["rps"]))
    assert "only singleton-okhttp" in text and "could be ranked" in text and "leads" not in text
    assert "Left out: singleton-cio (errors)." in text


def test_cpu_per_request_is_judged_without_the_jits_compiling_where_the_jit_was_seen():
    # singleton-okhttp's JIT still compiled in its windows (0.15 of its 0.60 CPU s / 1000 req):
    # with the JIT's CPU it costs more than singleton-apache5, without it less. The verdicts rank
    # on the figure without it; the table shows both.
    results = results_of(
        {
            "singleton-okhttp": list(zip(jittered(2000, 0.01, 1), jittered(0.60, 0.01, 2), strict=True)),
            "singleton-apache5": list(zip(jittered(2000, 0.01, 3), jittered(0.50, 0.01, 4), strict=True)),
        }
    )
    for run in results.runs:
        p = run.proxy
        p.cpu_seconds = p.cpu_seconds_per_1000_requests * p.upstream_requests / 1000
        p.jit_cpu_seconds_in_window = 0.15 * p.upstream_requests / 1000 if run.engine == "okhttp" else 0.0
    (group,) = conclusions.groups(results)
    assert group.cpu_key == "cpu_no_jit" and "cpu_no_jit" in group.verdict_figures
    okhttp = next(r for r in group.rows if r.case.engine == "okhttp")
    assert okhttp.figures["cpu_no_jit"].mean == pytest.approx(okhttp.figures["cpu"].mean - 0.15, rel=0.01)
    cpu = conclusions.standing(group, rules.BY_KEY["cpu"])
    assert cpu.leaders[0][0].case.engine == "apache5"  # with the JIT's CPU
    line = conclusions.engines_answer(conclusions.screen(group))
    assert line.startswith("Among the rows, okhttp uses the least CPU per request; clearly more: apache5 +")
    assert "| CPU s / 1000 req | CPU s / 1000 req less the JIT |" in run_report.table(group).markdown()

    # Without the JIT seen (the compose backend), the verdicts use the CPU with it.
    for run in results.runs:
        run.proxy.jit_cpu_seconds_in_window = None
    (group,) = conclusions.groups(results)
    assert group.cpu_key == "cpu" and "cpu_no_jit" not in group.verdict_figures
    assert "less the JIT" not in run_report.table(group).markdown()


def test_the_lifetime_names_the_engines_it_could_not_compare_and_why():
    # per-call Java failed requests in every window (it collapsed): it is not compared, and the
    # answer names it with its flags; okhttp's per-call cost is given with its interval.
    results = results_of(
        {
            "singleton-okhttp": list(zip(jittered(4000, 0.01, 1), jittered(0.25, 0.01, 2), strict=True)),
            "per-call-okhttp": list(zip(jittered(2000, 0.01, 3), jittered(0.65, 0.01, 4), strict=True)),
            "singleton-java": list(zip(jittered(2600, 0.01, 5), jittered(0.50, 0.01, 6), strict=True)),
            "per-call-java": list(zip(jittered(100, 0.01, 7), jittered(6.0, 0.01, 8), strict=True)),
        }
    )
    for run in results.runs:
        if run.case == "per-call-java":
            run.locust.failures = 100
    (group,) = conclusions.groups(results)
    lifetime = conclusions.lifetime_answer(conclusions.screen(group))
    assert lifetime.startswith(
        "Lifetime: keep one HttpClient for the process (singleton): a client per call cost okhttp 2.58x (2."
    )
    assert "not compared: java (per-call-java (errors))" in lifetime


def test_a_lifetime_no_pair_of_which_was_compared_is_said_not_compared_not_alike():
    # every per-call row failed requests: no pair is compared, and the answer must not read as if
    # one client and a client per call had been found alike
    results = results_of(
        {
            "singleton-okhttp": list(zip(jittered(4000, 0.01, 1), jittered(0.25, 0.01, 2), strict=True)),
            "per-call-okhttp": list(zip(jittered(2000, 0.01, 3), jittered(0.65, 0.01, 4), strict=True)),
        }
    )
    for run in results.runs:
        if run.case == "per-call-okhttp":
            run.locust.failures = run.locust.requests // 2
    (group,) = conclusions.groups(results)
    lifetime = conclusions.lifetime_answer(conclusions.screen(group))
    assert lifetime == "Lifetime: not compared: okhttp (per-call-okhttp (errors))."


def test_an_aa_pair_is_said_to_differ_about_as_often_as_alpha_over_all_its_figures():
    """Two proxies drawn alike on the first screen's figures: whether the pair differs is one
    question over five tests, adjusted over the five (Benjamini-Hochberg): said in about 5% of draws."""
    draws, said = 200, 0
    for seed in range(draws):
        results = results_of(
            {
                "singleton-okhttp #1": [(r, 0.25) for r in jittered(4000, 0.05, seed * 2)],
                "singleton-okhttp #2": [(r, 0.25) for r in jittered(4000, 0.05, seed * 2 + 1)],
            }
        )
        rng = random.Random(seed)
        for run in results.runs:
            run.proxy.cpu_seconds_per_1000_requests = 0.25 * (1 + rng.uniform(-0.05, 0.05))
            run.locust.p99_ms = 30 * (1 + rng.uniform(-0.2, 0.2))
            run.prometheus.threads_live_max = 100 * (1 + rng.uniform(-0.1, 0.1))
            run.prometheus.heap_max_bytes = (100 << 20) * (1 + rng.uniform(-0.1, 0.1))
        (group,) = conclusions.groups(results)
        line = conclusions.aa_check(group)
        said += "the interval excludes 0" in line
    assert said <= draws * 0.09, f"{said} of {draws} draws called the pair different"


def test_sentences_name_a_row_by_what_sets_it_apart_in_its_group_and_an_aa_pair_once():
    # every row at RTT 80 ms, one of them over HTTPS too: the group's heading says the distance,
    # so sentences name only the protocol; the table keeps every dimension
    results = results_of(
        {name: [(200.0, 1.0)] * 5 for name in ("singleton-cio #1", "singleton-cio #2", "per-call-okhttp")}
    )
    for run in results.runs:
        run.dims = {"rtt_ms": 80} | ({"protocol": "https"} if run.case == "per-call-okhttp" else {})
    (group,) = conclusions.groups(results)
    assert [r.name for r in group.rows] == [
        "singleton-cio rtt 80 #1", "singleton-cio rtt 80 #2", "per-call-okhttp protocol https rtt 80"
    ]  # fmt: skip
    assert [r.called for r in group.rows] == [
        "singleton-cio #1",
        "singleton-cio #2",
        "per-call-okhttp protocol https",
    ]
    assert conclusions.row_names(group.rows) == ["singleton-cio", "per-call-okhttp protocol https"]
    assert conclusions.row_names(group.rows[1:]) == ["singleton-cio #2", "per-call-okhttp protocol https"]


def test_the_report_s_changes_are_one_family_so_null_changes_are_named_less_than_tested_alone():
    # 8 cases on two releases that do not differ, 5 figures a change: tested alone, 40 tests at
    # p < 0.05 name about two changes a run; adjusted together, about one run in twenty names one
    cases = ["singleton-cio", "singleton-okhttp", "singleton-apache5", "singleton-java"]
    cases += [c.replace("singleton", "per-call") for c in cases]
    alone = together = 0
    for seed in range(20):
        rng = random.Random(seed)
        runs = []
        for n in range(1, 6):
            for name in cases:
                for release in ("3.4.0", "3.5.2"):
                    run = window(name, n, 500 * (1 + rng.gauss(0, 0.05)), 1.0 * (1 + rng.gauss(0, 0.1)))
                    run.locust.p99_ms = 30 * (1 + rng.gauss(0, 0.2))
                    run.ktor, run.java, run.dimensions = release, "17.0.15", True
                    runs.append(run)
        plan = Plan([Case.parse(c) for c in cases], ["static-small"], [LOAD], repeats=5,
                    dims={"ktor": ["3.4.0", "3.5.2"]})  # fmt: skip
        env = {"commit": "0" * 16, "dirty": False, "machine": {"cpus": 2, "cpu_model": "x", "memory_gib": 1},
               "versions": {}}  # fmt: skip
        (group,) = conclusions.groups(Results(plan=plan, backend={"kind": "native"}, environment=env,
                                              started="", runs=runs))  # fmt: skip
        assert len(conclusions.changes(group)) == 8
        alone += sum("A difference on" in c.sentence() for c in conclusions.changes(group))
        together += sum("A difference on" in x for x in conclusions.changes_said(group))
    assert together < alone and together <= 2, (together, alone)
    # the first screen names each row by what sets it apart: its release
    answer = conclusions.lifetime_answer(conclusions.screen(group))
    assert "cio ktor 3.4.0 (" in answer and "cio ktor 3.5.2 (" in answer, answer
    # a row that failed requests is in no test of the family, as a ranking leaves it out
    for run in runs:
        if run.case == "per-call-cio" and run.ktor == "3.5.2":
            run.locust.failures = run.locust.requests // 2
            run.proxy.cpu_seconds_per_1000_requests *= 1.5
    (group,) = conclusions.groups(Results(plan=plan, backend={"kind": "native"}, environment=env,
                                          started="", runs=runs))  # fmt: skip
    (line,) = [x for x in conclusions.changes_said(group) if x.startswith("per-call-cio ")]
    assert "(not compared: errors)" in line and "A difference on" not in line, line
    assert "Not compared on any of them." in line, line


def test_a_run_of_one_aa_pair_names_its_case_once_and_as_a_pair():
    results = results_of({name: [(200.0, 1.0)] * 5 for name in ("singleton-cio #1", "singleton-cio #2")})
    for run in results.runs:  # both copies failed requests
        run.locust.failures = run.locust.requests // 2
    (group,) = conclusions.groups(results)
    assert run_report.answer(group) == [
        "One case, singleton-cio, as an A/A pair: nothing here to compare it with; its figures are in the "
        "table below."
    ]
    (rate,) = [x for x in conclusions.measurement_risks(group) if x.startswith("Rate not the engine's")]
    assert rate.startswith("Rate not the engine's: singleton-cio (errors") and "#" not in rate, rate


def okhttp_beside(name: str, cpu: float, jvms: int) -> conclusions.Group:
    """singleton-okhttp on 2 JVMs beside the row `name` on `jvms` (its windows, CPU `cpu`)."""
    (group,) = conclusions.groups(results_beside(name, cpu, jvms))
    return group


def results_beside(name: str, cpu: float, jvms: int) -> Results:
    """okhttp_beside's windows."""
    results = results_of(
        {
            "singleton-okhttp": [(4000.0, 0.25 * (1 + i / 100)) for i in range(5)],
            name: [(4000.0, cpu * (1 + i / 100)) for i in range(5)],
        }
    )
    for r in results.runs:
        r.fork = 1 if r.repeat <= 2 or (r.case == Case.parse(name).id and jvms == 1) else 2
    return results


def test_the_first_screen_says_which_bar_and_claim_stand_on_fewer_jvms():
    """Per-call Java stops answering in one of its two JVMs in most default runs: its bar and
    interval are of the other JVM's windows, and the chart says so beside its value, the answer
    inside the claim's interval."""
    group = okhttp_beside("singleton-cio", 0.5, jvms=1)
    chart = run_report.primary_chart(group)
    assert [r.proxies for r in group.rows] == [2, 1]
    assert chart.count("on 1 of 2 JVMs") == 1 and "0.5" in chart.split("on 1 of 2 JVMs")[0].rsplit(">", 1)[1]
    answer = conclusions.engines_answer(conclusions.screen(group))
    assert re.search(r"clearly more: cio \+\d+% \([^)]*, singleton-cio on 1 of 2 JVMs\)", answer), answer
    group = okhttp_beside("singleton-cio", 0.5, jvms=2)
    assert [r.proxies for r in group.rows] == [2, 2]
    assert "JVMs" not in run_report.primary_chart(group)
    assert "JVMs" not in conclusions.engines_answer(conclusions.screen(group))
    answer = conclusions.lifetime_answer(conclusions.screen(okhttp_beside("per-call-okhttp", 0.5, jvms=1)))
    assert re.search(r"okhttp 2\.\d\dx \([\d.]+-[\d.]+x, per-call-okhttp on 1 of 2 JVMs\)", answer), answer


def test_the_first_screen_names_a_row_whose_jvm_stopped_answering_in_a_warm_up_and_what_became_of_it():
    """Per-call Java stops answering at capacity in the warm-up of one of its two JVMs in most default
    runs: a risk names the row, the load it stopped at and how many of its JVMs, and whether that
    JVM's windows are left out or kept (one in which the engine failed is kept)."""
    results = results_beside("per-call-java", 0.5, jvms=2)
    (group,) = conclusions.groups(results)
    assert not [x for x in conclusions.risks(results, group) if x.startswith("Stopped")]
    for r in results.runs:
        if r.case == "per-call-java" and r.fork == 2:
            r.warmup = Warmup(
                seconds=25, settled=True, first_load="closed/50/0", first_end="stopped answering"
            )
    (group,) = conclusions.groups(results)
    (said,) = [x for x in conclusions.risks(results, group) if x.startswith("Stopped")]
    assert said == (
        "Stopped answering under load: per-call-java in the warm-up at capacity (closed/50/0, --warm-first) "
        "of 1 of its 2 JVMs; of that JVM's 3 windows, 3 are left out of its figures."
    )
    (first,) = [r for r in results.runs if r.case == "per-call-java" and r.fork == 2 and r.repeat == 3]
    first.locust.failures = first.locust.requests
    (group,) = conclusions.groups(results)
    (said,) = [x for x in conclusions.risks(results, group) if x.startswith("Stopped")]
    assert said.endswith(
        "of that JVM's 3 windows, 2 are left out of its figures, 1 kept as it failed in it (errors)."
    )


def noisy_heap(windows: int, spread: float) -> Results:
    """Two rows whose heap is the same but swings by `spread` (a share, log-normal) from window to
    window, one JVM each: `windows` windows a row."""
    rng = random.Random(windows)
    results = results_of({"singleton-okhttp": [(400, 0.3)] * 5, "singleton-apache5": [(400, 0.3)] * 5})
    results.runs = [
        window(name, i + 1, 400, 0.3, heap=(100 << 20) * math.exp(rng.gauss(0, spread)))
        for i in range(windows)
        for name in ("singleton-okhttp", "singleton-apache5")
    ]
    return results


def test_a_figure_the_run_cannot_resolve_is_shown_as_values_with_the_length_that_would():
    """Heap that swings 100% a window, 5 windows a row: the comparison could find only a difference
    of several hundred percent, so the sentence gives the values and the run that would find one of
    100%; that run, simulated, does (its detectable difference at most 100% in most draws)."""
    (group,) = conclusions.groups(noisy_heap(5, 1.0))
    s = conclusions.standing(group, rules.BY_KEY["heap"])
    text = conclusions.standing_sentence(s)
    assert s.detectable > 1 and text.startswith(
        "heap max MiB (lower is better): not compared (this run finds"
    )
    assert "no clear difference" not in text and "singleton-okhttp " in text and "singleton-apache5 " in text
    windows = int(re.search(r"lab run --forks 1 --windows (\d+) would find one of 100%", text).group(1))
    assert windows > 5
    found = []
    for seed in range(20):
        results = noisy_heap(windows, 1.0)
        rng = random.Random(seed)
        for r in results.runs:
            r.prometheus.heap_max_bytes = (100 << 20) * math.exp(rng.gauss(0, 1.0))
        (longer,) = conclusions.groups(results)
        found.append(conclusions.standing(longer, rules.BY_KEY["heap"]).detectable)
    assert sum(d <= 1.0 for d in found) >= 15, found


def test_a_figure_the_run_resolves_is_compared_as_before():
    (group,) = conclusions.groups(noisy_heap(5, 0.05))
    text = conclusions.standing_sentence(conclusions.standing(group, rules.BY_KEY["heap"]))
    assert "not compared" not in text and "This run finds a difference of" in text


def test_a_rows_tail_is_its_jvms_merged_histograms_not_a_mean_of_its_windows_tails():
    """Two windows of one JVM: 990 fast requests, then 10 of 1,000 slow ones in the other. Merged, the
    JVM's p99 is the fast requests' (1% slow is at its 99th percentile's edge); averaged, the windows'
    p99s would be half slow. A second JVM is a second value, and Locust's figure serves older runs."""
    from lab_latency import Latencies

    fast, mixed = Latencies(), Latencies()
    for _ in range(990):
        fast.record(0.002)
    for i in range(1000):
        mixed.record(0.500 if i < 11 else 0.002)
    runs = [window("singleton-okhttp", n, 400, 0.3) for n in (1, 2, 3)]
    for r, lat, fork in zip(runs, (fast, mixed, mixed), (1, 1, 2), strict=True):
        r.fork = fork
        r.locust.latency_intended = lat.window()["latency_intended"]
    values, forks = rules.jvm_values(rules.BY_KEY["p99"], runs)
    assert forks == [1, 2]
    assert values[0] == pytest.approx(2.0, rel=1e-3) and values[1] == pytest.approx(500, rel=1e-3)
    assert [rules.BY_KEY["p99"].get(r) for r in runs[:2]] == [
        pytest.approx(2.0, rel=1e-3),
        pytest.approx(500, rel=1e-3),
    ]
    for r in runs:
        r.locust.latency_intended = ""
    assert rules.jvm_values(rules.BY_KEY["p99"], runs) == ([30.0, 30.0, 30.0], [1, 1, 2])


def test_the_report_plots_each_rows_merged_latency_by_percentile_where_its_windows_have_histograms():
    from lab_latency import Latencies

    results = results_of({"singleton-okhttp": [(400, 0.3)] * 5, "singleton-apache5": [(400, 0.3)] * 5})
    (group,) = conclusions.groups(results)
    assert run_report.percentile_plot(group) == []  # older runs: Locust's figures only
    rng = random.Random(3)
    for r in results.runs:
        lat = Latencies()
        slow = 0.050 if r.case == "singleton-apache5" else 0.010
        for _ in range(500):
            lat.record(rng.expovariate(1 / 0.002), slow if rng.random() < 0.02 else 0.0)
        r.locust.latency_intended, r.locust.latency_sent = (
            lat.window()[k] for k in ("latency_intended", "latency_sent")
        )
    (group,) = conclusions.groups(results)
    (svg,) = run_report.percentile_plot(group)
    assert "<title>latency by percentile" in svg and svg.count("<polyline") == 4  # two rows, two lines each
    assert svg.count('stroke-dasharray="4 3"') == 2 and all(f">p{t}<" in svg for t in ("50", "99", "99.99"))
    assert "singleton-okhttp" in svg and "singleton-apache5" in svg
    page = run_report.page(results)
    assert page.count("<title>latency by percentile") == 1


def test_a_rows_proxy_tail_merges_its_jvms_buckets_and_a_bucket_kept_is_the_histogram_s():
    """The proxy's own histograms kept a window as their non-empty buckets (metrics.own_counts): one
    window's quantile from them is the full histogram's, and a JVM's p99 is that of its windows'
    buckets summed: 990 requests under 1 ms and 10 slow in one window (its p99 a fast one's), 989
    and 11 in the other; merged, 21 of 2,000 are slow (1.05%), so the JVM's p99 is a slow one's.
    A window without buckets adds nothing to its JVM's; without buckets in any window (a run kept
    before they were), the windows' own figures serve."""
    bounds = [0.0005, 0.001, 0.002, 0.25, 0.5, 1.0, float("inf")]

    def histogram(fast: int, slow: int) -> dict[float, float]:  # cumulative, as /metrics has it
        own = {0.001: fast, 0.5: slow}
        total, out = 0.0, {}
        for le in bounds:
            total += own.get(le, 0)
            out[le] = total
        return out

    quiet, mixed = histogram(990, 10), histogram(989, 11)
    for h in (quiet, mixed):
        kept = metrics.own_counts(h)
        assert set(kept) < {repr(b) for b in bounds} and "0.002" not in kept  # an empty bucket, left out
        for q in (0.5, 0.99, 0.995, 1.0):
            assert metrics.quantile(metrics.cumulative_of(kept), q) == pytest.approx(metrics.quantile(h, q))
    runs = [window("singleton-okhttp", n, 400, 0.3) for n in (1, 2, 3)]
    for r, h, fork in zip(runs, (quiet, mixed, mixed), (1, 1, 2), strict=True):
        r.fork = fork
        r.proxy.server_buckets = metrics.own_counts(h)
        r.proxy.server_p99_ms = metrics.quantile(h, 0.99) * 1000
    values, forks = rules.jvm_values(rules.BY_KEY["server_p99"], runs)
    merged = {le: quiet[le] + mixed[le] for le in bounds}
    assert forks == [1, 2] and values[0] == pytest.approx(metrics.quantile(merged, 0.99) * 1000)
    assert values[0] > 250 and runs[0].proxy.server_p99_ms <= 1  # the slow ones' bucket, merged
    assert values[1] == pytest.approx(runs[2].proxy.server_p99_ms)
    runs[1].proxy.server_buckets = {}  # a window without them: the JVM's other windows alone
    values, forks = rules.jvm_values(rules.BY_KEY["server_p99"], runs)
    assert (
        forks == [1, 2]
        and values[0] == pytest.approx(metrics.quantile(quiet, 0.99) * 1000)
        and values[0] <= 1
    )
    assert values[1] == pytest.approx(runs[2].proxy.server_p99_ms)
    for r in runs:  # a run kept before windows kept buckets: every window's own figure
        r.proxy.server_buckets = {}
    assert rules.jvm_values(rules.BY_KEY["server_p99"], runs)[0] == [r.proxy.server_p99_ms for r in runs]
