"""What a `lab run` concludes, from windows made up here: a lead only when the test over the
windows and the noise floor both say so, ties said as ties, the A/A pair never a lead, the
lifetime answer, the risks by name. The statistics are scipy's (confidence.py)."""

from __future__ import annotations

import random

import pytest
from scipy import stats

from ktor_lab import conclusions, confidence, run_report
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


def test_an_estimate_is_the_mean_with_student_s_95_percent_interval():
    values = [100.0, 102.0, 98.0, 101.0, 99.0]
    e = Estimate.of(values)
    low, high = stats.t.interval(0.95, 4, loc=100.0, scale=stats.sem(values))
    assert (e.n, e.mean, e.low, e.high) == (5, 100.0, pytest.approx(low), pytest.approx(high))
    assert e.half_width == pytest.approx((high - low) / 2 / 100)
    assert Estimate.of([None, 7.0]).half_width is None and Estimate.of([]).mean is None


def test_a_lead_needs_the_test_and_the_floor():
    a = Estimate.of([100, 101, 99, 100, 100])
    b = Estimate.of([110, 111, 109, 110, 110])
    c = confidence.compare(a, b)
    assert c.p == pytest.approx(stats.mannwhitneyu(a.values, b.values).pvalue) and c.p < 0.05
    assert c.difference == pytest.approx(0.10) and c.clear
    # The same windows against a floor of 12%: significant, and not named.
    under = confidence.compare(a, b, floor=0.12)
    assert under.significant and not under.clear and "under the noise floor of 12.0%" in under.words()
    # Overlapping windows: not significant, whatever the means say.
    overlap = confidence.compare(a, Estimate.of([101, 99, 103, 98, 100]))
    assert not overlap.significant and "not significant" in overlap.words()
    # One window a side: nothing to test.
    assert confidence.compare(Estimate.of([1.0]), Estimate.of([2.0])).p is None


def test_the_verdict_names_a_lead_only_beyond_the_noise_floor_and_ties_otherwise():
    results = results_of(
        {
            "singleton-okhttp #1": [(r, 0.25) for r in jittered(4000, 0.01, 1)],
            "singleton-okhttp #2": [(r, 0.25) for r in jittered(4080, 0.01, 2)],  # the pair: ~2% apart
            "singleton-apache5": [(r, 0.26) for r in jittered(4050, 0.01, 3)],  # within the floor
            "singleton-cio": [(r, 0.50) for r in jittered(2600, 0.01, 4)],  # far behind
        }
    )
    (group,) = conclusions.groups(results)
    floor = group.floor("rps")
    pair = group.compare(group.rows[0], group.rows[1], "rps")
    assert floor == pytest.approx(abs(pair.difference)) and floor > 0.01
    s = conclusions.standing(group, conclusions.BY_KEY["rps"])
    leaders = [r.name for r, _ in s.leaders]
    assert "singleton-apache5" in leaders and "singleton-cio" not in leaders
    assert [r.name for r, _ in s.behind] == ["singleton-cio"] and "singleton-okhttp #2" not in leaders
    text = conclusions.sentence(s)
    assert "lead, indistinguishable (within " in text and "behind: singleton-cio 2," in text
    # The A/A pair is judged like any pair, against the floor of the others (here none: 1%): it may
    # differ beyond chance, and the noise line says so, but it is never ranked as two engines.
    line = conclusions.noise_line(group)
    assert line.startswith(
        "Noise floor: two proxies of singleton-okhttp (singleton-okhttp #1, singleton-okhttp #2)"
    )


def test_an_aa_pair_of_the_same_case_finds_no_difference_where_there_is_none():
    """200 A/A pairs drawn from one distribution: a lead called between them at most about as often
    as the test's alpha says (5%), never more than twice that."""
    called = 0
    for seed in range(200):
        results = results_of(
            {
                "singleton-okhttp #1": [(r, 0.25) for r in jittered(4000, 0.05, seed * 2)],
                "singleton-okhttp #2": [(r, 0.25) for r in jittered(4000, 0.05, seed * 2 + 1)],
            }
        )
        (group,) = conclusions.groups(results)
        a, b = group.rows
        called += group.compare(a, b, "rps").clear
    assert called <= 20, called


def test_among_rows_of_one_distribution_the_best_is_rarely_named_ahead():
    """The best row by its mean held against each of the others is a family of tests: without
    adjusting its p values, the best of 5 rows drawn alike was named ahead of at least one other in
    64 of these 400 draws (16%); adjusted (Benjamini-Hochberg), in 21 (5%), about as often as alpha."""
    names = ["singleton-okhttp", "singleton-apache5", "singleton-cio", "singleton-java", "singleton-apache"]
    named = 0
    draws = 400
    for seed in range(draws):
        results = results_of(
            {n: [(r, 0.25) for r in jittered(4000, 0.05, seed * 10 + i)] for i, n in enumerate(names)}
        )
        (group,) = conclusions.groups(results)
        named += bool(conclusions.standing(group, conclusions.BY_KEY["rps"]).behind)
    assert named <= draws * 0.10, f"{named} of {draws} draws named a row behind"


def test_a_family_s_p_values_are_adjusted_and_say_over_how_many():
    a = Estimate.of([100, 101, 99, 100, 100])
    far = Estimate.of([110, 111, 109, 110, 110])
    near = Estimate.of([100.5, 99.5, 100, 101, 99])
    tests = confidence.adjust([confidence.compare(a, far), confidence.compare(a, near)])
    raw = [confidence.compare(a, far).p, confidence.compare(a, near).p]
    assert [c.p for c in tests] == pytest.approx(list(stats.false_discovery_control(raw)))
    assert tests[0].clear and not tests[1].clear and " of 2" in tests[0].words()
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
    lifetime = conclusions.lifetime_answer(group)
    assert lifetime.startswith("Lifetime: keep one HttpClient for the process (singleton). A new client per ")
    assert "1.4-2.6x the CPU per request here, for each of the 2 engines" in lifetime
    assert "per-call-okhttp (leak)" in lifetime
    engines = conclusions.engines_answer(group)
    assert engines[0].startswith("Engines, among singleton clients: singleton-okhttp lead or tie on")
    assert engines[1].startswith("rps (higher is better): singleton-okhttp leads with 4,0")
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
    assert "Settings every proxy" not in first_screen and md.index("## Appendix") > md.index("| case |")


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


def test_a_busy_window_is_left_out_of_its_row_not_the_row_out_of_the_ranking():
    results = results_of(
        {
            "singleton-okhttp": [(r, 0.25) for r in jittered(4000, 0.01, 1)],
            "singleton-apache5": [(r, 0.22) for r in jittered(4600, 0.01, 2)],
            "singleton-cio": [(r, 0.50) for r in jittered(2600, 0.01, 3)],
        }
    )
    apache5 = [r for r in results.runs if r.case == "singleton-apache5"]
    busy(apache5[2], 0.19).locust.rps = 2000.0  # one window of five with other work on the machine
    for r in [r for r in results.runs if r.case == "singleton-cio"][:3]:
        busy(r, 0.30)  # three of five: too few quiet windows to leave them out
    (group,) = conclusions.groups(results)
    rows = {r.name: r for r in group.rows}
    kept = rows["singleton-apache5"]
    assert kept.windows == 4 and len(kept.busy) == 1 and kept.capacity
    assert kept.figures["rps"].mean > 4400  # the busy window's 2,000 rps is not in the mean
    assert any("1 of 5 windows left out of its figures" in why for why in kept.reasons)
    cio = rows["singleton-cio"]
    assert cio.windows == 5 and not cio.busy and not cio.capacity and "machine-busy" in cio.flags
    s = conclusions.standing(group, conclusions.BY_KEY["rps"])
    assert [r.name for r, _ in s.leaders] == ["singleton-apache5"]
    first = run_report.busy_line(results, [group])
    assert first is not None and "4 of 15 windows" in first
    assert "1 of them are left out" in first and "3 could not be left out" in first


def test_too_few_windows_are_said_to_be_too_few_not_indistinguishable():
    # With 3 windows a side Mann-Whitney's smallest two-sided p is 0.1: no lead can be named, and
    # the verdict must say why rather than call two clearly different rows alike.
    assert confidence.smallest_p(3, 3) == pytest.approx(0.1)
    assert confidence.smallest_p(4, 4) < confidence.ALPHA < confidence.smallest_p(3, 4)
    assert confidence.fewest_windows() == 4
    a, b = Estimate.of([4990, 4966, 4995]), Estimate.of([6185, 6621, 6727])
    c = confidence.compare(a, b)
    assert c.p == pytest.approx(0.1) and not c.can_tell and not c.clear
    assert c.words().endswith("too few windows to tell (3 and 3)")
    five = confidence.compare(
        Estimate.of([4990, 4966, 4995, 5001, 4980]), Estimate.of([6185, 6621, 6727, 6400, 6500])
    )
    assert five.can_tell and five.clear and "too few" not in five.words()
    results = results_of(
        {
            "singleton-okhttp": [(r, 0.21) for r in (4990, 4966, 4995, 5001, 4980)],
            "singleton-apache5": [(r, 0.13) for r in (6185, 6621, 6727, 6400, 6500)],
        }
    )
    three = results_of(
        {
            "singleton-okhttp": [(r, 0.21) for r in (4990, 4966, 4995, 5001, 4980)],
            "singleton-apache5": [(r, 0.13) for r in (6185, 6621, 6727, 6400, 6500)],
        }
    )
    three.runs = [r for r in three.runs if r.repeat <= 3]
    (group,) = conclusions.groups(three)
    text = conclusions.sentence(conclusions.standing(group, conclusions.BY_KEY["rps"]))
    assert "not told apart (too few windows a row for the test)" in text and "indistinguishable" not in text
    (group,) = conclusions.groups(results)
    text = conclusions.sentence(conclusions.standing(group, conclusions.BY_KEY["rps"]))
    assert "behind: singleton-okhttp" in text


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
    assert okhttp.figures["cpu_no_jit"].mean == pytest.approx(okhttp.figures["cpu"].mean - 0.15)
    cpu = conclusions.standing(group, conclusions.BY_KEY["cpu"])
    assert cpu.leaders[0][0].case.engine == "apache5"  # with the JIT's CPU
    lines = conclusions.engines_answer(group)
    head = "CPU s / 1000 req less the JIT (lower is better): singleton-okhttp leads"
    assert any(line.startswith(head) for line in lines)
    assert "| CPU s / 1000 req | CPU s / 1000 req less the JIT |" in run_report.table(group).markdown()

    # Without the JIT seen (the compose backend), the verdicts use the CPU with it.
    for run in results.runs:
        run.proxy.jit_cpu_seconds_in_window = None
    (group,) = conclusions.groups(results)
    assert group.cpu_key == "cpu" and "cpu_no_jit" not in group.verdict_figures
    assert "less the JIT" not in run_report.table(group).markdown()


def test_the_lifetime_is_named_when_per_call_is_dearer_for_some_engines_and_untold_for_the_rest():
    # per-call Java answered its /metrics in one window only (it collapsed): its CPU per request
    # cannot be tested, yet no engine was cheaper per call, so the answer still names singleton
    # and says for which engine the test could not tell, and why.
    results = results_of(
        {
            "singleton-okhttp": list(zip(jittered(4000, 0.01, 1), jittered(0.25, 0.01, 2), strict=True)),
            "per-call-okhttp": list(zip(jittered(2000, 0.01, 3), jittered(0.65, 0.01, 4), strict=True)),
            "singleton-java": list(zip(jittered(2600, 0.01, 5), jittered(0.50, 0.01, 6), strict=True)),
            "per-call-java": list(zip(jittered(100, 0.01, 7), jittered(6.0, 0.01, 8), strict=True)),
        }
    )
    for run in [r for r in results.runs if r.case == "per-call-java"][1:]:
        run.proxy.cpu_seconds_per_1000_requests = None  # unresponsive: no CPU figure
    (group,) = conclusions.groups(results)
    lifetime = conclusions.lifetime_answer(group)
    assert lifetime.startswith(
        "Lifetime: keep one HttpClient for the process (singleton). A new client per call cost 2.6-2.6x "
        "the CPU per request here for okhttp (beyond the noise floor, p<0.05); no engine was cheaper per call"
    )
    rows = {r.name: r.figures["cpu"].mean for r in group.rows}
    ratio = rows["per-call-java"] / rows["singleton-java"]
    assert 11 < ratio < 13 and rows["per-call-java"] == pytest.approx(6.0, rel=0.01)  # its one window
    assert f"the test could not tell for java ({ratio:.1f}x over 5 and 1 windows with the figure)" in lifetime


def test_an_aa_pair_is_said_to_differ_about_as_often_as_alpha_over_all_its_figures():
    """Two proxies drawn alike on all five figures the first screen uses: whether the pair
    differs is one question over five tests. Unadjusted, the noise line said "differed beyond
    chance" in 48 of these 300 draws (16%); adjusted over the five (Benjamini-Hochberg), in 12
    (4%), about as often as alpha."""
    draws, said = 300, 0
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
        line = conclusions.noise_line(group)
        assert " of 5)" in line  # each p said over how many it was adjusted
        said += "differed beyond chance" in line
    assert said <= draws * 0.08, f"{said} of {draws} draws called the pair different"
