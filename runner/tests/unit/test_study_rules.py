"""The studies without any part: their doc pages and charts, and each study with a runner of its
own, its tables from rows made here (the runs themselves: test_studies.py; the studies made of
`lab run` parts: test_plan_studies.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ktor_lab import render
from ktor_lab.cases import Case
from ktor_lab.paths import REPO
from ktor_lab.studies import STUDIES, plans


def test_every_study_has_a_doc_page_that_names_its_command():
    for name in STUDIES:
        page = REPO / "docs" / "studies" / f"{name}.md"
        assert page.exists(), f"{page} is missing"
        text = page.read_text()
        assert f"lab study {name}" in text
        for img in re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", text):
            ET.parse(page.parent / img)


def test_grouped_bars_scale_to_the_largest_value():
    svg = render.bars("t", ["a", "b"], {"x": [10.0, 5.0], "y": [None, 2.5]})
    root = ET.fromstring(svg)
    rects = root.iter("{http://www.w3.org/2000/svg}rect")
    bars = [r for r in rects if r.get("x") == "150" and r.get("height") == "16"]  # not the legend's squares
    assert [float(r.get("width")) for r in bars] == [440.0, 220.0, 110.0]
    assert "n/a" in svg


def options(study: str, *argv: str):
    """A study with a runner of its own: its options as parsed."""
    import argparse

    p = argparse.ArgumentParser()
    STUDIES[study].add_options(p)
    return p.parse_args(list(argv))


def test_each_studys_plan_checks_its_options_before_anything_starts():
    import pytest

    with pytest.raises(ValueError, match="unknown engine 'netty'"):
        STUDIES["threads"].plan(options("threads", "--engines", "cio,netty"))
    with pytest.raises(ValueError, match="unknown fault 'fire'"):
        STUDIES["faults"].plan(options("faults", "--faults", "fire"))
    assert [
        (b.engine, b.limits, b.n)
        for b in STUDIES["threads"].plan(options("threads", "--engines", "cio", "--n", "1,2"))
    ] == [
        ("cio", "defaults", 1),
        ("cio", "defaults", 2),
        ("cio", "fair", 1),
        ("cio", "fair", 2),
    ]
    setups = STUDIES["faults"].plan(options("faults", "--engines", "java", "--settings", "lab"))
    assert [(s.case.id, s.settings) for s in setups] == [("singleton-java", "lab"), ("per-call-java", "lab")]


def test_a_burst_answered_in_full_is_finished_even_with_errors():
    """CIO's defaults with a 5 s connect timeout answered 200 of 500 with 504 within 7 s: the burst
    finished then, with its errors, not "> 120 s (300 of 500 done)"."""
    from ktor_lab.studies.threads import answers

    full = answers([(200, 2.1)] * 3 + [(504, 5.0)] * 2, 2000)
    assert (full["finished"], full["completion_s"], full["ok"], full["failed"]) == (True, 5.0, 3, 2)
    assert full["statuses"] == [200, 504] and full["waves"] == 1
    cut = answers([(200, 2.1), TimeoutError()], 2000)
    assert (cut["finished"], cut["unfinished"], cut["completion_s"]) == (False, 1, 2.1)


def test_threads_rows_make_one_table_per_kind_of_limits():
    from ktor_lab.studies import machinery
    from ktor_lab.studies.threads import BurstRow

    def row(engine, limits, finished=True):
        return BurstRow(
            engine, limits, 10, 10 if finished else 4, 0, 0 if finished else 6, [200], finished,
            0.8 if finished else None, 2, 40.0, 20.0, 0.2, 50.0, 25.0, 10.0, 5.0, 52.0, 10.0,
        )  # fmt: skip

    # Every request answered, 6 of them with an error (a 504 from a connect timeout): finished, at
    # the last answer's time, the errors in their own column; not "4 of 10 done".
    failing = BurstRow(
        "apache", "defaults", 10, 4, 6, 0, [200, 504], True, 0.7, 1, 40.0, 20.0, 0.2, 50.0, 25.0,
        10.0, 5.0, 52.0, 10.0,
    )  # fmt: skip
    rows = [row("cio", "defaults"), row("okhttp", "defaults", finished=False), failing, row("cio", "fair")]
    report = STUDIES["threads"].report(rows, options("threads", "--sample-at", "0.2"))
    assert [h for h, _ in report.tables] == ["defaults limits", "fair limits"]
    defaults = table_rows_of(report.tables[0][1])
    assert defaults[1][6] == "> 10 (4 of 10 done)"
    assert (defaults[2][6], defaults[2][8]) == ("0.7", "6")
    assert len(report.charts) == 4 and machinery.plain(rows[0])["proxy_settings"] == {}


def test_faults_rows_make_a_summary_a_matrix_and_times():
    from ktor_lab.cases import Case
    from ktor_lab.studies.faults import BY_NAME, Gauges, Probe, Setup, Trial

    probe = Probe(Setup(Case("singleton", "okhttp"), "lab"), Gauges(30, 40), {"retry_on_stale": "on"})
    rows = [
        probe.row(BY_NAME["short-fixed"], [Trial("502", "200 whole", 3.0, 5.0)] * 2, Gauges(31, 41)),
        probe.row(
            BY_NAME["cut-chunked"],
            [Trial("200 whole", "200 whole", 4.0, 6.0, passed_whole=True), Trial("200 cut", "502", 4.0, 9.0)],
            Gauges(32, 40),
        ),
    ]
    assert (rows[0].caller, rows[0].repeats, rows[0].threads_added) == ("502 x2", 2, 1)
    assert rows[1].passed_whole == 1 and rows[1].next_failed == 1 and rows[1].clean_ms == 7.5
    report = STUDIES["faults"].report(rows, options("faults", "--faults", "short-fixed,cut-chunked"))
    assert [h for h, _ in report.tables] == ["Summary", "What the caller got, per fault", "Times"]
    summary, matrix = (table_rows_of(md) for _, md in report.tables[:2])
    assert summary == [["singleton-okhttp", "lab", "on", "1", "1", "8", "2", "1"]]
    assert matrix == [
        ["singleton-okhttp", "lab", "502 x2", "**200 whole x1, 200 cut x1**; next: 200 whole x1, 502 x1"]
    ]


def test_streaming_rows_are_set_beside_nginx_direct():
    from ktor_lab.studies.streaming import DIRECT, Transfer, TransferRow

    def row(target, rate):
        t = Transfer(1.0, rate, True, None, None)
        return TransferRow(target, "1m", 1 << 20, "download", [t], rate, rate, rate, True, None, None)

    rows = [row(DIRECT, 400.0), row("cio", 100.0)]
    report = STUDIES["streaming"].report(rows, options("streaming", "--sizes", "1m"))
    assert rows[1].of_direct == 0.25
    assert [h for h, _ in report.tables] == ["download, 1 MiB", "upload, 1 MiB"]
    assert table_rows_of(report.tables[0][1])[1][:4] == ["cio", "100.0", "100-100", "0.25"]


def table_rows_of(md: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()[2:]]


def test_make_studies_runs_every_study_with_a_runner_of_its_own():
    """The Makefile's `studies` target names the studies by hand: each must be one of the
    registry's, and only those made of lab run parts (hours each, run on their own) are left out."""
    import re

    from ktor_lab.paths import REPO

    text = (REPO / "Makefile").read_text()
    target = re.search(r"^studies:.*?\n((?:\t.*\n)+)", text, re.M)[1]
    run = re.findall(r"lab study (\w+)", target)
    assert len(run) == len(set(run)) and set(run) <= set(STUDIES), run
    assert set(STUDIES) - set(run) == {n for n, s in STUDIES.items() if isinstance(s, plans.PlanStudy)}


def test_every_study_s_dry_run_estimates_all_of_its_time():
    """Every item of every study with a runner of its own is timed with its default options (its
    `planned_seconds()`), and the last line is the sum of them all (the studies made of `lab run`
    parts: test_plan_studies.py)."""
    from ktor_lab.measure import format_seconds
    from ktor_lab.studies import dry_run_lines

    for name, study in STUDIES.items():
        if isinstance(study, plans.PlanStudy):
            continue
        items = study.plan(options(name))
        lines = dry_run_lines(items)
        assert not [line for line in lines if "not estimated" in line], (name, lines)
        total = sum(item.planned_seconds() for item in items)
        assert total > 0, name
        assert lines[-1] == f"the study: at most about {format_seconds(total)} in all", (name, lines)


def test_streaming_goes_through_each_engine_over_each_protocol_it_speaks():
    """The upload study's pair (OkHttp over h2, CIO over TLS) is the streaming study over
    protocols: h2 is skipped for CIO, which does not speak it; nginx direct stays over http."""
    given = options("streaming", "--engines", "cio,okhttp", "--protocols", "https,h2")
    targets = STUDIES["streaming"].plan(given)
    assert [t.name for t in targets] == ["nginx direct", "cio https", "okhttp https", "okhttp h2"]
    assert targets[0].case is None and targets[3].case == Case("singleton", "okhttp", protocol="h2")
    assert [t.name for t in STUDIES["streaming"].plan(options("streaming", "--engines", "cio"))] == [
        "nginx direct",
        "cio",
    ]


def test_a_benchmark_s_estimate_follows_its_parameters():
    """A non-Plan item's time comes from its own numbers, not a constant: io's JMH run doubles with
    its forks and is never past its timeout; a threads burst on the fair limit is its waves of the
    delay, on the engine's own limits its deadline."""
    from ktor_lab.studies import io, machinery, threads

    def jmh(*argv: str) -> io.Jmh:
        (run,) = STUDIES["io"].plan(options("io", *argv))
        return run

    one, two = jmh("--forks", "1").planned_seconds(), jmh("--forks", "2").planned_seconds()
    assert 1.9 < two / one < 2
    assert jmh("--iterations", "10").planned_seconds() > one
    assert jmh("--forks", "100").planned_seconds() == 1800
    bursts = {
        (b.limits, b.n): b.planned_seconds()
        for b in STUDIES["threads"].plan(options("threads", "--engines", "cio", "--n", "100,1000"))
    }
    start = machinery.PROXY_START_S + threads.IDLE_S
    assert bursts["defaults", 100] == bursts["defaults", 1000] == start + 120
    assert bursts["fair", 1000] == start + 2 + 1000 * threads.BURST_S_PER_REQUEST
    (fair,) = STUDIES["threads"].plan(
        options("threads", "--engines", "cio", "--n", "1000", "--limits", "fair", "--max-connections", "100")
    )
    assert fair.planned_seconds() == start + 10 * 2 + 1000 * threads.BURST_S_PER_REQUEST


def test_engines_runs_each_release_in_every_round_and_a_clients_only_one_without_the_lab_s_client():
    """`lab study engines --ktor 3.5.2,3.6.1 --cio-pipelining`: each client on each release, the
    releases next to each other within a round (A B A B); 3.6.1 builds no lab's client, so it runs
    the references (pipelined CIO among them) and its rows never wait for one; the ladder needs
    the lab's client and is refused on it."""
    import pytest

    given = ("--engines", "cio,okhttp", "--no-as-published", "--repeats", "2", "--cio-pipelining")
    plan = STUDIES["engines"].plan(options("engines", *given, "--ktor", "3.5.2,3.6.1"))
    runs = [(b.repeat, b.engine, b.client, b.ktor) for b in plan]
    cio = ["lab", "plain", "plain-limits", "lab, pipelining", "plain-limits, pipelining"]
    okhttp = ["lab", "plain", "plain-limits"]
    one = [
        (e, c, k)
        for e, clients in (("cio", cio), ("okhttp", okhttp))
        for c in clients
        for k in ("3.5.2", "3.6.1")
        if not (k == "3.6.1" and c.startswith("lab"))
    ]
    assert runs == [(r, *x) for r in (1, 2) for x in one]
    alone = STUDIES["engines"].plan(options("engines", *given, "--ktor", "3.6.1"))
    assert {b.client for b in alone} == {"plain", "plain-limits", "plain-limits, pipelining"}
    with pytest.raises(ValueError, match="--ladder climbs to the lab's client, which Ktor 3.6.1"):
        STUDIES["engines"].plan(options("engines", "--ladder", "--ktor", "3.6.1"))
    # apache is not on 3.6.1: skipped by name, the others run
    assert {
        b.engine
        for b in STUDIES["engines"].plan(options("engines", "--engines", "apache,java", "--ktor", "3.6.1"))
    } == {"java"}


def test_engines_ratios_to_the_first_release_are_taken_within_a_round():
    import pytest

    from ktor_lab.studies import engines

    def row(ktor, repeat, rps, cpu, client="plain-limits"):
        return engines.BenchRow(
            engine="cio", concurrency=100, mode="limit 100", rps=rps, p50_ms=1, p90_ms=1, p99_ms=2,
            max_ms=3, failures=0, batch_rps_min=rps, batch_rps_max=rps, batch_rps_median=rps,
            ktor_version=ktor, client=client, repeat=repeat, cpu_ms_per_request=cpu,
        )  # fmt: skip

    # round 2 is slower for both releases: within a round 3.6.1 makes 1.1x and 1.2x the rps
    rows = [
        row("3.5.2", 1, 1000, 0.5),
        row("3.6.1", 1, 1100, 0.4),
        row("3.5.2", 2, 500, 1.0),
        row("3.6.1", 2, 600, 1.0),
    ]
    out = {r.ktor_version: r for r in engines.summarize(rows)}
    assert out["3.5.2"].rps_to_first_release is None
    assert out["3.6.1"].rps_to_first_release == pytest.approx(1.15)
    assert out["3.6.1"].cpu_to_first_release == pytest.approx(0.9)
    assert out["3.6.1"].rps == pytest.approx(850)  # the median over the rounds
    # the base is --ktor's first release, whichever row was measured first
    later = {r.ktor_version: r for r in engines.summarize(rows, first="3.6.1")}
    assert later["3.5.2"].rps_to_first_release == pytest.approx(1 / 1.15, rel=0.05)
    assert later["3.6.1"].rps_to_first_release is None
    one = engines.summarize([row("3.5.2", 1, 1000, 0.5)])
    assert one[0].rps_to_first_release is None
