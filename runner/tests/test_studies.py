"""Each `lab study` preset at a tiny size, with real nginx, real proxies and real clients.

A study passes when it writes its table and charts and the figures show what the study is
about (the doc pages in docs/studies/ hold full-size runs).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ktor_lab import cli
from ktor_lab.results import Results
from ktor_lab.results import load as load_results
from ktor_lab.studies.replay import HELD_P99_MS


def run_study(name: str, out: Path, *options: str) -> dict:
    assert cli.main(["study", name, *options, "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    report = (out / "report.md").read_text()
    assert results["study"] == name and results["rows"]
    assert results["environment"]["commit"] and results["settings"]
    for img in re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", report):
        ET.parse(out / img)  # each chart the report names exists and is well-formed
    return {"results": results, "report": report, "rows": results["rows"]}


def table_rows(report: str, heading: str) -> list[list[str]]:
    """The body rows of the markdown table under `## heading`."""
    part = report.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in part.splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def table_header(report: str, heading: str) -> list[str]:
    """The column names of the markdown table under `## heading`."""
    part = report.split(f"## {heading}\n", 1)[1]
    line = next(line for line in part.splitlines() if line.startswith("| "))
    return [c.strip() for c in line.strip("|").split("|")]


def test_threads_tiny_shows_okhttp_thread_per_request_and_its_default_of_5_per_host(tmp_path: Path):
    # 10 requests of 400 ms: OkHttp's default dispatcher lets 5 per host through (2 waves) on
    # 5 blocked threads; with the fair limit all 10 go at once, on 10 threads. CIO holds none.
    out = run_study(
        "threads",
        tmp_path,
        "--engines",
        "cio,okhttp",
        "--n",
        "10",
        "--delay-ms",
        "400",
        "--sample-at",
        "0.2",
        "--deadline",
        "10",
    )
    rows = {(r["engine"], r["limits"]): r for r in out["rows"]}
    assert set(rows) == {(e, lim) for e in ("cio", "okhttp") for lim in ("defaults", "fair")}
    assert all(r["ok"] == 10 and r["failed"] == 0 for r in rows.values())
    assert rows["okhttp", "defaults"]["waves"] == 2
    assert rows["okhttp", "defaults"]["completion_s"] >= 0.8
    assert rows["okhttp", "defaults"]["proxy_settings"]["dispatcher_max_requests_per_host"] == "5"
    assert rows["okhttp", "fair"]["waves"] == 1
    assert rows["okhttp", "fair"]["unparked_added"] >= 9
    assert 4 <= rows["okhttp", "defaults"]["unparked_added"] <= 7
    assert rows["cio", "fair"]["unparked_added"] <= 3
    assert rows["cio", "defaults"]["proxy_settings"]["max_connections_per_route"] == "100"
    table = table_rows(out["report"], "fair limits")
    assert [r[0] for r in table] == ["cio", "okhttp"]
    assert table[1][6] == f"{rows['okhttp', 'fair']['completion_s']:.1f}"


def test_streaming_tiny_checks_every_body_over_each_protocol_and_compares_with_nginx_direct(tmp_path: Path):
    # over https and h2 too: the upload study's pair (CIO speaks no h2)
    out = run_study(
        "streaming", tmp_path, "--engines", "cio,okhttp", "--protocols", "http,https,h2", "--sizes", "1m",
        "--repeats", "2", "--warmup", "1",
    )  # fmt: skip
    rows = out["rows"]
    targets = ("nginx direct", "cio http", "okhttp http", "cio https", "okhttp https", "okhttp h2")
    keys = {(r["target"], r["direction"]) for r in rows}
    assert keys == {(t, d) for t in targets for d in ("download", "upload")}
    for r in rows:
        assert r["intact"] and len(r["runs"]) == 2 and r["bytes"] == 1 << 20
        assert r["mb_per_s"] > 0
        if r["target"] == "nginx direct":
            assert r["of_direct"] == 1.0 and r["heap_max_mib"] is None
        else:
            assert r["heap_max_mib"] > 1 and r["cpu_seconds"] > 0
    table = table_rows(out["report"], "upload, 1 MiB")
    assert [r[0] for r in table] == list(targets)
    assert all(r[-1] == "all match" for r in table)


TINY = ("--forks", "1", "--warm-first", "none", "--spare", "0", "--aa", "none")


def run_plan_study(name: str, out: Path, *options: str) -> tuple[str, dict[str, Results]]:
    """A study made of lab run parts: its page, and each part's results as `lab run` stores them."""
    assert cli.main(["study", name, *options, "--out", str(out)]) == 0
    page = (out / "report.md").read_text()
    parts = json.loads((out / "study.json").read_text())["parts"]
    for part in parts:
        assert (out / part / "report.html").exists() and (out / part / "results.csv").exists()
    return page, {part: load_results(out / part) for part in parts}


def test_replay_tiny_flags_the_published_setup_and_names_the_rate_each_case_held(tmp_path: Path):
    # 20 users waiting 0.5-1 s make about 27 rps whatever the engine: flagged load-model.
    # A closed loop of 4 users without wait is what the case can do: far more.
    page, parts = run_plan_study(
        "replay",
        tmp_path,
        *("--cases", "singleton-cio", "--loads", "closed/20/0.5-1,rate/50,closed/4/0"),
        *("--warmup", "2", "--duration", "3", "--windows", "1", *TINY),
    )
    runs = parts["loads"].runs
    by = {
        (r.case, r.load.label): [x for x in runs if (x.case, x.load.label) == (r.case, r.load.label)]
        for r in runs
    }
    case = "singleton-cio"
    replayed = by[(case, "closed/20/0.5-1")]
    assert all("load-model" in r.verdict.flags for r in replayed)
    assert all(15 <= r.locust.rps <= 35 for r in replayed)
    capacity = by[(case, "closed/4/0")]
    assert min(r.locust.rps for r in capacity) > 3 * max(r.locust.rps for r in replayed)
    # Held when its window reached the target without errors and p99 under the limit; on a busy
    # machine it may not, and then the page must say so.
    (rate,) = by[(case, "rate/50/10")]
    flags = rate.verdict.flags
    held = "target" in flags and "errors" not in flags and (rate.locust.p99_ms or 0) <= HELD_P99_MS
    assert (f"{case} 50 rps" if held else f"{case} none") in page, page
    verdict = page.split("## Verdict\n")[1].split("\n## ")[0]
    assert "The published setup replayed (closed/20/0.5-1" in verdict
    assert "singleton-cio published 600 rps, p50 100 ms; here " in verdict and "load-model" in verdict
    assert "loads, static-small, closed model, 4 users, no wait: " in verdict  # each load's first screen
    # the page again from the stored results, without running anything
    (tmp_path / "report.md").unlink()
    assert cli.main(["report", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == page


def test_engines_tiny_runs_each_engine_behind_a_limit_and_as_published_beside_plain_clients(tmp_path: Path):
    out = run_study(
        "engines",
        tmp_path,
        *("--engines", "cio,okhttp", "--batches", "2", "--batch-size", "50"),
        *("--concurrency", "10", "--warmup-batches", "1"),
    )
    clients = ("lab", "plain", "plain-limits")
    rows = {(r["engine"], r["concurrency"], r["client"]): r for r in out["rows"]}
    assert set(rows) == {(e, c, k) for e in ("cio", "okhttp") for c in (10, 0) for k in clients}
    for (_, _, client), r in rows.items():
        assert r["requests"] == 100 and r["failures"] == 0
        assert r["bytes"] == 100 * len(b"Success!\n")
        assert len(r["batches"]) == 2 and len(r["warmup_batches"]) == 1
        assert 0 < r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert r["cpu_ms_per_request"] > 0
        # the lab's client says its settings; a plain one has none of the lab's code to ask
        assert (r["client_settings"].get("limits") == "fair") == (client == "lab"), r["client_settings"]
    table = table_rows(out["report"], "Per engine")
    header = table_header(out["report"], "Per engine")
    at = [header.index(c) for c in ("engine", "in flight", "client")]
    assert [tuple(r[i] for i in at) for r in table] == [
        (e, m, k)
        for m in ("limit 10", "all 50 at once (as published)")
        for e in ("cio", "okhttp")
        for k in clients
    ]
    # each lab row beside its references, as ratios measured in the same round
    client = header.index("client")
    for row in table:
        ratio = row[header.index("rps x plain-limits")]
        assert (ratio == "-") == (row[client] == "plain-limits"), row
        assert row[client] == "plain-limits" or float(ratio) > 0
    # nginx counted the connections: CIO's a new one for each request, OkHttp's pooled
    conns = {(r["engine"], r["concurrency"], r["client"]): r["connections_per_request"] for r in out["rows"]}
    assert conns[("cio", 10, "plain-limits")] == pytest.approx(1.0)
    assert conns[("okhttp", 10, "plain-limits")] < 0.5


def test_engines_on_a_release_without_the_server_runs_its_references_and_cio_pipelined(tmp_path: Path):
    """Ktor 3.6.1 builds the clients only here: engine-bench is built on it without the lab's
    client (the references alone), each request answered or timed out, and nginx counts CIO's
    connections with pipelining off and on."""
    out = run_study(
        "engines",
        tmp_path,
        *("--ktor", "3.6.1", "--engines", "cio", "--cio-pipelining", "--no-as-published"),
        *("--batches", "2", "--batch-size", "50", "--concurrency", "10", "--warmup-batches", "1"),
    )
    rows = {r["client"]: r for r in out["rows"]}
    assert set(rows) == {"plain", "plain-limits", "plain-limits, pipelining"}
    for r in rows.values():
        assert r["ktor_version"] == "3.6.1" and r["requests"] == 100
        assert r["bytes"] == (100 - r["failures"]) * len(b"Success!\n")
        assert r["timeouts"] <= r["failures"]
    assert rows["plain-limits"]["failures"] == 0
    assert rows["plain-limits"]["connections_per_request"] == pytest.approx(1.0)
    assert rows["plain-limits, pipelining"]["client_settings"] == {"pipelining": "on"}
    assert rows["plain-limits, pipelining"]["connections_per_request"] < 1.0
    ktor = table_header(out["report"], "Per engine").index("ktor")
    assert {row[ktor] for row in table_rows(out["report"], "Per engine")} == {"3.6.1"}


def test_io_tiny_puts_each_ktor_figure_beside_its_jvm_reference(tmp_path: Path):
    out = run_study(
        "io",
        tmp_path,
        *("--size", str(1 << 20), "--warmup-iterations", "0", "--iterations", "1"),
        *("--iteration-ms", "200"),
    )
    rows = {r["what"]: r for r in out["rows"]}
    assert set(rows) == {"socket write", "file read"}
    for r in rows.values():
        assert r["ktor_mb_per_s"] > 0 and r["jvm_mb_per_s"] > 0
        assert r["ktor_over_jvm_time"] == pytest.approx(r["ktor_ms"] / r["jvm_ms"])
    jmh = json.loads((tmp_path / "jmh.json").read_text())
    assert {b["params"]["size"] for b in jmh} == {str(1 << 20)}
    assert len(table_rows(out["report"], "Per operation")) == 2


def test_faults_tiny_shows_what_passes_as_whole_and_what_the_next_caller_gets(tmp_path: Path):
    out = run_study(
        "faults",
        tmp_path,
        "--engines",
        "okhttp,java",
        "--lifetimes",
        "singleton",
        "--settings",
        "lab",
        "--repeats",
        "2",
        "--faults",
        "short-fixed,short-fixed-large,stale,upload-cut-chunked,refused",
    )
    rows = {(r["engine"], r["fault"]): r for r in out["rows"]}
    assert set(rows) == {
        (e, f)
        for e in ("okhttp", "java")
        for f in ("short-fixed", "short-fixed-large", "stale", "upload-cut-chunked", "refused")
    }
    for engine in ("okhttp", "java"):
        # What the proxy itself guarantees, whatever the engine, idle and with every core busy.
        assert rows[(engine, "short-fixed")]["caller"] == "502 x2"
        assert rows[(engine, "short-fixed-large")]["passed_whole"] == 0
        assert rows[(engine, "short-fixed-large")]["busy_passed_whole"] == 0
        assert rows[(engine, "upload-cut-chunked")]["upload_passed_whole"] == 0
        assert rows[(engine, "upload-cut-chunked")]["busy_passed_whole"] == 0
        assert rows[(engine, "upload-cut-chunked")]["busy_upstream_saw"] is not None
        assert rows[(engine, "stale")]["busy_caller"] is None  # not a cut: tried idle only
        assert rows[(engine, "refused")]["caller"] == "502 x2"
        assert rows[(engine, "refused")]["clean_ms"] is not None  # served again once it was back
        # Retry on stale connections is on in the lab's settings: the next request is served.
        assert rows[(engine, "stale")]["next_failed"] == 0, rows[(engine, "stale")]
        assert rows[(engine, "stale")]["retry_on_stale"] in ("on", "always")
    matrix = table_rows(out["report"], "What the caller got, per fault")
    assert [r[0] for r in matrix] == ["singleton-okhttp", "singleton-java"]
    assert (
        "**" not in out["report"].split("## What the caller got")[1].split("## Times")[0]
    )  # nothing passed whole


def test_protocols_tiny_tests_a_case_over_tls_and_h2_against_plain_http(tmp_path: Path):
    # One case: what each engine does over TLS is test_upstream_tls.py's (CIO's handshake per
    # request there); the page over several cases is test_plan_studies.py's.
    page, parts = run_plan_study(
        "protocols",
        tmp_path,
        *("--cases", "singleton-okhttp", "--protocols", "http,https,h2", "--loads", "rate/20"),
        *("--warmup", "0", "--duration", "2", "--windows", "2", "--settle", "0", *TINY),
    )
    runs = parts["rate"].runs
    assert {r.dim("protocol") for r in runs} == {"http", "https", "h2"}
    for r in runs:
        assert r.locust.failures == 0, r.row
        assert (r.connections.full_tls_per_1000_requests is None) == (r.dim("protocol") == "http"), r.row
    # a singleton OkHttp reuses its connection over h2
    assert all(r.connections.per_1000_requests < 100 for r in runs if r.dim("protocol") == "h2")
    verdict = page.split("## Verdict\n")[1].split("\n## ")[0]
    assert "protocol http -> https: of 1 case" in verdict and "protocol http -> h2: of 1 case" in verdict
    table = [line for line in page.splitlines() if line.startswith("| singleton-")]
    assert len(table) == 3  # http -> https, http -> h2, https -> h2
