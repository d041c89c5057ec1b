"""The studies without any part: their doc pages, ranks, charts, and each study's tables from
rows made here (the runs themselves: test_studies.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ktor_lab import render
from ktor_lab.paths import REPO
from ktor_lab.studies import STUDIES


def test_every_study_has_a_doc_page_that_names_its_command():
    for name in STUDIES:
        page = REPO / "docs" / "studies" / f"{name}.md"
        assert page.exists(), f"{page} is missing"
        text = page.read_text()
        assert f"lab study {name}" in text
        for img in re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", text):
            ET.parse(page.parent / img)


def test_ranks_tie_within_5_percent():
    from ktor_lab.studies.replay import rank

    assert rank({"a": 100.0, "b": 96.0, "c": 50.0, "d": None}) == {"a": 1, "b": 1, "c": 3}


def test_grouped_bars_scale_to_the_largest_value():
    svg = render.bars("t", ["a", "b"], {"x": [10.0, 5.0], "y": [None, 2.5]})
    root = ET.fromstring(svg)
    rects = root.iter("{http://www.w3.org/2000/svg}rect")
    bars = [r for r in rects if r.get("x") == "150" and r.get("height") == "16"]  # not the legend's squares
    assert [float(r.get("width")) for r in bars] == [440.0, 220.0, 110.0]
    assert "n/a" in svg


def options(study: str, *argv: str):
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


def test_threads_rows_make_one_table_per_kind_of_limits():
    from ktor_lab.studies import machinery
    from ktor_lab.studies.threads import Row

    def row(engine, limits, finished=True):
        return Row(
            engine, limits, 10, 10 if finished else 4, 0, 0 if finished else 6, [200], finished,
            0.8 if finished else None, 2, 40.0, 20.0, 0.2, 50.0, 25.0, 10.0, 5.0, 52.0, 10.0,
        )  # fmt: skip

    rows = [row("cio", "defaults"), row("okhttp", "defaults", finished=False), row("cio", "fair")]
    report = STUDIES["threads"].report(rows, options("threads", "--sample-at", "0.2"))
    assert [h for h, _ in report.tables] == ["defaults limits", "fair limits"]
    assert table_rows_of(report.tables[0][1])[1][6] == "> 10 (4 of 10 done)"
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
    from ktor_lab.studies.streaming import DIRECT, Row, Transfer

    def row(target, rate):
        t = Transfer(1.0, rate, True, None, None)
        return Row(target, "1m", 1 << 20, "download", [t], rate, rate, rate, True, None, None)

    rows = [row(DIRECT, 400.0), row("cio", 100.0)]
    report = STUDIES["streaming"].report(rows, options("streaming", "--sizes", "1m"))
    assert rows[1].of_direct == 0.25
    assert [h for h, _ in report.tables] == ["download, 1 MiB", "upload, 1 MiB"]
    assert table_rows_of(report.tables[0][1])[1][:4] == ["cio", "100.0", "100-100", "0.25"]


def table_rows_of(md: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()[2:]]


def test_distance_rows_make_tables_per_protocol_and_a_verdict_in_words():
    from ktor_lab.studies.distance import PIPELINING, Row, verdict_lines

    def row(case, rtt, avg, conns, threads, variant="", protocol="http", flags=("target", "not-warm")):
        # OkHttp: a thread at work per request in flight (rtt / 10 of them); CIO: none.
        active = rtt / 10 if "okhttp" in case else 0.0
        return Row(
            case=case, variant=variant, protocol=protocol, rtt_ms=rtt, target_rps=100.0, rps=100.0,
            p50_ms=avg - 0.5, p99_ms=avg * 3, avg_ms=avg, failures=0, requests=1000, cpu_per_1000=2.0,
            cpu_per_1000_without_jit=1.2,
            threads_max=threads, active_threads=active, threads_per_in_flight=1.0 if rtt >= 10 else None,
            in_flight_mean=rtt / 10, conns_per_1000=conns, full_tls_per_1000=None,
            connect_rtt_ms=conns / 1000 * rtt, time_wait_max=conns * 0.6, pool_in_use_max=None,
            flags=list(flags),
        )  # fmt: skip

    rows = []
    for rtt in (0, 1, 20, 80):
        rows += [
            row("singleton-okhttp", rtt, 2 + rtt, 1, 40 + rtt // 2),
            row("per-call-okhttp", rtt, 3 + rtt * 1.1, 1000, 42 + rtt // 2),
            row("singleton-cio", rtt, 2.5 + rtt, 1000, 30),
            row("per-call-cio", rtt, 3 + rtt, 1000, 31),
            row("singleton-cio", rtt, 2 + rtt, 2, 30, variant=PIPELINING),
        ]
    assert rows[1].mean_with_connect_ms == 3.0 and rows[6].mean_with_connect_ms == 3 + 1.1 + 1.0
    assert rows[12].above_floor_ms == 2.0  # singleton-cio at 20 ms: p50 22.0 less the round trip
    lines = verdict_lines(rows, "http")
    okhttp = next(line for line in lines if line.startswith("okhttp:"))
    assert okhttp.startswith("okhttp: per-call stops being a detail from 20 ms on")
    assert "+23.0 ms at 20 ms" in okhttp
    threads = next(line for line in lines if line.startswith("Threads at work grow"))
    assert "singleton-okhttp 0.0 -> 8.0 (1.00 per request in flight at 80 ms)" in threads
    assert "singleton-cio" not in threads
    assert any(
        line.startswith("Threads at work hold (0 -> 80 ms): ") and "per-call-cio 0.0 -> 0.0" in line
        for line in lines
    )
    cio = next(line for line in lines if line.startswith("Singleton CIO"))
    assert "80 ms: 162.5 ms mean with 1,000 new connections per 1,000 requests, against 82.1 ms" in cio
    assert any(line.startswith("With pipelining on: 0 ms: 2.0 ms mean, 2 new connections") for line in lines)
    assert not any(line.startswith("Did not hold") for line in lines)
    # A row that fell short of the fixed rate says so: its figures are of the requests that finished.
    short = row("per-call-cio", 20, 6200, 1000, 90, protocol="https", flags=("not-warm",))
    short.rps, short.p50_ms = 31.6, 6100
    held = row("singleton-cio", 20, 30, 1000, 40, protocol="https")
    said = "Did not hold the 100 rps (their figures are of the requests that finished): "
    assert said + "per-call-cio at 20 ms (32 rps, p50 6,100 ms)." in verdict_lines([held, short], "https")

    report = STUDIES["distance"].report(rows, options("distance", "--protocols", "http"))
    headings = [h for h, _ in report.tables]
    assert headings[0] == "Verdict over http" and len(headings) == 6
    latency = table_rows_of(report.tables[1][1])
    assert latency[0][0] == "singleton-okhttp" and latency[-1][0] == "singleton-cio (pipelining)"
    assert latency[1][3] == "4.5 / 45.0"  # per-call-okhttp at 20 ms: p50 - RTT / mean + 1 RTT per request
    assert table_rows_of(report.tables[5][1])[0][1] == "2.00 / 1.20"  # CPU with and without the JIT's
    assert len(report.charts) == 2


def test_distance_plans_a_fixed_rate_over_every_case_distance_and_protocol():
    import pytest

    (m,) = STUDIES["distance"].plan(options("distance"))
    assert len(m.cases.runs()) == 10 * 4 * 2 and len(m.pipelining.runs()) == 4 * 2
    assert m.pipelining.proxy_env == {"CLIENT_PIPELINING": "on"}
    assert m.whole.loads[0].model == "rate" and m.whole.dims["rtt_ms"] == [0, 1, 20, 80]
    with pytest.raises(ValueError, match="give a fixed rate"):
        STUDIES["distance"].plan(options("distance", "--load", "closed/50/0"))


def test_make_studies_runs_every_study_but_the_long_ones():
    """The Makefile's `studies` target names the studies by hand: each must be one of the
    registry's, and only protocols, distance and dispatchers (each long, run on their own) are left out."""
    import re

    from ktor_lab.paths import REPO
    from ktor_lab.studies import STUDIES

    text = (REPO / "Makefile").read_text()
    target = re.search(r"^studies:.*?\n((?:\t.*\n)+)", text, re.M)[1]
    run = re.findall(r"lab study (\w+)", target)
    assert len(run) == len(set(run)) and set(run) <= set(STUDIES), run
    assert set(STUDIES) - set(run) == {"protocols", "distance", "dispatchers"}


def test_distance_gives_the_proxy_s_cpu_per_request_with_and_without_its_jit_compiler_s():
    """At 100 rps the JIT still compiles after the warm-up: its threads' CPU in the window is
    left out of the second figure, and without it known there is no second figure."""
    from pathlib import Path

    from ktor_lab.results import load
    from ktor_lab.studies.distance import row_of

    run = load(Path(__file__).parents[1] / "fixtures" / "results-small").runs[0]
    run.proxy.upstream_requests, run.proxy.cpu_seconds = 1000.0, 3.5
    run.proxy.cpu_seconds_per_1000_requests, run.proxy.jit_cpu_seconds_in_window = 3.5, 2.0
    assert (row_of(run).cpu_per_1000, row_of(run).cpu_per_1000_without_jit) == (3.5, 1.5)
    run.proxy.jit_cpu_seconds_in_window = None
    assert row_of(run).cpu_per_1000_without_jit is None


def test_dispatchers_measures_each_case_s_variants_in_one_batch():
    """The study's notes compare one case on io, virtual and io:256: a plan larger than the proxies
    that fit up at once is measured in batches, and each case's rows must share one to be
    interleaved (the first full run put io and virtual in different batches, 20 min apart)."""
    from collections import Counter

    from ktor_lab.measure import batches

    ((_, plan),) = STUDIES["dispatchers"].plan(options("dispatchers", "--parts", "slow"))[0].parts
    # cio, okhttp, java x both lifetimes, each on JDK 17 (io) and 25 (io, virtual, io:256)
    assert len(plan.proxies()) == 24 and len(batches(plan)) == 2
    whole = Counter((s.case.lifetime, s.case.engine) for s in plan.proxies())
    for batch in batches(plan):
        mine = Counter((s.case.lifetime, s.case.engine) for s in batch)
        assert all(mine[key] == whole[key] == 4 for key in mine), mine


def test_a_study_s_dry_run_says_its_proxies_windows_and_time():
    from ktor_lab.measure import WINDOW_OVERHEAD_S, format_seconds
    from ktor_lab.studies import dry_run_lines

    items = STUDIES["dispatchers"].plan(options("dispatchers", "--parts", "slow", "--warmup", "30"))
    # two warm-ups per proxy (at capacity first, --warm-first's default, then at its load); windows
    # with their settle
    most = 24 * 30 * 2 + 120 * (3 + 10 + WINDOW_OVERHEAD_S)
    assert dry_run_lines(items)[0] == (
        "slow: 24 proxies, 120 windows of 10 s, warm-up <= 30 s (first at closed/50/0, then at its load); "
        f"at most about {format_seconds(most)}"
    )
    lines = dry_run_lines(STUDIES["versions"].plan(options("versions")))
    assert lines[0].startswith("ktor: ") and lines[-3].startswith("the lab run matrices: at most about ")
    assert lines[-2].startswith("4 JMH item(s) (the io study per Ktor release): at most about ")
    assert lines[-1].startswith("the study: at most about ")
    assert lines[-1].endswith(" in all, the lab run matrices included")


def test_every_study_s_dry_run_estimates_all_of_its_time():
    """Every item of every study is timed with its default options (its `lab run` plans, or its own
    `planned_seconds()`), and the last line is the sum of them all."""
    from ktor_lab.measure import format_seconds, planned_seconds
    from ktor_lab.studies import dry_run_lines, plans_in

    for name, study in STUDIES.items():
        items = study.plan(options(name))
        lines = dry_run_lines(items)
        assert not [line for line in lines if "not estimated" in line], (name, lines)
        total = sum(
            sum(planned_seconds(p) for _, p in plans) if (plans := plans_in(item)) else item.planned_seconds()
            for item in items
        )
        assert total > 0, name
        last = rf"the (study|lab run matrices): at most about {format_seconds(total)} in all.*"
        assert re.fullmatch(last, lines[-1]), (name, lines)


def test_a_benchmark_s_estimate_follows_its_parameters():
    """A non-Plan item's time comes from its own numbers, not a constant: io's JMH run doubles with
    its forks and is never past its timeout; a threads burst on the fair limit is its waves of the
    delay, on the engine's own limits its deadline."""
    from ktor_lab.studies import io, machinery, threads

    def jmh(*argv: str) -> io.Jmh:
        (run,) = STUDIES["io"].plan(options("io", *argv))
        return run

    one, two = jmh().planned_seconds(), jmh("--forks", "2").planned_seconds()
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


def test_every_lab_run_a_study_makes_is_in_its_dry_run():
    """A study item holding lab-run plans names them all in `named_plans()` (the dry run's lines):
    a Plan field added to a study's Matrices without it would run untimed by --dry-run."""
    from dataclasses import fields, is_dataclass

    from ktor_lab.plan import Plan
    from ktor_lab.studies import plans_in

    for name, study in STUDIES.items():
        for item in study.plan(options(name)):
            if not is_dataclass(item) or isinstance(item, Plan):
                continue
            held = [getattr(item, f.name) for f in fields(item) if f.name != "whole"]
            held = [v for v in held if isinstance(v, Plan)] + [
                p for v in held if isinstance(v, tuple) for pair in v if isinstance(pair, tuple) for p in pair
            ]
            plans = [p for p in held if isinstance(p, Plan)]
            named = [p for _, p in plans_in(item)]
            assert all(any(p is n for n in named) for p in plans), (name, type(item).__name__)


def test_replay_from_a_matrix_reads_it_and_a_missing_one_is_refused_in_one_line(tmp_path, capsys):
    """--from-matrix measures nothing: the dry run says so instead of planning the matrix's time,
    and a folder without results.json is refused before anything, naming the option."""
    from ktor_lab import cli

    assert cli.main(["study", "replay", "--from-matrix", str(tmp_path / "missing"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lab: study replay: --from-matrix {tmp_path / 'missing'}: no results.json there")
    assert err.count("\n") == 1
    (tmp_path / "results.json").write_text("{}")
    assert cli.main(["study", "replay", "--from-matrix", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"reads the matrix in {tmp_path}: measures nothing" in out and "proxies" not in out
