"""The first screen's decision rule, checked by simulating it: the real verdict code
(conclusions.groups and conclusions.screen, as report.md calls them) on windows drawn here for the
default plan's rows, forks and windows, with JVMs that differ.

A draw's windows: a row's CPU per request times a spread per JVM (fork) and a spread per window,
both log-normal. What a user reads as a claim is every difference the first screen names: a
lifetime per engine, an engine behind another. Seeded; each test runs in seconds.
"""

from __future__ import annotations

import math

import numpy as np

from ktor_lab import conclusions, confidence, verdict
from ktor_lab.cases import Case
from ktor_lab.plan import Plan, parse_load
from ktor_lab.results import LocustFigures, PrometheusFigures, ProxyFigures, Results, Run, Warmup, Window

# The defaults a `lab run` takes (commands/run.py reads them from here).
PLAN = Plan.default()
# Window noise and the spread between JVMs of one case (log-normal sigmas): 10% a window, as the
# default matrix's CPU per request showed (6-12%), and 3% between JVMs, as its A/A pairs did.
WINDOW_NOISE = 0.10
JVM_SPREAD = 0.03
ENVIRONMENT = {
    "commit": "0123456789abcdef",
    "dirty": False,
    "machine": {"cpus": 2, "cpu_model": "simulated", "memory_gib": 1},
    "versions": {},
}


def window(case: Case, copy: int, fork: int, n: int, cpu: float) -> Run:
    load = PLAN.loads[0]
    rps = load.target_rps or 1000.0
    return Run(
        case=case.id,
        engine=case.engine,
        lifetime=case.lifetime,
        scenario=PLAN.scenarios[0],
        load=load,
        repeat=n,
        warmup=Warmup(seconds=60, settled=True),
        locust=LocustFigures(rps=rps, p99_ms=30.0, requests=int(rps * 10), cpu_peak_percent={"local": 50}),
        proxy=ProxyFigures(upstream_requests=rps * 10, cpu_seconds_per_1000_requests=cpu),
        prometheus=PrometheusFigures(threads_live_max=50, heap_max_bytes=100 << 20),
        copy=copy,
        fork=fork,
    )


def draw(rng: np.random.Generator, costs: dict[str, float], block: float = 0.0, plan: Plan = PLAN) -> Results:
    """One run of the default plan: every proxy's windows, CPU per request `costs[case]` (1.0 when
    not named) times the JVM's and the window's spread; the second block of JVMs (fork 2) shifted
    by `block` for every row (what drifted between the two blocks)."""
    runs = []
    for p in plan.proxies():
        jvm = rng.normal(0, JVM_SPREAD) + (math.log1p(block) if p.fork == 2 else 0.0)
        cost = costs.get(p.case.id, 1.0)
        for n in range(1, plan.repeats + 1):
            runs.append(window(p.case, p.copy, p.fork, n, cost * math.exp(jvm + rng.normal(0, WINDOW_NOISE))))
    return Results(plan=plan, backend={"kind": "native"}, environment=ENVIRONMENT, started="", runs=runs)


def claims(results: Results) -> list[str]:
    (group,) = conclusions.groups(results)
    return conclusions.screen(group).claims()


def rate(seed: int, draws: int, costs: dict[str, float], hit, block: float = 0.0, plan: Plan = PLAN) -> float:
    rng = np.random.default_rng(seed)
    return sum(1 for _ in range(draws) if hit(claims(draw(rng, costs, block, plan)))) / draws


def test_the_default_plan_replicates_jvms():
    assert PLAN.forks >= 2 and PLAN.repeats >= 2
    assert PLAN.loads[0].model == "rate", "the default load gives every row the same work"


def check_nothing_different(draws: int, bound: float) -> None:
    """Every row drawn alike, JVMs differing by 3% and windows by 10%: the first screen names a
    lifetime or an engine in at most 5% of runs (3% at 200 draws): at most `bound` of `draws`."""
    found = rate(1, draws, {}, lambda c: bool(c))
    print(f"nothing different: a difference named in {found:.1%} of {draws} runs")
    assert found <= bound, found


def check_false_engine_claims(draws: int, bound: float) -> None:
    """Benjamini-Hochberg bounds the share of false claims among those the first screen makes, not
    the chance of making one: with every lifetime truly different (per call 1.19-3.09x, as the
    default run of docs/matrix-runs/default-third measured) and the engines alike, an engine is
    named ahead in about 8% of runs (printed), above the 5% of runs where nothing differs at all.
    docs/matrix.md says so; at most `bound` of `draws`."""
    per_call = {"cio": 1.19, "apache5": 3.09, "okhttp": 1.94, "java": 1.53}
    costs = {c.id: per_call[c.engine] for c in PLAN.cases if c.lifetime == "per-call"}
    found = rate(12, draws, costs, lambda c: any(x.startswith("engines") for x in c))
    print(f"lifetimes as measured, engines alike: an engine named in {found:.1%} of {draws} runs")
    assert found < bound, found


def test_with_nothing_different_the_first_screen_rarely_names_a_difference():
    """The twin of runner/tests/test_simulations.py's (200 draws, 8%): 80 draws, at most 12%."""
    check_nothing_different(80, 0.12)


def test_where_the_lifetimes_differ_as_measured_a_false_engine_claim_is_rare():
    """The twin of runner/tests/test_simulations.py's (300 draws, under 1 in 8): 80 draws, under 1 in 5."""
    check_false_engine_claims(80, 0.2)


def test_a_shift_between_the_blocks_of_jvms_moves_every_row_alike_and_is_taken_out():
    """The second block of JVMs 20% cheaper in every row (the default run of 2026-11-27 read its
    second block 10-27% lower): no difference is made of it, and the 20% engine is still found."""
    assert rate(6, 80, {}, lambda c: bool(c), block=-0.2) <= 0.08
    dearer = Case.parse("singleton-apache5").id
    found = rate(
        7, 80, {dearer: 1.2}, lambda c: any(x.endswith("< singleton-apache5") for x in c), block=-0.2
    )
    assert found >= 0.4, found


def test_a_lifetime_that_costs_double_is_named_for_every_engine():
    """Per call twice the CPU per request of singleton for every engine, as the lab measures it."""
    costs = {c.id: 2.0 for c in PLAN.cases if c.lifetime == "per-call"}
    engines = {c.engine for c in PLAN.cases}
    found = rate(3, 30, costs, lambda c: {x.split()[1] for x in c if x.startswith("lifetime")} == engines)
    assert found >= 0.95, found


def test_the_interval_of_a_named_difference_excludes_zero_and_of_a_tie_includes_it():
    rng = np.random.default_rng(4)
    for _ in range(20):
        (group,) = conclusions.groups(draw(rng, {Case.parse("singleton-cio").id: 1.15}))
        s = conclusions.screen(group)
        for _, c in s.engines.leaders[1:] + s.engines.behind:
            assert c.low is not None and c.high is not None
            assert (c.low > 0 or c.high < 0) == c.significant, c
        assert s.family == 4 + 6  # 4 lifetimes, 6 pairs of engines


def test_the_pooled_test_holds_its_level_on_two_rows():
    """The t test itself, two rows of 2 forks x 3 windows with the spread pooled over 9 rows:
    p < ALPHA in about 5% of null draws."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(400):
        rows = [
            confidence.Estimate.of(
                list(np.exp(rng.normal(rng.normal(0, JVM_SPREAD, 2).repeat(3), WINDOW_NOISE))),
                [1, 1, 1, 2, 2, 2],
            )
            for _ in range(9)
        ]
        pool = confidence.pool_of(rows)
        a, b = rows[0].with_pool(pool), rows[1].with_pool(pool)
        hits += confidence.compare(a, b).significant
    assert 0.02 <= hits / 400 <= 0.09, hits


def test_the_warmth_line_says_how_much_dearer_a_first_window_still_warming_reads():
    """Every JVM's first window 10% dearer per request than its later ones (a warm-up that ended
    before the JIT finished): the report's Warmth line gives about -9% for the later windows, with
    an interval that excludes 0; with no such difference, an interval that holds it."""
    for first, held in ((1.1, False), (1.0, True)):
        rng = np.random.default_rng(11)
        results = draw(rng, {})
        for r in results.runs:
            r.after, r.idle_s = ("warm-up", None) if r.repeat == 1 else ("idle", 30.0)
            r.proxy.jit_cpu_seconds_in_window = 0.0
            r.proxy.cpu_seconds = r.proxy.cpu_seconds_per_1000_requests * (first if r.repeat == 1 else 1.0)
            r.proxy.cpu_seconds_per_1000_requests = r.proxy.cpu_seconds
            r.proxy.upstream_requests = 1000
        (group,) = conclusions.groups(results)
        change, low, high, jvms = conclusions.later_cost(group)
        assert jvms == len(PLAN.proxies()) and (low <= 0 <= high) == held, (change, low, high)
        assert "later windows against the first of their JVM: " in conclusions.warmth(group)
        if not held:
            assert -0.15 < change < -0.04


def paced_window(
    rng: np.random.Generator, users: int, target_rps: float, seconds: float, keeps: float
) -> Run:
    """A window of Locust's rate model, drawn: each user starts a request every users/target seconds
    (slower by `keeps` when the proxy falls short), from a phase of its own; the window counts those
    started inside it."""
    period = users / target_rps / keeps
    phases = rng.uniform(0, period, users)
    requests = int(sum(np.floor((seconds - phases) / period) + 1))
    load = parse_load(f"rate/{target_rps:g}/{users}")
    return Run(
        case="singleton-cio",
        engine="cio",
        lifetime="singleton",
        scenario="static-large",
        load=load,
        repeat=1,
        window=Window(0.0, seconds, seconds),
        locust=LocustFigures(rps=requests / seconds, requests=requests),
    )


def test_a_window_at_a_low_rate_is_short_of_it_only_beyond_the_pacing_s_grain():
    """At 5 rps with 20 users (the guide's large downloads) a 10 s window holds 50 requests give or
    take the users' phases: a proxy that keeps the rate is hardly ever called short of it (the 5%
    alone called 1 in 7 windows short), one 20% short nearly always is; with 400 users the count
    spreads more and half the rate is still seen; at 400 rps the grain is nothing and 10% short is
    always seen."""
    rng = np.random.default_rng(7)

    def short(users: int, rps: float, keeps: float, n: int = 1000) -> float:
        windows = (paced_window(rng, users, rps, 10.0, keeps) for _ in range(n))
        return sum("target" not in verdict.judge(w).flags for w in windows) / n

    assert short(20, 5, 1.0) < 0.01
    assert short(20, 5, 0.8) > 0.9
    # 400 users at 5 rps: each starts 0 or 1 request in a window, and the count spreads more
    assert short(400, 5, 1.0) < 0.03 and short(400, 5, 0.5) > 0.9
    assert short(40, 400, 1.0) < 0.01 and short(40, 400, 0.9, 200) == 1.0
    # the 5% alone, as the rule was: the grain made about 1 in 8 windows "short" at 5 rps
    rng = np.random.default_rng(7)
    alone = [paced_window(rng, 20, 5, 10.0, 1.0).locust.requests < 0.95 * 50 for _ in range(1000)]
    assert 0.08 < sum(alone) / 1000 < 0.2


def test_between_two_runs_of_one_thing_an_interval_of_one_misses_the_other_s_estimate_about_once_in_ten():
    """Two runs drawn alike (per call dearer, CIO and Java behind, as measured): each first-screen
    interval of one run against the other run's estimate of the same claim. Both estimates vary, so
    an interval leaves out the other's estimate in about one claim in ten (printed), far more than
    the 5% a reader may expect; docs/matrix.md takes two runs' agreement from lab compare instead."""
    rng = np.random.default_rng(5)
    costs = {c.id: 2.0 if c.lifetime == "per-call" else 1.0 for c in PLAN.cases}
    costs |= {Case.parse("singleton-cio").id: 2.3, Case.parse("singleton-java").id: 1.9}

    def intervals(results: Results) -> dict:
        (group,) = conclusions.groups(results)
        s = conclusions.screen(group)
        pairs = [(("lifetime", a.name), c) for a, _, c in s.lifetimes] + [
            (("engine", r.name), c) for r, c in s.engines.leaders[1:] + s.engines.behind
        ]
        return {k: (c.difference, c.low, c.high) for k, c in pairs if c is not None and c.low is not None}

    missed = tried = 0
    for _ in range(60):
        x, y = intervals(draw(rng, costs)), intervals(draw(rng, costs))
        for k in x.keys() & y.keys():
            for (_, low, high), (other, _, _) in ((x[k], y[k]), (y[k], x[k])):
                tried += 1
                missed += not low <= other <= high
    print(f"an interval of one run left out the other's estimate in {missed / tried:.0%} of {tried} claims")
    assert tried > 500 and 0.05 < missed / tried < 0.2, (missed, tried)


def test_the_machine_line_measures_what_the_generator_and_the_proxy_share_and_nothing_when_they_do_not():
    """Each window drawn with a machine factor (7% a window, log-normal) that multiplies the proxy's
    CPU per request and Locust's alike, on top of their own noise (10% and 3%): the line finds their
    correlation (0.53 expected), its interval holding it in about 95% of runs and leaving out 0 in
    nearly all, and less spread less that part; with no shared factor, its interval holds 0 in about
    95% of runs and the line says none was found."""
    from ktor_lab.results import MachineFigures

    def with_generator(rng: np.random.Generator, shared: float, generator: bool = True) -> Results:
        results = draw(rng, {})
        for r in results.runs:
            machine = math.exp(rng.normal(0, shared))
            r.proxy.cpu_seconds = r.proxy.cpu_seconds_per_1000_requests * machine
            r.proxy.jit_cpu_seconds_in_window, r.proxy.upstream_requests = 0.0, 1000
            per_1000 = 0.4 * machine * math.exp(rng.normal(0, 0.03))
            r.machine = MachineFigures(cpus=2, window_s=10.0)
            if generator:
                r.machine.generator_cores = per_1000 * r.locust.requests / 1000 / 10.0
        return results

    rng = np.random.default_rng(13)
    expected = 0.07**2 / math.sqrt((0.07**2 + WINDOW_NOISE**2) * (0.07**2 + 0.03**2))
    held = found = 0
    for _ in range(40):
        (group,) = conclusions.groups(with_generator(rng, 0.07))
        r, low, high, windows, jvms, before, after = conclusions.shared_noise(group)
        held += low <= expected <= high
        found += low > 0
        assert windows == len(PLAN.proxies()) * PLAN.repeats and jvms == len(PLAN.proxies())
        assert after < before
    assert held >= 34 and found >= 36, (held, found)  # 95% intervals: about 38 of 40
    (group,) = conclusions.groups(with_generator(rng, 0.07))
    assert "moved with Locust's" in conclusions.machine_speed(group)
    zero = 0
    for _ in range(100):
        (group,) = conclusions.groups(with_generator(rng, 0.0))
        _, low, high, *_ = conclusions.shared_noise(group)
        zero += low <= 0 <= high
        if low <= 0 <= high:
            assert conclusions.machine_speed(group).endswith("no shared movement found.")
    print(f"no shared factor: the interval held 0 in {zero} of 100 runs")
    assert zero >= 88, zero
    (group,) = conclusions.groups(with_generator(rng, 0.07, generator=False))
    assert conclusions.shared_noise(group) is None and conclusions.machine_speed(group) is None
