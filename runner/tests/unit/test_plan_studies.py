"""The studies that are presets of `lab run` (studies/plans.py): their parts read as lab run reads
them, the user's options laid over each part's, their dry runs, and their page, written from
results alone (synthetic windows here; the runs themselves: test_studies.py)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest

from ktor_lab import cli, measure, rules, versions
from ktor_lab.cases import BY_FIELD, Case
from ktor_lab.plan import Plan, parse_load
from ktor_lab.results import LocustFigures, PrometheusFigures, ProxyFigures, Results, Run, Warmup
from ktor_lab.studies import STUDIES, plans

CASES = ("singleton-cio", "singleton-okhttp")
PLAN_STUDIES = {name: s for name, s in STUDIES.items() if isinstance(s, plans.PlanStudy)}


def test_the_studies_that_ask_what_lab_run_measures_are_its_presets():
    assert set(PLAN_STUDIES) == {"protocols", "versions", "distance", "dispatchers", "replay"}


@pytest.mark.parametrize("name", sorted(PLAN_STUDIES))
def test_every_part_is_a_lab_run_that_plans_and_compares_real_dimensions(name):
    study = PLAN_STUDIES[name]
    for part in study.all_parts():
        plan = plans.part_plan(part, {})
        assert plan.runs() and plan.forks >= 2 and plan.repeats >= 3, part.name  # lab run's design
    assert set(study.compares) <= set(BY_FIELD)


def parsed(*argv: str):
    return cli.main_parser().parse_args(["study", *argv])


def test_the_user_s_options_win_over_a_part_s_and_the_others_keep_the_part_s():
    args = parsed("protocols", "--protocols", "http,https", "--forks", "3", "--cases", "singleton-okhttp")
    ((part, plan),) = plans.planned_parts(STUDIES["protocols"], args)
    assert part.name == "rate" and plan.dims == {"protocol": ["http", "https"]}
    assert plan.forks == 3 and [c.id for c in plan.cases] == ["singleton-okhttp"]
    assert plan.loads == [parse_load("rate/200/40")]  # the part's, not lab run's default


def test_a_bad_option_or_part_is_refused_in_one_line_naming_it(capsys):
    assert cli.main(["study", "protocols", "--protocols", "tls", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lab: part rate: --protocols: ") and err.count("\n") == 1
    assert cli.main(["study", "distance", "--parts", "far", "--dry-run"]) == 2
    assert capsys.readouterr().err == "lab: --parts: 'far' is not one of cases\n"


def test_the_help_gives_lab_run_s_defaults_and_each_part_s_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["study", "dispatchers", "--help"])
    out = capsys.readouterr().out
    assert "SUPPRESS" not in out and "(default: 2;" in out  # --forks, as lab run says it
    assert "slow: 100 requests in flight" in out and "lab run --cases singleton-cio," in out


def test_the_dry_run_gives_each_part_s_plan_and_the_time_of_all(capsys):
    assert cli.main(["study", "dispatchers", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    planned = plans.planned_parts(STUDIES["dispatchers"], parsed("dispatchers"))
    total = sum(measure.planned_seconds(p) for _, p in planned)
    assert [line.split(": ")[1] for line in out if "JVMs x" in line] == ["slow", "distance"]
    assert out[-1] == (
        f"lab study dispatchers: the study: at most about {measure.format_seconds(total)} in all "
        "(spare windows apart)"
    )


def test_a_case_a_dimension_value_cannot_take_is_skipped_by_name():
    (_, plan), *_ = plans.planned_parts(STUDIES["distance"], parsed("distance"))
    skipped = {case.name for case, _ in plan.skipped()}
    assert "singleton-okhttp pipelining on" in skipped and "singleton-cio pipelining on" not in skipped
    assert Case.parse("singleton-cio pipelining on") in plan.cases_to_run()


# --- the page, from results alone -----------------------------------------------------------------


def window(case: Case, protocol: str, fork: int, n: int, cpu: float) -> Run:
    load = parse_load("rate/200/40")
    return Run(
        case=case.id,
        engine=case.engine,
        lifetime=case.lifetime,
        scenario="static-small",
        load=load,
        repeat=n,
        warmup=Warmup(seconds=60, settled=True),
        locust=LocustFigures(rps=200.0, p99_ms=30.0, requests=2000, cpu_peak_percent={"local": 40}),
        proxy=ProxyFigures(upstream_requests=2000, cpu_seconds_per_1000_requests=cpu),
        prometheus=PrometheusFigures(threads_live_max=50, heap_max_bytes=100 << 20),
        fork=fork,
        dimensions=True,
        ktor="3.5.2",
        java="17.0.15",
        dims={"protocol": protocol},
    )


def tls_results(costs: dict[tuple[str, str], float]) -> Results:
    """Two cases over http and https, 2 JVMs x 3 windows, 5% noise a window: CPU per request
    `costs[(case, protocol)]`."""
    rng = np.random.default_rng(3)
    cases = [Case.parse("singleton-cio"), Case.parse("singleton-okhttp")]
    runs = [
        window(c, p, fork, n, costs[(c.id, p)] * math.exp(rng.normal(0, 0.05)))
        for fork in (1, 2)
        for c in cases
        for p in ("http", "https")
        for n in (1, 2, 3)
    ]
    plan = Plan(cases, ["static-small"], [parse_load("rate/200/40")], repeats=3, forks=2,
                dims={"protocol": ["http", "https"]})  # fmt: skip
    env = {"commit": "0" * 16, "dirty": False, "machine": {"cpus": 2, "cpu_model": "x", "memory_gib": 1},
           "versions": {}}  # fmt: skip
    return Results(plan=plan, backend={"kind": "native"}, environment=env, started="", runs=runs)


def test_the_page_opens_with_the_verdict_in_words_and_gives_each_change_its_interval(tmp_path):
    costs = {("singleton-cio", "http"): 3.0, ("singleton-cio", "https"): 6.0}
    costs |= {("singleton-okhttp", "http"): 3.0, ("singleton-okhttp", "https"): 3.0}
    results = tls_results(costs)
    page = plans.page(STUDIES["protocols"], "lab study protocols", {"rate": results})
    verdict = page.split("## Verdict")[1].split("\n## ")[0]
    assert "protocol http -> https: of 2 cases" in verdict
    assert "CPU per request (the JIT's included) higher for singleton-cio (+" in verdict
    assert "no clear difference for singleton-okhttp" in verdict
    # its power, at the adjustment its comparisons had: what a change smaller than that may hide
    power = next(x for x in verdict.splitlines() if "this run finds a change in CPU per request of " in x)
    m = re.search(r"of (\d+)% or more 80% of the time \(its (\d+) comparisons adjusted together\)", power)
    # 2 cases x the figures measured in the fixture (p50, p99, CPU, threads, heap); 5% noise a window
    assert m and int(m[2]) >= 2 * 4 and 5 < int(m[1]) < 100, power
    row = next(line for line in page.splitlines() if line.startswith("| singleton-cio |"))
    cpu = row.split(" | ")[5]  # case, held, change, p50, p99, CPU
    low, high = (float(x.rstrip("%)")) for x in cpu.split("(")[1].split(" to "))
    assert 0 < low < 100 < high, cpu  # twice the CPU: +100%, inside its interval
    okhttp = next(line for line in page.splitlines() if line.startswith("| singleton-okhttp |"))
    assert okhttp.split(" | ")[5].startswith("~ (")
    assert "## rate: every case over each protocol at 200 requests a second\n" in page

    # `lab report` of the study's folder writes the page again from the stored results
    (tmp_path / "rate").mkdir()
    (tmp_path / "rate" / "results.json").write_text(json.dumps(results.to_json()))
    (tmp_path / plans.STUDY_FILE).write_text(
        json.dumps({"study": "protocols", "command": "lab study protocols", "parts": ["rate"]})
    )
    assert cli.main(["report", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == page
    assert (tmp_path / "rate" / "report.md").exists() and (tmp_path / "rate" / "results.csv").exists()
    # a part run at another rate than its words name (the user's --loads) says so in its heading
    results.plan.loads = [parse_load("rate/100/40")]
    other = plans.page(STUDIES["protocols"], "lab study protocols --loads rate/100/40", {"rate": results})
    assert (
        "## rate: every case over each protocol at 200 requests a second; measured at rate/100/40 instead "
        "(--loads)\n" in other
    )


def test_versions_changes_the_release_on_one_jdk_then_the_jdk_on_the_newest_release():
    ktor, jdk = (plans.part_plan(p, {}) for p in STUDIES["versions"].all_parts())
    proxied = [r for r in versions.releases() if r.builds_proxy]  # a clients-only release has no proxy
    releases = [r.name for r in sorted(proxied, key=lambda r: versions.version_key(r.name))]
    assert ktor.dims["ktor"] == releases and ktor.dims["java"] == ["17"]
    assert jdk.dims["ktor"] == releases[-1:] and jdk.dims["java"] == ["17", "25"]


def test_a_repeatable_option_adds_to_the_part_s():
    part = plans.Part("p", "a part", ("--set", "CLIENT_LIMITS=fair"))
    plan = plans.part_plan(part, {"set": ["ACCESS_LOG=on"]})
    assert plan.proxy_env == {"CLIENT_LIMITS": "fair", "ACCESS_LOG": "on"}


def test_a_rate_set_by_a_target_is_never_called_a_change_and_a_flagged_row_is_not_compared():
    costs = {("singleton-cio", "http"): 3.0, ("singleton-cio", "https"): 6.0}
    costs |= {("singleton-okhttp", "http"): 3.0, ("singleton-okhttp", "https"): 3.0}
    results = tls_results(costs)
    for r in results.runs:  # every window held its 200 rps target, one row failed requests
        r.verdict = None
        if r.case == "singleton-okhttp" and r.dim("protocol") == "https":
            r.locust.failures = 500
    study = replace(STUDIES["protocols"], figures=("rps", "cpu_no_jit"))
    page = plans.page(study, "lab study protocols", {"rate": results})
    line = next(x for x in page.splitlines() if "protocol http -> https: of 2 cases" in x)
    assert "of 2 cases, CPU per request" in line, line  # every rate its target's: no word on rps
    assert "CPU per request (the JIT's included) higher for singleton-cio (+" in line
    assert line.endswith("not compared on any figure: singleton-okhttp (errors).")
    okhttp = next(x for x in page.splitlines() if x.startswith("| singleton-okhttp |"))
    assert okhttp.endswith("| not compared | not compared |")


def test_a_part_that_measured_nothing_is_named_and_the_page_names_each_distance():
    results = tls_results(
        {(c, p): 3.0 for c in ("singleton-cio", "singleton-okhttp") for p in ("http", "https")}
    )
    study = replace(STUDIES["protocols"], screens=True)
    page = plans.page(study, "lab study protocols", {"rate": results}, planned=["rate", "more"])
    assert "- Part more: not measured (stopped or failed before its first window)." in page
    screens = [x for x in page.splitlines() if x.startswith("- rate, static-small") and "protocol http:" in x]
    assert len(screens) == 1 and "protocol https:" in page  # one first screen per protocol


def test_replay_names_the_rate_each_case_held_only_where_rates_were_measured():
    from ktor_lab.studies import replay

    results = tls_results(
        {(c, p): 3.0 for c in ("singleton-cio", "singleton-okhttp") for p in ("http", "https")}
    )
    assert any("highest fixed rate held" in w for w in replay.words({"loads": results}))
    for r in results.runs:
        r.load = parse_load("closed/50/0")
    assert not any("highest fixed rate held" in w for w in replay.words({"loads": results}))


def test_a_release_the_user_gives_is_each_part_s():
    args = parsed("versions", "--ktor", "3.5.1,3.5.2")
    (_, ktor), (_, jdk) = plans.planned_parts(STUDIES["versions"], args)
    assert ktor.dims["ktor"] == jdk.dims["ktor"] == ["3.5.1", "3.5.2"]
    assert ktor.dims["java"] == ["17"] and jdk.dims["java"] == ["17", "25"]


# --- the page's decision rule, checked by simulating it ---------------------------------------------

NOISE = 0.10  # a window's spread on every figure (log-normal), as in test_verdict_simulation
SPREAD = 0.03  # between JVMs of one row
FIGURES = ("p50", "p99", "cpu", "threads", "heap")


def noisy_window(case: Case, protocol: str, fork: int, n: int, m: dict[str, float]) -> Run:
    run = window(case, protocol, fork, n, m["cpu"])
    run.locust.p50_ms, run.locust.p99_ms = 5.0 * m["p50"], 30.0 * m["p99"]
    run.prometheus.threads_live_max = 50.0 * m["threads"]
    run.prometheus.heap_max_bytes = (100 << 20) * m["heap"]
    return run


def noisy(rng: np.random.Generator, costs: dict[tuple[str, str], float]) -> Results:
    """Three cases over http and https, 2 JVMs x 3 windows, every figure of every window drawn
    alike but for CPU per request `costs[(case, protocol)]` times its spread (1.0 when not named)."""
    results = tls_results({(c, p): 1.0 for c in CASES for p in ("http", "https")})
    cases = [Case.parse(c) for c in (*CASES, "singleton-apache5")]
    runs = []
    for fork in (1, 2):
        for c in cases:
            for p in ("http", "https"):
                jvm = {k: rng.normal(0, SPREAD) for k in FIGURES}
                for n in (1, 2, 3):
                    m = {k: math.exp(jvm[k] + rng.normal(0, NOISE)) for k in FIGURES}
                    m["cpu"] *= costs.get((c.id, p), 1.0)
                    runs.append(noisy_window(c, p, fork, n, m))
    results.plan.cases, results.runs = cases, runs
    return results


def names(results: Results) -> list[str]:
    """What the page's verdict names: each line that calls a figure higher or lower for a case."""
    said = plans.verdict(STUDIES["protocols"], {"rate": results})
    return [x for x in said if " higher for " in x or " lower for " in x]


def check_page_null(draws: int, bound: float) -> None:
    """Every figure of every row drawn alike: the verdict names some change on some figure in at
    most 5% of pages: at most `bound` of `draws`. Adjusted over each figure's cases alone, as the
    page once was, it named one in about half."""
    rng = np.random.default_rng(11)
    found = sum(bool(names(noisy(rng, {}))) for _ in range(draws)) / draws
    print(f"pages naming a change where none is: {found:.0%} of {draws}")
    assert found <= bound, found


def test_with_nothing_different_the_page_rarely_names_a_change():
    """The twin of runner/tests/test_simulations.py's (150 draws, 8%): 50 draws, at most 14%."""
    check_page_null(50, 0.14)


def test_a_change_that_doubles_the_cpu_of_one_case_is_named_for_it():
    rng = np.random.default_rng(12)
    hit = 0
    for _ in range(30):
        said = names(noisy(rng, {("singleton-cio", "https"): 2.0}))
        hit += any("CPU per request" in x and "higher for singleton-cio (+" in x for x in said)
    assert hit >= 29, hit


# --- the pages kept in docs/studies/, written by `lab guide` --------------------------------------


def test_each_study_kept_in_docs_has_the_page_lab_guide_writes_and_its_links_resolve():
    from ktor_lab import studies

    kept = studies.published()
    assert {s.name for s, _ in kept} >= {"replay"}, "docs/studies/replay/ holds the replay study's run"
    for study, folder in kept:
        path = studies.page_path(study)
        text = path.read_text()
        assert text == plans.page_of(folder, study, base=f"{study.name}/"), (
            f"{path} is not what `lab guide` writes from {folder}/: run `.venv/bin/lab guide`"
        )
        head = text.split("\n## Verdict")[0]
        assert "--out" not in head, "the page gives the command as run, but not where it wrote"
        for link in re.findall(r"\]\(([^)#]+\.md)\)", text):
            assert (path.parent / link).exists(), f"{path}: {link} is not there"
        sentences = re.findall(r"Among singleton clients[^\n]*?\.(?= |\n)", text)
        assert len(sentences) == len(set(sentences)), f"{path} says a first screen twice"


def test_lab_guide_writes_a_kept_study_s_page_beside_its_folder_and_check_holds_it(
    tmp_path, monkeypatch, capsys
):
    from ktor_lab import guide, studies

    docs = tmp_path / "studies"
    folder = docs / "protocols"
    (folder / "rate").mkdir(parents=True)
    results = tls_results({("singleton-cio", p): 3.0 for p in ("http", "https")}
                          | {("singleton-okhttp", p): 3.0 for p in ("http", "https")})  # fmt: skip
    (folder / "rate" / "results.json").write_text(json.dumps(results.to_json()))
    said = {"study": "protocols", "command": "lab study protocols --out /tmp/x --forks 2", "parts": ["rate"]}
    (folder / plans.STUDY_FILE).write_text(json.dumps(said))
    monkeypatch.setattr(studies, "DOCS", docs)
    monkeypatch.setattr(studies, "REPO", tmp_path)
    monkeypatch.setattr(guide, "GUIDE", tmp_path / "guide.md")
    monkeypatch.setattr(guide, "WORKLOADS", ())
    monkeypatch.setattr(guide, "REPO", tmp_path)
    monkeypatch.setattr(guide, "page", lambda: "the guide\n")
    assert cli.main(["guide"]) == 0
    page = (docs / "protocols.md").read_text()
    assert "`lab study protocols --forks 2`" in page  # the command as run, but where it wrote
    assert "[protocols/rate/report.md](protocols/rate/report.md)" in page
    assert (folder / "rate" / "report.md").exists()
    assert cli.main(["guide", "--check"]) == 0
    capsys.readouterr()
    (docs / "protocols.md").write_text(page.replace("no clear difference", "no difference"))
    assert cli.main(["guide", "--check"]) == 1
    assert "studies/protocols.md differs from what lab guide writes" in capsys.readouterr().out
    (docs / "protocols.md").unlink()
    assert cli.main(["guide", "--check"]) == 1  # a kept run without its page
    # a run of another study kept under this one's name is not this study's page
    (folder / plans.STUDY_FILE).write_text(json.dumps(said | {"study": "distance"}))
    assert studies.published() == []


def test_the_page_gives_the_command_without_where_it_wrote():
    for command in (
        "lab study replay --loads rate/500 --out /tmp/r",
        "lab study replay --out=/tmp/r --loads rate/500",
        "lab study replay --ou /tmp/r --loads rate/500",
    ):
        assert plans.without_out(command) == "lab study replay --loads rate/500", command
    assert plans.without_out("lab study replay --cases 'singleton-cio rtt 20'") == (
        "lab study replay --cases 'singleton-cio rtt 20'"
    )


def test_a_study_writes_only_into_a_new_or_empty_folder(tmp_path, capsys):
    (tmp_path / "old.svg").write_text("<svg/>")
    assert cli.main(["study", "replay", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "files are there already; give a new or empty folder" in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["old.svg"]


def test_a_count_near_0_is_given_its_difference_in_its_own_units_not_a_share_of_0():
    from ktor_lab.confidence import Estimate, compare, pool_of

    # new connections per 1,000 requests: a singleton opens about none (some windows 0), another
    # about one per request; a share of a centre near 0 would read thousands of percent
    few = Estimate.of([0.0, 0.5, 0.0, 1.0, 0.0, 0.5], forks=[1, 1, 1, 2, 2, 2])
    same = Estimate.of([0.5, 0.0, 0.0, 0.0, 1.0, 0.0], forks=[1, 1, 1, 2, 2, 2])
    many = Estimate.of([998.0, 1001.0, 999.0, 1003.0, 997.0, 1000.0], forks=[1, 1, 1, 2, 2, 2])
    pool = pool_of([few, same, many])
    assert pool is not None and not pool.log
    few, same, many = (e.with_pool(pool) for e in (few, same, many))
    tie = plans.short(compare(few, same))
    assert re.fullmatch(r"~ \(-\d+\.\d to \+\d+\.\d\)", tie), tie
    up = plans.short(compare(few, many))
    assert re.fullmatch(r"\+99\d\.\d \(\+9\d\d\.\d to \+1,0\d\d\.\d\)", up), up


def test_a_count_no_window_saw_reads_0_in_the_table_not_minus_0():
    from ktor_lab import conclusions
    from ktor_lab.confidence import Estimate, pool_of

    none = Estimate.of([0.0] * 6, forks=[1, 1, 1, 2, 2, 2])
    many = Estimate.of([998.0, 1001.0, 999.0, 1003.0, 997.0, 1000.0], forks=[1, 1, 1, 2, 2, 2])
    pool = pool_of([none, many])
    assert pool is not None and not pool.log
    conns = next(f for f in rules.FIGURES if f.key == "conns")
    shifted = none.with_pool(pool)
    shifted = replace(shifted, mean=-1e-13)  # 0 less what taking out a block leaves
    text = conclusions.value_cell(conclusions.Row("singleton-apache5", [], {"conns": shifted}), conns)
    assert re.fullmatch(r"0\.0 ±\d+\.\d", text), text


def test_an_interval_wider_than_its_centre_is_given_by_its_ends_not_as_a_share_of_thousands():
    from ktor_lab import conclusions
    from ktor_lab.confidence import Estimate

    wild = Estimate.of([0.01, 5.0, 0.2, 40.0, 0.05, 9.0], forks=[1, 1, 1, 2, 2, 2])
    assert wild.half_width is not None and wild.half_width > 1
    figure = next(f for f in rules.FIGURES if f.key == "cpu")
    text = conclusions.value_cell(conclusions.Row("per-call-java", [], {"cpu": wild}), figure)
    assert re.fullmatch(r"[\d.]+ \([\d.e-]+ to [\d,.]+\)", text) and "%" not in text, text
    low, high = (float(x.replace(",", "")) for x in text.split("(")[1].rstrip(")").split(" to "))
    assert low < wild.mean < high


def test_a_run_smaller_than_its_part_says_what_it_left_out_and_the_command_that_measures_it():
    cases = ("singleton-cio", "singleton-okhttp")
    results = tls_results({(c, p): 3.0 for c in cases for p in ("http", "https")})
    study = STUDIES["protocols"]
    (part,) = study.all_parts()
    verdict = plans.page(study, "lab study protocols", {part.name: results}).split("\n## ")[1]
    (line,) = [x for x in verdict.splitlines() if "a smaller run than the part's own" in x]
    full = plans.part_plan(part, {})
    for case in full.cases:
        assert (case.id in line) == (case.id not in cases), case.id
    assert "protocol h2" in line  # the run had http and https, the part h2 too
    assert f"`lab study protocols --parts {part.name}`" in line
    dispatchers = STUDIES["dispatchers"]
    one = plans.page(dispatchers, "lab study dispatchers --parts slow", {"slow": results}, planned=["slow"])
    assert "- Part distance (100 requests a second to an upstream 80 ms away): not in this run " in one
    assert "`lab study dispatchers --parts distance`" in one and "Part slow" not in one
    whole = replace(results, plan=replace(results.plan, cases=full.cases, dims=full.dims))
    assert plans.smaller(study, part, whole) == ""


PROTOCOLS = ("http", "https")


def test_a_change_held_at_two_settings_is_named_with_its_setting_and_once_where_never_compared():
    # protocols over two distances: the step http -> https holds each case at RTT 0 and 80 ms, and
    # one of them failed requests at 80 ms. Its name carries the distance, and it is named once,
    # not under every figure; the first screens follow the protocols' order, not the rows'.
    rng = np.random.default_rng(5)
    cases = [Case.parse("singleton-cio"), Case.parse("singleton-okhttp")]
    runs = []
    for fork in (1, 2):
        for c in cases:
            for p in ("https", "http"):  # https measured first: the page still reads http first
                for rtt in (0, 80):
                    for n in (1, 2, 3):
                        w = window(c, p, fork, n, 3.0 * math.exp(rng.normal(0, 0.05)))
                        w.dims["rtt_ms"] = rtt
                        w.locust.failures = 1000 if (c.engine, rtt) == ("okhttp", 80) else 0
                        runs.append(w)
    plan = Plan(cases, ["static-small"], [parse_load("rate/200/40")], repeats=3, forks=2,
                dims={"protocol": ["https", "http"], "rtt_ms": [0, 80]})  # fmt: skip
    env = {"commit": "0" * 16, "dirty": False, "machine": {"cpus": 2, "cpu_model": "x", "memory_gib": 1},
           "versions": {}}  # fmt: skip
    results = Results(plan=plan, backend={"kind": "native"}, environment=env, started="", runs=runs)
    study = replace(STUDIES["protocols"], screens=True)
    page = plans.page(study, "lab study protocols", {"rate": results})
    line = next(x for x in page.splitlines() if "protocol http -> https: of 4 cases" in x)
    assert line.count("singleton-okhttp with RTT 80 ms") == 1, line
    assert line.endswith("not compared on any figure: singleton-okhttp with RTT 80 ms (errors)."), line
    assert "no clear difference for singleton-cio, singleton-cio with RTT 80 ms, singleton-okhttp" in line
    lines = page.splitlines()
    http, https = (next(i for i, x in enumerate(lines) if f", protocol {p}: " in x) for p in PROTOCOLS)
    assert http < https
    # each screen names its rows by what sets them apart within it: the distance, not the protocol
    assert "cio rtt 80 " in lines[http] and "protocol" not in lines[http].split(": ", 1)[1], lines[http]


def test_replay_ranks_capacity_with_one_row_a_case_named_as_its_case():
    from ktor_lab.studies import replay

    results = tls_results(
        {(c, p): 3.0 for c in ("singleton-cio", "singleton-okhttp") for p in ("http", "https")}
    )
    for r in results.runs:  # singleton-cio as an A/A pair, at a closed loop without wait
        r.load = parse_load("closed/50/0")
        if r.case == "singleton-cio":
            r.copy = 1 if r.dims["protocol"] == "http" else 2
            r.dims = {"protocol": "http"}
    (line,) = [w for w in replay.words({"loads": results}) if w.startswith("Capacity")]
    assert "singleton-cio " in line and "#" not in line, line


def test_a_figure_measured_on_one_side_of_every_change_is_left_out_of_the_verdict_not_listed():
    # carrier threads exist only where the proxy ran on virtual threads: here only over https, so
    # no change http -> https can compare them, and the verdict says nothing of them
    results = tls_results(
        {(c, p): 3.0 for c in ("singleton-cio", "singleton-okhttp") for p in ("http", "https")}
    )
    for r in results.runs:
        r.prometheus.carriers_max = 2.0 if r.dims["protocol"] == "https" else None
    study = replace(STUDIES["protocols"], figures=("cpu_no_jit", "carriers"))
    page = plans.page(study, "lab study protocols", {"rate": results})
    line = next(x for x in page.splitlines() if "protocol http -> https: of 2 cases" in x)
    assert "CPU per request" in line and "carrier" not in line, line


def test_a_part_s_heading_names_only_the_loads_the_command_added_to_its_own():
    results = tls_results(
        {(c, p): 3.0 for c in ("singleton-cio", "singleton-okhttp") for p in ("http", "https")}
    )
    (part,) = STUDIES["protocols"].all_parts()  # its own load: rate/200/40, as the results ran
    assert plans.heading(part, results) == part.what
    for r in results.runs:
        r.load = parse_load("rate/300/40")
    results.plan = replace(results.plan, loads=[parse_load("rate/300/40")])
    assert plans.heading(part, results) == f"{part.what}; measured at rate/300/40 instead (--loads)"
    results.plan = replace(results.plan, loads=[parse_load("rate/200/40"), parse_load("rate/300/40")])
    assert plans.heading(part, results) == f"{part.what}; also at rate/300/40 (--loads)"
