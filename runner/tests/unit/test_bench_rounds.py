"""`lab bench`'s summary of its rounds, from rounds made here."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from ktor_lab.cases import Case


def test_rounds_give_medians_and_the_ratio_to_the_minimal_proxy_within_each_round_with_its_interval():
    from ktor_lab.commands.bench import BenchWindow, summarize

    def run(n, target, rps, cpu):
        return BenchWindow(
            target, n, rps=rps, p50_us=1000, p99_us=5000, requests=rps * 10, warmup_s=30, warmup_settled=True,
            cpu_ms_per_request=cpu,
        )  # fmt: skip

    rounds = []
    # The machine drifts between rounds (round 2 is 50% dearer for everything): the ratio within
    # a round stays 1.10, the ratio of the medians would not.
    for n, drift in ((1, 1.0), (2, 1.5), (3, 1.0)):
        rounds += [
            run(n, "nginx proxy_pass", 40000, None),
            run(n, "singleton-cio", 2000, 0.66 * drift),
            run(n, "plain cio", 2200, 0.50 * drift),
            run(n, "plain-limits cio", 2100, 0.60 * drift),
            run(n, "plain-limits streamed cio", 2050, 0.55 * drift),
        ]
    third = next(r for r in rounds if (r.round, r.target) == (3, "singleton-cio"))
    third.cpu_ms_per_request = 0.72  # round 3: 1.20 against plain-limits
    rows = {r.target: r for r in summarize(rounds, [Case.parse("singleton-cio")])}
    cio = rows["singleton-cio"]
    assert cio.rounds == 3 and cio.requests == 60000 and cio.rps == pytest.approx(2000)
    limits = cio.cpu_to["plain-limits"]
    assert limits.rounds == [1.1, 1.1, 1.2]
    # the ratios' geometric mean, and its 95% interval over the rounds (Student's t on their logs)
    logs = np.log([1.1, 1.1, 1.2])
    half = stats.t.ppf(0.975, 2) * logs.std(ddof=1) / np.sqrt(3)
    assert limits.centre == pytest.approx(np.exp(logs.mean()))
    assert limits.low == pytest.approx(np.exp(logs.mean() - half))
    assert limits.high == pytest.approx(np.exp(logs.mean() + half))
    # 1.02-1.26 holds the goal's 1.15: not within it, not clearly above it
    assert cio.goal == "at 1.15x (its interval holds it)"
    assert cio.rps_to["plain-limits"].centre == pytest.approx(2000 / 2100)
    assert cio.cpu_ms_per_request == pytest.approx((0.66 * 0.99 * 0.72) ** (1 / 3))  # their geometric mean
    assert cio.cpu_to["plain-limits streamed"].rounds == [1.2, 1.2, 1.309]
    assert cio.cpu_to["plain-limits streamed"].centre == pytest.approx((1.2 * 1.2 * 0.72 / 0.55) ** (1 / 3))
    assert cio.cpu_to["plain"].centre == pytest.approx((1.32 * 1.32 * 1.44) ** (1 / 3))
    assert cio.rps_to["plain"].centre == pytest.approx(2000 / 2200)
    assert rows["plain cio"].goal is None  # a reference is not the lab's proxy
    assert rows["plain-limits cio"].cpu_to["plain-limits"].centre is None
    assert rows["nginx proxy_pass"].ratio_to_proxy_pass == 1.0
    # A reference against the others: the plain client's cost of the lab's limits.
    assert rows["plain-limits cio"].cpu_to["plain"].centre == pytest.approx(1.2)
    assert rows["plain-limits streamed cio"].cpu_to["plain-limits streamed"].centre is None


def test_the_ladder_s_rungs_are_judged_against_its_first_rung_within_each_round():
    from ktor_lab.commands.bench import LADDER, BenchWindow, rung_target, summarize

    rounds = [BenchWindow("nginx proxy_pass", 1, rps=40000, p50_us=1, p99_us=1, requests=1, warmup_s=1)]
    for i, (rung, _) in enumerate(LADDER):
        cost = 0.5 * (1 + 0.1 * i)
        rounds.append(
            replace(rounds[0], target=rung_target("okhttp", rung), cpu_ms_per_request=cost, rps=1000 / cost)
        )
    rows = {r.target: r for r in summarize(rounds, [Case.parse("singleton-okhttp")], ladder=True)}
    base = [rung for rung, _ in LADDER].index("plain-limits")
    assert rows["lab proxy okhttp"].cpu_to["plain-limits"].centre == pytest.approx(
        (1 + 0.1 * (len(LADDER) - 1)) / (1 + 0.1 * base)
    )
    assert rows["+ streaming okhttp"].rps_to["plain-limits"].centre == pytest.approx(
        (1 + 0.1 * base) / (1 + 0.1 * (base + 1))
    )
    assert rows["plain okhttp"].cpu_to["plain-limits"].centre == pytest.approx(1 / (1 + 0.1 * base))
    assert LADDER[0][0] == "plain" and LADDER[-1][0] == "lab proxy"
    assert rows["+ streaming okhttp"].below == "plain-limits okhttp"
    assert rows["+ streaming okhttp"].cpu_to_below.centre == pytest.approx(
        (1 + 0.1 * (base + 1)) / (1 + 0.1 * base)
    )
    assert rows["+ streaming okhttp"].cpu_to_below.p is None  # one round: nothing to test with


def test_each_rung_is_tested_against_the_one_below_and_an_engine_s_ladder_is_one_family():
    """Five rounds that drift together: a rung 30% dearer than the one below is named, with an
    interval that holds 1.30 and excludes 1; a rung that adds nothing is not, and the p values of
    the ladder are adjusted together (its family is its number of comparisons)."""
    from ktor_lab.commands.bench import BenchWindow, rung_target, summarize

    rng = np.random.default_rng(3)
    costs = {"plain-limits": 0.5, "+ streaming": 0.65, "+ metrics": 0.65, "lab proxy": 0.65}
    rounds = []
    for n in range(1, 6):
        drift = float(rng.uniform(0.8, 1.3))
        rounds.append(BenchWindow("nginx proxy_pass", n, rps=40000, p50_us=1, p99_us=1, requests=1))
        for rung, cost in costs.items():
            cpu = cost * drift * float(rng.normal(1, 0.02))
            rounds.append(
                replace(rounds[-1], target=rung_target("apache5", rung), cpu_ms_per_request=cpu, rps=1 / cpu)
            )
    rows = {r.target: r for r in summarize(rounds, [Case.parse("singleton-apache5")], ladder=True)}
    streaming, metrics = rows["+ streaming apache5"].cpu_to_below, rows["+ metrics apache5"].cpu_to_below
    assert streaming.family == 3 and streaming.p < 0.05
    assert 1 < streaming.low < 1.3 < streaming.high
    assert metrics.p >= 0.05 and metrics.words.startswith("no clear difference")
    assert rows["lab proxy apache5"].goal == "above 1.15x"
    assert rows["lab proxy apache5"].capacity == "below 0.9x"  # its rate: 0.5 / 0.65 of plain-limits'
    assert rows["plain-limits apache5"].below is None


def test_a_sample_is_charged_to_the_first_frame_of_known_code_below_the_jdk_s():
    from ktor_lab.parts.jfr import owner

    assert owner(["sun.nio.ch.Net.poll", "io.netty.channel.epoll.Native.epollWait"]) == "netty"
    assert owner(["java.util.HashMap.get", "lab.proxy.ForwardedHeaders.toUpstream", "io.ktor.x"]) == "lab"
    # Each engine's own code is the engine's (cases.ENGINE_PACKAGES), the JDK's HTTP client too.
    assert owner(["okio.AsyncTimeout.enter", "okhttp3.internal.RealCall.execute"]) == "okhttp"
    assert (
        owner(["sun.nio.ch.Net.poll", "jdk.internal.net.http.HttpClientImpl$SelectorManager.run"]) == "java"
    )
    assert owner(["io.ktor.client.engine.cio.Endpoint.execute", "io.ktor.client.HttpClient.x"]) == "cio"
    assert owner(["java.lang.Thread.run"]) == "jdk"
    assert owner(
        ["jdk.internal.misc.Unsafe.park", "kotlinx.coroutines.scheduling.CoroutineScheduler.run"]
    ) == ("kotlinx.coroutines")


def test_the_bench_groups_its_jvms_per_engine_and_takes_the_rungs_it_is_given():
    from ktor_lab.commands.bench import LAB_PROXY, groups, ladder_rungs
    from ktor_lab.errors import LabError

    cases = [Case.parse(c) for c in ("singleton-cio", "per-call-java", "per-call-cio")]
    plain = groups(cases, ladder=False, rungs=[])
    assert [[name for name, _, _ in g] for g in plain] == [
        ["singleton-cio", "per-call-cio", "plain cio", "plain-limits cio", "plain-limits streamed cio"],
        ["per-call-java", "plain java", "plain-limits java", "plain-limits streamed java"],
    ]
    rungs = ladder_rungs("lab-proxy, streaming,plain-limits")  # the ladder's order, whatever the given one
    ladder = groups(cases, ladder=True, rungs=rungs)
    assert [[name for name, _, _ in g] for g in ladder] == [
        ["plain-limits cio", "+ streaming cio", "lab proxy cio"],
        ["plain-limits java", "+ streaming java", "lab proxy java"],
    ]
    assert ladder[0][-1][2] is LAB_PROXY and ladder[0][0][1].name == "singleton-cio"
    with pytest.raises(LabError, match="'stream' is not a rung; give some of plain, plain-limits, streaming"):
        ladder_rungs("stream")


def test_the_lab_client_splits_into_its_parts_one_more_a_rung_outside_the_default_ladder():
    """`--rungs client-limits,client-flags,client-engine` climbs from streaming to `+ lab client`
    one ClientPart at a time (lean-proxy's LEAN_PARTS), each judged like any rung."""
    from ktor_lab.commands.bench import (
        DEFAULT_RUNGS,
        LADDER,
        RUNGS,
        SPLIT_RUNGS,
        _engine_of_rung,
        ladder_rungs,
    )

    names = list(RUNGS)
    assert names.index("streaming") < names.index("client-limits") < names.index("client-flags")
    assert names.index("client-flags") < names.index("client-engine") < names.index("lab-client")
    parts = [RUNGS[n][1]["LEAN_PARTS"].split(",") for n in SPLIT_RUNGS]
    assert parts == [["limits"], ["limits", "flags"], ["limits", "flags", "engine"]]
    # each a lab client streaming, as `+ lab client` (every part) is
    assert all(
        {k: v for k, v in RUNGS[n][1].items() if k != "LEAN_PARTS"} == RUNGS["lab-client"][1]
        for n in SPLIT_RUNGS
    )
    assert not set(SPLIT_RUNGS) & set(DEFAULT_RUNGS) and len(LADDER) == len(RUNGS) - len(SPLIT_RUNGS)
    picked = ladder_rungs("lab-client,client-engine,plain-limits,client-limits")
    assert [rung for rung, _ in picked] == [
        "plain-limits",
        "+ lab client: limits",
        "+ lab client: limits, flags, engine",
        "+ lab client",
    ]
    assert _engine_of_rung("+ lab client: limits, flags okhttp") == "okhttp"


def test_a_report_of_a_folder_without_a_bench_run_says_what_to_give(tmp_path):
    from ktor_lab.commands.bench import write_again as report
    from ktor_lab.errors import LabError

    with pytest.raises(LabError, match=r"^--report .*: give a folder with a lab bench run's bench.json"):
        report(str(tmp_path))
    (tmp_path / "bench.json").write_text("{}")
    with pytest.raises(LabError, match="give a folder with a lab bench run's bench.json"):
        report(str(tmp_path))


@pytest.mark.parametrize(
    ("rates", "verdict"),
    [
        ([0.99, 1.0, 1.01], "at least 0.9x"),  # the interval's low end above 0.9
        ([0.8, 0.95, 1.0], "at 0.9x (its interval holds it)"),
        ([0.8, 0.81, 0.82], "below 0.9x"),
    ],
)
def test_the_lab_proxy_s_rate_is_judged_against_0_9x_plain_limits_by_its_interval(rates, verdict):
    """lab bench's capacity goal: the lab proxy's rate over plain-limits', round by round."""
    from ktor_lab.commands.bench import BenchWindow, rung_target, summarize

    rounds = []
    for n, share in enumerate(rates, 1):
        rounds.append(BenchWindow("nginx proxy_pass", n, rps=40000, p50_us=1, p99_us=1, requests=1))
        for rung, rps in (("plain-limits", 5000), ("lab proxy", 5000 * share)):
            target = rung_target("okhttp", rung)
            rounds.append(replace(rounds[-1], target=target, rps=rps, cpu_ms_per_request=0.3))
    rows = {r.target: r for r in summarize(rounds, [Case.parse("singleton-okhttp")], ladder=True)}
    assert rows["lab proxy okhttp"].capacity == verdict
