"""The warm-up rule (warmup.py) with a scripted load, and the JIT clock on a fake /proc."""

from __future__ import annotations

import os
from pathlib import Path

from ktor_lab import verdict, warmup
from ktor_lab.cases import Case
from ktor_lab.measure import answered_rate
from ktor_lab.plan import WARM_FIRST_SCENARIO, Spec, parse_load
from ktor_lab.results import Run
from ktor_lab.warmup import JIT_NICE, WINDOW_S, JitClock, warm_up


def scripted(rates: list[float]):
    calls = iter(rates)
    return lambda seconds: next(calls)


def test_warm_once_two_windows_agree():
    w = warm_up(scripted([100, 200, 300, 310, 900]), 120, os.getpid())  # a process without a JIT
    assert (w.settled, w.seconds) == (True, 4 * WINDOW_S)
    assert w.window_rates == [100, 200, 300, 310]
    assert w.window_jit_s == [0, 0, 0, 0] and w.jvm_visible


def test_a_load_that_completes_in_waves_is_warm_once_it_repeats_every_two_windows():
    # 100 users on /slow (2 s each), as measured on 2026-11-26: 2 and 3 waves in turn per 5 s window;
    # no two windows in a row agree
    w = warm_up(scripted([39.9, 59.9, 40.0, 59.9, 39.9, 59.9]), 60)
    assert (w.settled, w.seconds) == (True, 4 * WINDOW_S)
    # a climb is no wave, nor is noise whose pairs happen to sum alike (560+590 against 550+650)
    w = warm_up(scripted([100, 200, 300, 400, 500, 600]), 30)
    assert (w.settled, w.seconds) == (False, 30)
    w = warm_up(scripted([560, 590, 550, 650, 500, 700]), 30)
    assert (w.settled, w.seconds) == (False, 30)


def test_still_climbing_at_the_limit_is_not_warm():
    w = warm_up(scripted([100, 200, 300, 400, 500]), 20)
    assert (w.settled, w.seconds, w.window_rates) == (False, 20, [100, 200, 300, 400])
    assert w.window_jit_s == [] and not w.jvm_visible


def test_a_proxy_that_stops_answering_ends_its_warm_up_not_warm():
    # per-call Java at 50 users, as measured: climbs, then serves almost nothing
    rates = [250, 410, 460, 560, 590, 550, 650, 53, 18, 21, 15, 0, 14, 500, 380]
    w = warm_up(scripted(rates), 150)
    assert (w.settled, w.collapsed, w.seconds) == (False, True, 11 * WINDOW_S)
    assert w.window_rates == rates[:11]
    # as the default run of 2026-11-25 saw it: the last two windows of nothing agree within 5%
    rates = [560, 610, 660, 760, 416, 30, 26, 22, 22]
    w = warm_up(scripted(rates), 150)
    assert (w.settled, w.collapsed, w.seconds) == (False, True, 9 * WINDOW_S)


def test_a_dip_shorter_than_the_rule_or_a_slow_start_is_not_a_collapse():
    w = warm_up(scripted([5, 8, 300, 20, 15, 12, 290, 300]), 150)  # three low windows, then back
    assert (w.settled, w.collapsed, w.seconds) == (True, False, 8 * WINDOW_S)
    w = warm_up(scripted([0, 0, 0, 0, 0, 0, 0]), 35)  # nothing answered from the start: no best to fall from
    assert (w.settled, w.collapsed, w.seconds) == (False, False, 35)


def test_windows_of_nothing_that_agree_do_not_settle_a_warm_up():
    # per-call Java in the default run of docs/matrix-runs/default: 930 rps at capacity, then at
    # rate/400 12-15 rps from the first window; it "settled" there, at 3% of its target
    rates = [15.0, 5.2, 11.2, 7.2, 12.0, 11.4, 11.6]
    w = warm_up(scripted(rates), 60, expected=400)
    assert (w.settled, w.collapsed, w.seconds) == (False, True, 4 * WINDOW_S)
    assert w.end == "stopped answering"
    w = warm_up(scripted([14.0, 13.0, 12.6, 12.8]), 60, expected=400)
    assert (w.settled, w.collapsed, w.seconds) == (False, True, 4 * WINDOW_S)
    # and its windows say what it fell from
    load = parse_load("rate/400/40")
    run = Run(
        case="per-call-java",
        engine="java",
        lifetime="per-call",
        scenario=WARM_FIRST_SCENARIO,
        load=load,
        repeat=1,
        warmup=w,
    )
    (why,) = [why for flag, why in verdict.warmth_flags(run) if flag == "not-warm"]
    assert "under 10% of its best, or of the 400 rps it answered at capacity, for 20 s" in why, why
    # unknown what it answers at: as before, a best of its own is needed to fall from
    w = warm_up(scripted([14.0, 13.0, 12.6]), 60)
    assert (w.settled, w.collapsed, w.seconds) == (True, False, 3 * WINDOW_S)
    # within one warm-up: a fall to nothing whose windows agree is no settling either
    w = warm_up(scripted([300, 600, 800, 40, 20, 20, 20, 20, 20]), 60)
    assert (w.settled, w.collapsed, w.window_rates) == (False, True, [300, 600, 800, 40, 20, 20, 20])


def test_a_proxy_at_its_expected_rate_or_somewhat_under_it_settles():
    # at its target, or a steady 60% of it (capacity below the rate: the verdict flags the
    # windows short of the target, the warm-up is still over)
    assert warm_up(scripted([380, 400, 401]), 60, expected=400).seconds == 3 * WINDOW_S
    w = warm_up(scripted([200, 240, 241]), 60, expected=400)
    assert (w.settled, w.collapsed, w.expected) == (True, False, 400)
    # the line is 10% of what it answered: 44 rps of 400 settles, 36 does not
    w = warm_up(scripted([50, 44, 44]), 60, expected=400)
    assert (w.settled, w.collapsed, w.seconds) == (True, False, 3 * WINDOW_S)
    w = warm_up(scripted([37, 36, 36, 36, 36]), 60, expected=400)
    assert (w.settled, w.collapsed, w.seconds) == (False, True, 4 * WINDOW_S)
    # a slow start that climbs back within four windows is no collapse
    w = warm_up(scripted([20, 30, 390, 400, 401]), 60, expected=400)
    assert (w.settled, w.collapsed, w.seconds) == (True, False, 4 * WINDOW_S)


def test_the_rate_expected_of_a_proxy_is_its_target_or_its_best_at_capacity_on_that_scenario():
    first = warmup.Warmup(window_rates=[300.0, 930.0, 410.0])

    def spec(scenario: str, load: str) -> Spec:
        return Spec(1, Case.parse("per-call-java"), scenario, parse_load(load))

    assert answered_rate(first, spec(WARM_FIRST_SCENARIO, "rate/400/40")) == 400
    assert answered_rate(first, spec(WARM_FIRST_SCENARIO, "rate/5000/40")) == 930
    assert answered_rate(None, spec(WARM_FIRST_SCENARIO, "rate/400/40")) == 0
    assert answered_rate(first, spec("static-large", "rate/400/40")) == 0  # another scenario
    assert answered_rate(first, spec(WARM_FIRST_SCENARIO, "closed/50/1-2")) == 0  # no target


def compiler_thread(proc: Path, tid: int, name: str, ticks: int) -> None:
    task = proc / "4242" / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "comm").write_text(name + "\n")
    # /proc/PID/task/TID/stat: utime and stime are the 14th and 15th fields
    (task / "stat").write_text(f"{tid} ({name}) S " + " ".join(["0"] * 10) + f" {ticks} 0 0 0\n")


def test_a_compiler_thread_that_ends_does_not_make_jit_time_run_back(tmp_path: Path):
    hz = os.sysconf("SC_CLK_TCK")
    compiler_thread(tmp_path, 10, "C2 CompilerThre", 5 * hz)
    compiler_thread(tmp_path, 11, "C1 CompilerThre", 1 * hz)
    compiler_thread(tmp_path, 12, "VM Thread", 50 * hz)  # not a compiler
    clock = JitClock(4242, tmp_path)
    compiler_thread(tmp_path, 10, "C2 CompilerThre", 7 * hz)
    assert clock.lap() == 2.0
    # the JVM ends an idle compiler thread (5+2 s gone from the sum) and starts another
    for f in (tmp_path / "4242" / "task" / "10").iterdir():
        f.unlink()
    (tmp_path / "4242" / "task" / "10").rmdir()
    compiler_thread(tmp_path, 13, "C2 CompilerThre", 1 * hz)
    assert clock.lap() == 1.0
    assert clock.lap() == 0.0


def test_a_fake_proc_is_never_reniced(tmp_path: Path):
    compiler_thread(tmp_path, 1, "C2 CompilerThre", 0)  # PID 1's own thread ID, in a fake /proc
    assert JitClock(4242, tmp_path).prioritize(JIT_NICE) is False


def test_the_warm_up_waits_for_a_quiet_jit_not_only_for_one_a_window_may_keep(tmp_path: Path):
    """Rates that agree from the start; the JIT's CPU per 5 s window scripted on a fake /proc: the
    warm-up ends at the first window whose JIT is under JIT_QUIET_SHARE of a core, and not at one
    under the share a measured window may have and be kept (JIT_WINDOW_SHARE): the JIT still
    finishing there leaves the next windows dearer per request (warmup.py)."""
    quiet, kept = warmup.JIT_QUIET_SHARE, verdict.JIT_WINDOW_SHARE
    assert quiet < kept
    busy, windowish, still = 2 * kept * WINDOW_S, 0.8 * kept * WINDOW_S, 0.4 * quiet * WINDOW_S
    for script, ends in (
        ([busy, windowish, windowish, still], 4),
        ([busy, still, 0, 0], 2),
        ([busy, windowish, windowish, windowish], None),
    ):
        compiler_thread(tmp_path, 10, "C2 CompilerThre", 0)
        w = warm_up(jit_scripted(tmp_path, script), 4 * WINDOW_S, jit=JitClock(4242, tmp_path))
        assert (w.settled, w.seconds) == ((ends is not None), (ends or 4) * WINDOW_S), (script, w)
        assert w.window_jit_s == [round(x, 2) for x in script[: ends or 4]]
        assert w.jit_quiet_share == quiet


def jit_scripted(proc: Path, script: list[float]):
    """A load at 400 rps a window whose compiler thread (a fake /proc's) uses `script`'s seconds in
    turn."""
    hz = os.sysconf("SC_CLK_TCK")
    used, total = iter(script), [0.0]

    def window(seconds: int) -> float:
        total[0] += next(used)
        compiler_thread(proc, 10, "C2 CompilerThre", round(total[0] * hz))
        return 400.0

    return window
