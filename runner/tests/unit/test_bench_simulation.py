"""`lab bench`'s decision rules, checked by simulating them: the real summary code
(bench.summarize, as `lab bench` and `lab bench --report` call it) on rounds drawn here.

A draw: a number of rounds of the default ladder for one engine, each rung's CPU per request and
switches per request its true cost times a log-normal noise of its own. The noise is what the kept
runs' ratios within a round showed (docs/bench-runs/): the logarithms of a ratio spread by 0.02 for
switches and about 0.10 for CPU per request in the middle of their rungs (0.03-0.35 over all),
which is sqrt(2) times the noise of one measurement. A ratio is taken within a round, so what moves
a whole round cancels and is not drawn; a drift that repeats by position within every round (the
rungs run in the same order each round) would not cancel, and is not modelled here. Seeded; each
test runs in seconds and prints its rate.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ktor_lab.cases import Case
from ktor_lab.commands import bench

ENGINE = "apache5"
CASE = Case.parse(f"singleton-{ENGINE}")
RUNGS = [name for name, _ in bench.LADDER]
# One measurement's noise (log-normal sigma): a ratio's, the median the kept runs showed (0.02 for
# switches, 0.10 for CPU per request), over sqrt(2); and CPU's at the noisiest rungs (OkHttp's, 0.35).
SWITCH_NOISE = 0.014
CPU_NOISE = 0.07
CPU_NOISE_WORST = 0.25


def draw(
    rng: np.random.Generator,
    rounds: int,
    steps: dict[str, float],
    cpu_noise: float = CPU_NOISE,
    rungs: list[str] = RUNGS,
) -> list[bench.BenchWindow]:
    """One bench run's rounds of `rungs`: every rung costs 1 (in CPU and switches) times the steps of
    the rungs up to it on its line (`steps[rung]` the factor a rung adds; a side rung's does not
    carry on)."""
    out = []
    for n in range(1, rounds + 1):
        nginx = bench.BenchWindow("nginx proxy_pass", n, requests=1, p50_us=1, p99_us=1, rps=40000)
        out.append(nginx)
        level = 1.0
        for rung in rungs:
            cost = level * steps.get(rung, 1.0)
            if rung not in bench.SIDE_RUNGS:
                level = cost
            cpu = cost * math.exp(rng.normal(0, cpu_noise))
            switches = cost * math.exp(rng.normal(0, SWITCH_NOISE))
            out.append(
                replace(
                    nginx,
                    target=bench.rung_target(ENGINE, rung),
                    cpu_ms_per_request=cpu,
                    rps=1 / cpu,
                    switches_per_request=switches,
                )
            )
    return out


def named(rows: list[bench.BenchRow], key: str) -> set[str]:
    """The rungs a bench.md would name as differing from the one below on `key` (cpu, switches)."""
    return {
        r.target.removesuffix(f" {ENGINE}")
        for r in rows
        if (below := getattr(r, f"{key}_to_below")) and below.words and not below.words.startswith("no clear")
    }


def rates(
    seed: int, draws: int, rounds: int, steps: dict[str, float], hits: dict, cpu_noise: float = CPU_NOISE
) -> dict[str, float]:
    """Per figure (`hits`: its key, and what counts as a hit among the rungs named in it), the share
    of `draws` runs that hit, all read off the same runs (a summary serves every figure)."""
    rng = np.random.default_rng(seed)
    found = dict.fromkeys(hits, 0)
    for _ in range(draws):
        rows = bench.summarize(draw(rng, rounds, steps, cpu_noise), [CASE], ladder=True)
        for key, hit in hits.items():
            found[key] += bool(hit(named(rows, key)))
    return {key: n / draws for key, n in found.items()}


def rate(
    seed: int, draws: int, rounds: int, steps: dict[str, float], key: str, hit, cpu_noise: float = CPU_NOISE
) -> float:
    return rates(seed, draws, rounds, steps, {key: hit}, cpu_noise)[key]


def check_flat_ladder(draws: int, bound: float) -> None:
    """Every rung costs what the one below does: in each figure's family (an engine's rungs), a
    difference is named in about 5% of runs, at 4 rounds and at 6 (4.6-6.5% over 1,500 draws each;
    adjacent rungs share a measurement, so Benjamini-Hochberg's 5% holds only about): at most
    `bound` of `draws`."""
    for rounds in (4, 6):
        both = rates(rounds, draws, rounds, {}, {"cpu": bool, "switches": bool})
        for key, found in both.items():
            print(f"flat ladder, {rounds} rounds, {key}: a rung named in {found:.1%} of {draws} runs")
            assert found <= bound, (rounds, key, found)


def test_on_a_flat_ladder_a_rung_is_rarely_named():
    """The twin of runner/tests/test_simulations.py's (300 draws, 8%): 100 draws, at most 12%."""
    check_flat_ladder(100, 0.12)


def check_step_found(draws: int) -> None:
    """One rung 15% dearer in switches (the forwarder's step was -14.5% and -17.4%): how often the
    bench names it and no other rung, printed; at 4 rounds (the client run's) at least 80% of
    `draws` runs. A side rung's step (HttpTimeout's, +33% in the kept runs) is named, and the rung
    after it, set against the rung below the side rung, is not."""
    step = {"+ metrics": 1.15}
    for rounds in (4, 6):
        found = rate(10 + rounds, draws, rounds, step, "switches", lambda n: n == {"+ metrics"})
        print(f"a 15% step in switches, {rounds} rounds: named, alone, in {found:.0%} of {draws} runs")
        assert found >= 0.8, (rounds, found)
    side = bench.SIDE_RUNGS[0]
    found = rate(30, draws, 4, {side: 1.33}, "switches", lambda n: n == {side})
    print(f"a 33% step on the side rung, 4 rounds: named, alone, in {found:.0%} of {draws} runs")
    assert found >= 0.8, found


def check_cpu_step_found_less_often(draws: int) -> None:
    """CPU per request moves more between rounds than switches do: a 15% step, named in switches in
    nearly every run above, is found in CPU less often at the median noise, and a 30% one at the
    noisiest rungs' noise far less often than at the median's (printed), over `draws` runs each."""
    step = {"+ metrics": 1.15}
    hit = lambda n: "+ metrics" in n  # noqa: E731
    cpu, switches = rates(40, draws, 4, step, {"cpu": hit, "switches": hit}).values()
    print(f"a 15% step, 4 rounds: named in CPU in {cpu:.0%} of runs, in switches in {switches:.0%}")
    assert cpu < switches
    step = {"+ metrics": 1.3}
    median = rate(41, draws, 6, step, "cpu", lambda n: "+ metrics" in n)
    worst = rate(41, draws, 6, step, "cpu", lambda n: "+ metrics" in n, cpu_noise=CPU_NOISE_WORST)
    print(
        f"a 30% step in CPU, 6 rounds: named in {median:.0%} of runs (median noise), {worst:.0%} (noisiest)"
    )
    assert median >= 0.8 and worst < median


def test_a_step_of_the_size_the_kept_runs_named_is_found_and_no_other():
    """The twin of runner/tests/test_simulations.py's (200 draws): 60, which read a rate of 90%
    within about 8% (two standard errors), above the 80% bound."""
    check_step_found(60)


def test_a_cpu_step_needs_to_be_larger_than_a_switch_step_to_be_found():
    """The twin of runner/tests/test_simulations.py's (200 draws): 60 (a rate read within about 8%)."""
    check_cpu_step_found_less_often(60)


def goal_rate(seed: int, draws: int, ratio: float, verdict: str, goal: str = "goal") -> float:
    """How often the lab proxy's verdict `goal` (CPU's `goal`, or the rate's `capacity`) starts with
    `verdict` when its CPU per request is `ratio` times plain-limits' (its rate 1 / `ratio` times),
    at the median noise, in 6 rounds of the two (the rungs between them change neither verdict)."""
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(draws):
        rounds = draw(rng, 6, {"lab proxy": ratio}, rungs=["plain-limits", "lab proxy"])
        rows = bench.summarize(rounds, [CASE], ladder=True)
        (proxy,) = [r for r in rows if r.target == bench.rung_target(ENGINE, "lab proxy")]
        found += (getattr(proxy, goal) or "").startswith(verdict)
    return found / draws


def check_goal_verdict(draws: int, bound: float) -> None:
    """The lab's proxy exactly at the goal (1.15x plain-limits' CPU per request): `within` and
    `above` are each said in at most 2.5% of runs (a 95% interval's two tails): at most `bound` of
    `draws`; at 1.0x it is never `above`, and at 1.6x `above` in most runs (printed). The same of
    the capacity verdict at its goal (0.9x plain-limits' rate): `at least` and `below`; at 1.0x it is
    never `below` and `at least` in about half the runs, at 1.1x in most."""
    for verdict in ("within", "above"):
        found = goal_rate(20, draws, bench.GOAL, verdict)
        print(f"the proxy at {bench.GOAL}x: '{verdict}' in {found:.1%} of {draws} runs")
        assert found <= bound, (verdict, found)
    assert goal_rate(21, draws, 1.0, "above") <= 0.02
    print(f"the proxy at 1.0x: 'within' in {goal_rate(22, draws, 1.0, 'within'):.0%} of runs")
    above = goal_rate(23, draws, 1.6, "above")
    print(f"the proxy at 1.6x: 'above' in {above:.0%} of runs")
    assert above >= 0.8, above
    for verdict in ("at least", "below"):
        found = goal_rate(24, draws, 1 / bench.CAPACITY_GOAL, verdict, "capacity")
        print(f"the proxy at {bench.CAPACITY_GOAL}x the rate: '{verdict}' in {found:.1%} of {draws} runs")
        assert found <= bound, (verdict, found)
    assert goal_rate(25, draws, 1.0, "below", "capacity") <= 0.02
    kept = goal_rate(26, draws, 1.0, "at least", "capacity")
    print(f"the proxy at 1.0x the rate: 'at least {bench.CAPACITY_GOAL}x' in {kept:.0%} of runs")
    assert kept >= 0.4, kept
    kept = goal_rate(27, draws, 1 / 1.1, "at least", "capacity")
    print(f"the proxy at 1.1x the rate: 'at least {bench.CAPACITY_GOAL}x' in {kept:.0%} of runs")
    assert kept >= 0.8, kept


def test_the_goal_verdict_is_rarely_wrong_either_way():
    """The twin of runner/tests/test_simulations.py's (300 draws, 5%): 100 draws, at most 8%."""
    check_goal_verdict(100, 0.08)
