"""`lab run` and `lab report` without any part: option parsing, the plan, the verdict rules,
quantiles, and the report from a stored result."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests

from ktor_lab import conclusions, metrics, run_report, verdict
from ktor_lab.cases import SCENARIOS, Case
from ktor_lab.cli import main
from ktor_lab.paths import LOCUST_DIR
from ktor_lab.plan import Load, Plan, parse_load
from ktor_lab.results import Leak, LocustFigures, MachineFigures, Results, Run, Warmup

FIXTURE = Path(__file__).parents[1] / "fixtures" / "results-small"
LAB = str(Path(sys.executable).with_name("lab"))


# --- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,load",
    [
        ("closed/50/0", Load("closed", 50)),
        ("closed/1000/1-2", Load("closed", 1000, 1.0, 2.0)),
        ("rate/500", Load("rate", 50, target_rps=500.0)),
        ("rate/20", Load("rate", 10, target_rps=20.0)),
        ("rate/500/200", Load("rate", 200, target_rps=500.0)),
    ],
)
def test_load_levels_parse(text, load):
    assert parse_load(text) == load
    assert parse_load(load.label) == load


@pytest.mark.parametrize(
    "text", ["closed/50", "closed/0/0", "closed/50/2-1", "rate/0", "rate/x", "open/5", ""]
)
def test_bad_load_levels_name_the_accepted_forms(text):
    with pytest.raises(ValueError, match=re.escape("closed/USERS/WAIT")):
        parse_load(text)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--cases", "singleton-netty"], "unknown case 'singleton-netty'; valid cases: singleton-cio"),
        (["--scenarios", "huge"], "unknown scenario 'huge'; valid scenarios: static-small"),
        (["--loads", "closed/x/1"], "load level 'closed/x/1' is not valid"),
        (["--windows", "0"], "windows and duration must be at least 1"),
        (["--forks", "0"], "forks must be at least 1"),
        (
            ["--cases", "singleton-cio,per-call-cio", "--aa", "per-call-java"],
            "the A/A case 'per-call-java' is not one of the cases",
        ),
        (["--set", "NOEQUALS"], "--set takes NAME=VALUE"),
    ],
)
def test_bad_run_options_stop_with_a_message(argv, message, capsys):
    assert main(["run", *argv]) == 2
    assert message in capsys.readouterr().err


def test_run_needs_docker_for_the_compose_backend(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["run", "--backend", "compose", "--cases", "singleton-cio"]) == 2
    assert "docker is missing" in capsys.readouterr().err


def test_windows_are_interleaved_across_the_proxies_and_an_aa_pair_is_two_rows():
    from ktor_lab.cases import CASES

    plan = Plan(list(CASES), ["static-small"], [parse_load("rate/10")], repeats=4)
    rounds = [[r.proxy for r in plan.runs() if r.repeat == n] for n in range(1, 5)]
    # Each round goes through every proxy once (A B C A B C), in an order of its own: no row always
    # follows the same neighbour, and the same plan gives the same order (a dry run shows it).
    assert all(sorted(map(str, r)) == sorted(map(str, plan.proxies())) for r in rounds)
    assert len({tuple(r) for r in rounds}) == 4 and plan.runs() == plan.runs()
    # The A/A case gets a second proxy, as a row of its own; forks pool more proxies into one row.
    paired = Plan(
        ["singleton-cio", "per-call-cio"], ["static-small"], [parse_load("rate/10")], aa="per-call-cio"
    )
    assert [p.title for p in paired.proxies()] == ["singleton-cio", "per-call-cio #1", "per-call-cio #2"]
    forked = Plan(["singleton-cio", "per-call-cio"], ["static-small"], [parse_load("rate/10")], forks=2)
    assert [p.title for p in forked.proxies()] == [  # every row's first JVM, then every second
        "singleton-cio",
        "per-call-cio",
        "singleton-cio fork 2",
        "per-call-cio fork 2",
    ]
    # A case named twice is an A/A pair of its own: no other is added.
    twice = Plan(["singleton-okhttp", "singleton-okhttp"], ["static-small"], [parse_load("rate/10")], aa="")
    assert [p.row for p in twice.proxies()] == ["singleton-okhttp #1", "singleton-okhttp #2"]


def test_a_plan_larger_than_what_fits_in_memory_is_measured_in_groups_of_proxies():
    from ktor_lab.cases import CASES
    from ktor_lab.measure import MAX_PROXIES_UP, batches

    plan = Plan(list(CASES), ["static-small"], [parse_load("rate/10")], forks=2, aa="singleton-cio")
    groups = batches(plan)
    assert [len(g) for g in groups] == [11, 11]  # a fork of every row in each: blocks of the design
    assert [{p.fork for p in g} for g in groups] == [{1}, {2}]
    assert [p for g in groups for p in g] == plan.proxies()  # every proxy once, in the plan's order
    wide = Plan(list(CASES), ["static-small"], [parse_load("rate/10")], forks=2, dims={"java": ["17", "25"]})
    assert [len(g) for g in batches(wide)] == [MAX_PROXIES_UP, 20 - MAX_PROXIES_UP] * 2
    assert len(batches(Plan(list(CASES), ["static-small"], [parse_load("rate/10")], aa="singleton-cio"))) == 1


def test_lab_run_adds_the_aa_pair_of_its_first_case_unless_told_or_already_paired():
    from ktor_lab.cli import main_parser
    from ktor_lab.commands.run import plan_of

    def aa(*argv):
        return plan_of(main_parser().parse_args(["run", *argv])).aa

    assert aa() == "singleton-cio" and aa("--cases", "per-call-java,singleton-cio") == "per-call-java"
    assert aa("--aa", "none") == "" and aa("--cases", "singleton-okhttp,singleton-okhttp") == ""
    assert aa("--cases", "singleton-okhttp") == ""  # one case: nothing to compare
    assert aa("--cases", "singleton-cio,per-call-cio", "--aa", "per-call-cio") == "per-call-cio"


def test_lab_runs_default_matrix_is_both_lifetimes_of_every_engine_ktor_still_publishes():
    # apache's rows would run on its last release (3.4.1) beside the others' default: left out
    # unless named, or with `all`, and then named deprecated as before.
    from ktor_lab.cases import CASES, DEPRECATED_ENGINES, ENGINES, LIFETIMES
    from ktor_lab.cli import main_parser
    from ktor_lab.commands.run import plan_of

    def plan(*argv):
        return plan_of(main_parser().parse_args(["run", *argv]))

    default = plan()
    current = [e for e in ENGINES if e not in DEPRECATED_ENGINES]
    assert DEPRECATED_ENGINES == ("apache",) and {c.engine for c in default.cases} == set(current)
    assert len(default.cases) == len(set(default.cases)) == len(LIFETIMES) * len(current)
    rows = len(default.cases) + 1  # and the A/A pair's second proxy
    assert len(default.proxies()) == rows * default.forks and default.aa == "singleton-cio"
    assert default.to_json() == Plan.default().to_json()  # `lab run` with nothing is Plan.default()
    assert [c.id for c in plan("--cases", "all").cases] == list(CASES)
    assert [c.id for c in plan("--cases", "singleton-apache,singleton-cio").cases] == [
        "singleton-apache",
        "singleton-cio",
    ]


def test_scenarios_are_the_locustfiles():
    # Read from the locustfile's user classes (cases.scenarios); the same by a plain text search.
    text = (LOCUST_DIR / "locustfile.py").read_text()
    assert tuple(re.findall(r'@scenario\("([\w-]+)"\)', text)) == SCENARIOS
    assert SCENARIOS[0] == "static-small" and "mix" in SCENARIOS


# --- verdicts --------------------------------------------------------------------------------


def a_run(model="closed", users=50, wait=(0.0, 0.0), target=0.0, rps=1000.0, avg_ms=20.0, cpu=40.0, fails=0):
    return Run(
        case="singleton-cio",
        engine="cio",
        lifetime="singleton",
        scenario="static-small",
        load=Load(model, users, wait[0], wait[1], target),
        repeat=1,
        warmup=Warmup(seconds=20, settled=True),
        locust=LocustFigures(
            rps=rps,
            avg_ms=avg_ms,
            requests=int(rps * 30),
            failures=fails,
            cpu_peak_percent={"local": cpu},
            saturated=cpu >= 90,
        ),
    )


def test_the_earlier_compose_labs_setup_is_flagged_as_load_model_bound():
    # 1000 users, 1-2 s wait: singleton CIO ~600 rps at 100 ms, per-call Apache ~150 rps at 5 s.
    fast = verdict.judge(a_run(users=1000, wait=(1, 2), rps=600, avg_ms=100))
    assert fast.flags == ["load-model"] and not fast.capacity
    assert "1000 users / (1.5 s wait + 100 ms) = 625 rps, measured 600" in fast.reasons[0]
    # With 5 s latency the wait no longer dominates the cycle: the rate is not the wait's.
    slow = verdict.judge(a_run(users=1000, wait=(1, 2), rps=150, avg_ms=5000))
    assert "load-model" not in slow.flags


def test_a_saturated_generator_is_flagged_whatever_the_model():
    v = verdict.judge(a_run(cpu=97))
    assert v.flags == ["generator-saturated"] and not v.capacity
    assert "97%" in v.reasons[0]


def test_rate_model_that_reached_its_target_is_not_capacity():
    assert verdict.judge(a_run("rate", 50, target=500, rps=498)).flags == ["target"]
    fell_short = verdict.judge(a_run("rate", 50, target=5000, rps=2100))
    assert fell_short.capacity, fell_short


def test_no_wait_and_an_idle_generator_is_capacity():
    assert verdict.judge(a_run()) == verdict.Verdict([], True, [])


def test_errors_and_a_short_warm_up_are_flagged():
    run = a_run(fails=500)
    run.warmup.settled = False
    assert verdict.judge(run).flags == ["errors", "not-warm"]


def test_a_window_whose_own_jit_was_quiet_is_warm_whatever_its_warm_up_s_end():
    """At a fixed rate a per-call client can keep the JIT above the warm-up's share of a core for
    minutes: its warm-up never settles, yet its windows' JIT (measured) is under 10%."""
    run = a_run()
    run.warmup.settled = False
    run.window.seconds = 10.0
    run.proxy.jit_cpu_seconds_in_window = 0.5
    assert "not-warm" not in verdict.judge(run).flags
    run.proxy.jit_cpu_seconds_in_window = 1.5  # 15% of a core: still compiling
    assert "not-warm" in verdict.judge(run).flags
    run.proxy.jit_cpu_seconds_in_window = None  # not seen (compose): the warm-up's word stands
    assert "not-warm" in verdict.judge(run).flags


def test_the_callers_connections_and_pools_are_not_a_leak_but_one_per_request_is():
    """200 Locust users keep their 200 connections to the proxy open after the load stops (the
    generator's files), and a singleton's pool may keep a connection and a thread per request
    that was in flight (OkHttp: 225 threads, Apache5: 207 files at 200 users). A leak grows with
    the requests instead: thousands at 100 rps."""
    run = a_run("rate", 200, target=100, rps=100)
    run.leak = Leak(6, 15, 240, 30, 437, callers_idle=0, callers_after=200)  # measured, singletons
    assert "leak" not in verdict.judge(run).flags
    run.leak = Leak(6, 15, 240, 30, 637)  # a proxy of before the gauge: no callers known
    assert "leak" in verdict.judge(run).flags
    run.leak = Leak(6, 15, 3015, 30, 230, callers_idle=0, callers_after=200)  # a thread per request
    assert "leak" in verdict.judge(run).flags
    run.leak = Leak(6, 15, 60, 30, 852, callers_idle=0, callers_after=200)
    v = verdict.judge(run)
    assert "leak" in v.flags
    said = "622 open files above the idle proxy's 6 s after the load stopped, the callers' 200 open "
    said += "connections left out (threshold 400 and 400: 200 and 200, and one of each per user"
    assert said in " ".join(v.reasons)


def test_a_run_while_other_work_took_the_cpus_is_not_capacity():
    run = a_run()
    run.machine = MachineFigures(cpus=2, window_s=30, others_cores=0.05, others_share=0.025)
    assert verdict.judge(run).flags == []
    run.machine = MachineFigures(cpus=2, window_s=30, others_cores=0.9, others_share=0.45)
    v = verdict.judge(run)
    assert v.flags == ["machine-busy"] and not v.capacity
    assert "other processes used 0.90 of 2 CPUs (45%; threshold 10%)" in v.reasons[0]
    run.machine = MachineFigures(cpus=2, window_s=30, steal_share=0.2)
    assert verdict.judge(run).flags == ["machine-busy"]


def test_latency_the_generator_added_is_said_but_does_not_take_capacity():
    run = a_run()
    run.locust.p50_ms, run.proxy.server_p50_ms = 4.0, 0.6  # 3.4 ms added: under the 5 ms margin
    assert verdict.judge(run).flags == []
    run.locust.p50_ms, run.proxy.server_p50_ms = 40.0, 2.0
    v = verdict.judge(run)
    assert v.flags == ["generator-latency"] and v.capacity
    assert "Locust's p50 40 ms against the proxy's own 2 ms" in v.reasons[0]
    run.locust.p50_ms, run.proxy.server_p50_ms = 300.0, 250.0  # both slow: the proxy's own latency
    assert verdict.judge(run).flags == []


def test_highs_from_fewer_scrapes_than_prometheus_tried_are_said_but_do_not_take_capacity():
    """Per-call Java's /metrics missed the 2 s scrape timeout under load in CI: one of two scrapes
    answered, so its threads high was of one sample."""
    run = a_run()
    run.prometheus.scrapes_tried, run.prometheus.scrapes_answered = 3.0, 3.0
    assert verdict.judge(run).flags == []
    run.prometheus.scrapes_tried, run.prometheus.scrapes_answered = None, None  # a results.json of before
    assert verdict.judge(run).flags == []
    run.prometheus.scrapes_tried, run.prometheus.scrapes_answered = 2.0, 1.0
    v = verdict.judge(run)
    assert v.flags == ["scrapes-missed"] and v.capacity
    assert "Prometheus got 1 of its 2 scrapes of the proxy in time" in v.reasons[0]
    run.prometheus.scraped_after_end = False  # and its figures read before the scrape after it: both said
    v = verdict.judge(run)
    assert v.flags == ["scrapes-missed"] and "1 of its 2 scrapes" in v.reasons[0]
    assert "had not scraped the proxy since the window ended" in v.reasons[0]


def test_a_window_whose_figures_were_read_before_prometheus_scraped_it_again_is_flagged(monkeypatch):
    """The lab waits two scrape intervals for Prometheus' first scrape after the window (its last
    samples) and reads the figures then; a wait that ran out, or a run stopped inside it (Ctrl-C),
    leaves figures that end early or are missing: the window says so, is recorded once, and only
    the run's error goes on."""
    from types import SimpleNamespace

    from ktor_lab import measure
    from ktor_lab.backends import ProxyHandle
    from ktor_lab.results import PrometheusFigures

    class Backend:
        prometheus_url, auth = "http://127.0.0.1:1", None

        def connections(self, started, ended):
            return None  # not readable

    live = measure.Live(None, ProxyHandle("http://127.0.0.1:2", 1, "127.0.0.1:2", None), metrics.Samples(""))
    edges = SimpleNamespace(started=0.0, ended=10.0, time_wait=None)
    monkeypatch.setattr(measure, "prometheus_figures", lambda *a: PrometheusFigures(scrapes_tried=5.0))
    for seen in (True, False):
        monkeypatch.setattr(measure, "last_scrape", lambda *a, seen=seen: seen)
        recorded: list[Run] = []
        run = measure.Finish(Backend(), live, a_run(), edges, lambda _, r, out=recorded: out.append(r))()
        assert recorded == [run] and run.prometheus.scraped_after_end is seen
        assert ("scrapes-missed" in run.verdict.flags) is not seen, run.verdict

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "last_scrape", interrupted)
    recorded = []
    finish = measure.Finish(Backend(), live, a_run(), edges, lambda live, run: recorded.append(run))
    with pytest.raises(KeyboardInterrupt):
        finish()
    finish()  # lab run's last flush: not again
    assert len(recorded) == 1 and recorded[0].verdict.flags == ["scrapes-missed"]
    assert "since the window ended" in recorded[0].verdict.reasons[0]

    def unreadable(*a):
        raise requests.ConnectionError("Prometheus went away")

    # scraped after the window, but its figures could not be read: not passed off as read
    monkeypatch.setattr(measure, "last_scrape", lambda *a: True)
    monkeypatch.setattr(measure, "prometheus_figures", unreadable)
    recorded = []
    finish = measure.Finish(Backend(), live, a_run(), edges, lambda live, run: recorded.append(run))
    with pytest.raises(requests.ConnectionError):
        finish()
    assert len(recorded) == 1 and recorded[0].verdict.flags == ["scrapes-missed"]


def test_histogram_quantiles_follow_prometheus():
    before = {0.001: 5.0, 0.002: 5.0, 0.004: 5.0, float("inf"): 5.0}
    after = {0.001: 15.0, 0.002: 55.0, 0.004: 95.0, float("inf"): 105.0}
    window = metrics.delta(before, after)
    assert window == {0.001: 10.0, 0.002: 50.0, 0.004: 90.0, float("inf"): 100.0}
    assert metrics.quantile(window, 0.5) == pytest.approx(0.002)  # the 50th of 100, at 0.002
    assert metrics.quantile(window, 0.3) == pytest.approx(0.0015)  # linear within its bucket
    assert metrics.quantile(window, 0.99) == 0.004  # in +Inf: the highest finite bound
    assert metrics.quantile(metrics.delta(after, after), 0.5) is None


# --- the report from a stored result -----------------------------------------------------------


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.cells: list[str] = []
        self._in_td = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_td = tag == "td"

    def handle_endtag(self, tag):
        self._in_td = False

    def handle_data(self, data):
        if self._in_td:
            self.cells.append(data)


def stored_report(tmp_path: Path) -> tuple[dict, str, str]:
    for f in FIXTURE.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    assert main(["report", str(tmp_path)]) == 0
    return (
        json.loads((FIXTURE / "results.json").read_text()),
        (tmp_path / "report.md").read_text(),
        (tmp_path / "report.html").read_text(),
    )


def test_report_from_a_stored_result(tmp_path):
    results, md, page = stored_report(tmp_path)

    # One table per scenario and load, one row per case, the figures the issue lists.
    assert "## static-small, closed model, 1000 users, 1-2 s wait" in md
    # The figures this result has (one from before the proxy's own timer and the connection figures:
    # the columns no row measured are left out, as are TLS handshakes and pinned virtual threads).
    assert (
        "| case | windows | network | rps | p50 ms | p95 ms | p99 ms | errors | CPU s / 1000 req "
        "| CPU s / 1000 req less the JIT | threads max | active unparked max | heap max MiB "
        "| what set the rate |" in md
    )
    assert "full TLS" not in md.split("## Appendix")[0] and "pinned virtual threads |" not in md
    for case in results["plan"]["cases"]:
        assert re.search(rf"^\| {case} \| 2 \| none \| ", md, re.M), case
    # The earlier lab's setup is flagged, and its rps is not shown as capacity.
    earlier = [ln for ln in md.splitlines() if ln.startswith("| ") and "load-model" in ln]
    assert len(earlier) == len(results["plan"]["cases"]), md
    assert all("(not capacity)" in ln for ln in earlier)
    # The geometric mean of the two windows (one JVM: its windows are its units); no interval, as
    # every row of this old result is flagged (load-model) and no test uses it.
    singleton = [
        r for r in results["runs"] if r["case"] == "singleton-cio" and r["load"]["model"] == "closed"
    ]
    rps = [r["locust"]["rps"] for r in singleton]
    assert f"| singleton-cio | 2 | none | {math.sqrt(rps[0] * rps[1]):,.0f} (not capacity) |" in md
    # Settings beside the numbers (in the appendix), and what users should know of the engines.
    assert results["environment"]["commit"][:12] in md
    appendix = md.split("## Appendix: settings and warm-ups")[1]
    assert "max_connections=1000" in appendix and "JAVA_OPTS" in appendix
    engines = md.split("## The engines themselves")[1].split("## Appendix")[0]
    assert "deprecated since Ktor 3.4.0" in engines and "connection per request" in engines
    assert "The engines themselves" in page

    parser = Page()
    parser.feed(page)
    assert page.startswith("<!doctype html>")
    # Per scenario and load: the first screen's chart, the bars of each figure, rps and p99 over time.
    charts = 1 + len(run_report.CHARTS) + 2
    assert parser.tags.count("table") == 2 and parser.tags.count("svg") == 2 * charts
    assert "<script" not in page and "http://" not in page.split("<details")[0].replace('xmlns="http://', "")
    assert "singleton-cio" in parser.cells and "load-model" in " ".join(parser.cells)
    # The settings and warm-ups are an appendix, collapsed.
    assert page.index("<details>") > page.index("The engines themselves") and "<summary>Appendix" in page


def test_report_opens_with_the_answers_before_any_table(tmp_path):
    _, md, page = stored_report(tmp_path)
    verdict_text = md.split("## Verdict")[1].split("\n## ")[0]
    assert md.index("## Verdict") < md.index("| case |")
    # Every row of the fixture is flagged: the rate ranks nothing, and the risks name why.
    assert "Rate not the engine's: singleton-cio (load-model, not-warm)" in verdict_text
    assert "Deprecated: Apache (HttpAsyncClient 4) is deprecated in favour of apache5" in verdict_text
    # No A/A pair in this old result: the noise floor is said to be unknown.
    assert "A/A check: no A/A pair in this run" in verdict_text
    assert "What these figures are not: The upstream is nginx on this machine's loopback, 0 ms away" in md
    # The page says the same, in HTML and not in Markdown.
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<svg.*?</svg>", " ", page.split("<table")[0], flags=re.S))
    assert "A/A check: no A/A pair" in text and "higher is better" in text.lower()
    for leak in ("*", "`", "| ", "](", "##"):
        assert leak not in text.replace("`lab run --rtt 0,20`", ""), leak


def test_report_of_a_folder_without_results_says_so(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "results.json does not exist" in capsys.readouterr().err


def test_report_recomputes_verdicts_with_todays_rules():
    results = json.loads((FIXTURE / "results.json").read_text())
    changed = copy.deepcopy(results)
    for run in changed["runs"]:
        run["verdict"] = {"flags": [], "capacity": True, "reasons": []}  # as if stored by older rules
    assert run_report.markdown(Results.from_json(changed)) == run_report.markdown(Results.from_json(results))


def test_results_json_keeps_its_shape_through_the_typed_model():
    stored = json.loads((FIXTURE / "results.json").read_text())
    again = Results.from_json(stored).to_json()
    assert again["format"] == 1
    # Keys added since (the --ktor and --java dimensions) take their defaults; the rest is as stored.
    assert {k: v for k, v in again["plan"].items() if k in stored["plan"]} == stored["plan"]
    assert again["plan"]["dims"] == {}
    for old, new in zip(stored["runs"], again["runs"], strict=True):
        for part in ("load", "locust", "warmup", "window"):
            assert {k: v for k, v in new[part].items() if k in old[part]} == old[part], part
        assert new["proxy"]["upstream_requests"] == old["proxy"]["upstream_requests"]
        assert new["prometheus"]["threads_live_max"] == old["prometheus"]["threads_live_max"]


def test_a_results_json_of_another_format_is_refused(tmp_path, capsys):
    (tmp_path / "results.json").write_text(json.dumps({"format": 2}))
    assert main(["report", str(tmp_path)]) == 2
    assert "results.json has format 2; this lab reads format 1" in capsys.readouterr().err


def test_a_protocol_is_a_dimension_its_rows_name_and_change_lines_hold_alike():
    from ktor_lab.plan import Plan
    from ktor_lab.results import ConnectionFigures, Results

    runs = []
    for protocol, conns in (("http", 1.0), ("https", 1.0), ("h2", 0.2)):
        r = a_run(rps=1000 if protocol == "http" else 800)
        r.case, r.engine = "singleton-okhttp", "okhttp"
        r.dims["protocol"], r.dimensions = protocol, True
        r.ktor, r.java = "3.4.0", "17.0.15"
        r.connections = ConnectionFigures(new=int(conns * 30), per_1000_requests=conns)
        runs.append(r)
    plan = Plan(
        cases=["singleton-okhttp"],
        scenarios=["static-small"],
        loads=[runs[0].load],
        dims={"protocol": ["http", "https", "h2"]},
    )
    assert [c.name for c in plan.cases_to_run()] == [
        "singleton-okhttp",
        "singleton-okhttp protocol https",
        "singleton-okhttp protocol h2",
    ]
    results = Results(plan=plan, backend={}, environment={}, started="", runs=runs)
    (group,) = conclusions.groups(results)
    assert [row.name for row in group.rows] == [
        "singleton-okhttp ktor 3.4.0 jdk 17",
        "singleton-okhttp ktor 3.4.0 jdk 17 protocol https",
        "singleton-okhttp ktor 3.4.0 jdk 17 protocol h2",
    ]
    assert run_report.cell(group.rows[2], "conns") == "0.2"
    found = {(c.dimension, c.same, c.before_name, c.after_name) for c in conclusions.changes(group)}
    assert found == {
        ("protocol", "Ktor 3.4.0, JDK 17", "http", "https"),
        ("protocol", "Ktor 3.4.0, JDK 17", "http", "h2"),
        ("protocol", "Ktor 3.4.0, JDK 17", "https", "h2"),
    }
    # The JIT not seen here (as in compose): the lines give the CPU with it, not an empty column.
    for r in runs:
        r.proxy.upstream_requests, r.proxy.cpu_seconds, r.proxy.cpu_seconds_per_1000_requests = 1e4, 5.0, 0.5
    (group,) = conclusions.groups(results)
    line = conclusions.changes(group)[0].sentence()
    assert group.cpu_key == "cpu" and "CPU s / 1000 req 0.500 -> 0.500" in line and "less the JIT" not in line
    for r in runs:
        r.proxy.jit_cpu_seconds_in_window = 1.0
    (group,) = conclusions.groups(results)
    line = conclusions.changes(group)[0].sentence()
    assert group.cpu_key == "cpu_no_jit" and "CPU s / 1000 req less the JIT 0.400 -> 0.400" in line


def test_a_round_trip_is_a_dimension_every_row_shows_with_its_connection_figures():
    from ktor_lab.measure import explain_connections
    from ktor_lab.results import (
        ConnectionFigures,
        Leak,
        NetworkRecord,
        PrometheusFigures,
        ProxyFigures,
        Window,
    )

    runs = []
    for case, engine, rtt, conns, p50 in (
        ("singleton-okhttp", "okhttp", 0, 0.1, 2.0),
        ("per-call-okhttp", "okhttp", 0, 1000.0, 3.0),
        ("singleton-okhttp", "okhttp", 20, 0.1, 22.0),
        ("per-call-okhttp", "okhttp", 20, 1000.0, 24.0),
        ("per-call-cio", "cio", 20, 1000.0, 23.0),
    ):
        r = a_run(model="rate", target=50, rps=50)
        r.case, r.engine, r.lifetime = case, engine, case.rsplit("-", 1)[0]
        r.dims["rtt_ms"], r.dimensions = rtt, True
        r.ktor, r.java = "3.4.0", "17.0.15"
        r.locust.p50_ms = p50
        r.network = NetworkRecord(rtt, via="toxiproxy 2.12.0" if rtt else "none")
        r.window = Window(seconds=10.0)
        r.proxy = ProxyFigures(
            upstream_requests=500, server_seconds=500 * p50 / 1000, settings={"pool_metrics": "not exposed"}
            if engine == "cio" else {"pool_metrics": "exposed"},
        )  # fmt: skip
        r.prometheus = PrometheusFigures(threads_live_max=40 + rtt, time_wait_max=conns / 2 if rtt else 0)
        # Threads at work: 10 idle (Netty's loops and the like), OkHttp one more per request in flight.
        r.prometheus.threads_active_unparked_mean = 10 + (1.2 if engine == "okhttp" and rtt else 0)
        if engine == "okhttp":
            r.prometheus.pool_in_use_max, r.prometheus.pool_idle_max = 1.0 + rtt, 0.0
        r.leak = Leak(threads_idle=40)
        r.connections = ConnectionFigures(new=int(conns / 2), per_1000_requests=conns)
        explain_connections(r, 10.0)
        runs.append(r)
    # Requests in flight by Little's law: 500 requests x 24 ms over 10 s; threads at work above idle per one.
    assert runs[3].connections.in_flight_mean == 1.2
    assert runs[3].connections.threads_per_in_flight == 1.0
    assert runs[4].connections.threads_per_in_flight == 0.0  # CIO: none above idle
    assert runs[1].connections.threads_per_in_flight is None  # 0.15 in flight: nothing to divide by
    # The TCP handshake Toxiproxy does not delay: one new connection per request at 20 ms.
    assert runs[3].connections.connect_rtt_ms_per_request == 20.0
    assert runs[2].connections.connect_rtt_ms_per_request == 0.0
    plan = Plan(
        cases=["singleton-okhttp", "per-call-okhttp", "per-call-cio"],
        scenarios=["static-small"],
        loads=[runs[0].load],
        dims={"rtt_ms": [0, 20]},
    )
    results = Results(plan=plan, backend={}, environment={}, started="", runs=runs)
    (group,) = conclusions.groups(results)
    rows = {row.name: row for row in group.rows}
    assert rows["per-call-okhttp ktor 3.4.0 jdk 17 rtt 20"].network == "RTT 20 ms"
    assert rows["per-call-okhttp ktor 3.4.0 jdk 17"].network == "none"
    assert run_report.cell(rows["per-call-cio ktor 3.4.0 jdk 17 rtt 20"], "pool_in_use") == "not exposed"
    assert run_report.cell(rows["per-call-okhttp ktor 3.4.0 jdk 17 rtt 20"], "pool_in_use") == "21"
    md = run_report.table(group).markdown()
    assert re.search(r"^\| per-call-okhttp ktor 3.4.0 jdk 17 rtt 20 \| 1 \| RTT 20 ms \| ", md, re.M)
    # One dimension changed: the round trip, judged on latency and what explains it; one window a
    # side, so no test, and the line says so.
    lines = [c.sentence() for c in conclusions.changes(group) if c.dimension == "RTT"]
    assert any(
        line.startswith(
            "per-call-okhttp on Ktor 3.4.0, JDK 17, RTT 0 ms -> 20 ms: p50 ms 3.00 -> 24.00 (+700.0%"
        )
        and "new conns / 1k req 1,000.0 -> 1,000.0" in line
        and "No spread to test with (one window a row)" in line
        for line in lines
    ), lines


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--rtt", "0,fast"], "--rtt: UPSTREAM_RTT_MS='fast' is not valid; valid values: whole milliseconds"),
        (["--rtt", "20001"], "--rtt: UPSTREAM_RTT_MS='20001' is not valid"),
        (["--jitter", "-1"], "--jitter: UPSTREAM_JITTER_MS='-1' is not valid"),
        (
            ["--bandwidth", "1e3"],
            "--bandwidth: UPSTREAM_BANDWIDTH_KBPS='1e3' is not valid; valid values: KB/s",
        ),
        (["--rtt", "0,4", "--jitter", "5"], "UPSTREAM_JITTER_MS=5 is more than UPSTREAM_RTT_MS=4"),
        (["--jitter", "2"], "UPSTREAM_JITTER_MS=2 varies a round trip, and no run here has one"),
        (["--cases", "singleton-cio rtt 5", "--rtt", "20"], "names its rtt; give it there or with --rtt"),
    ],
    ids=["rtt", "rtt-too-long", "jitter", "bandwidth", "jitter-above-rtt", "jitter-no-rtt", "rtt-twice"],
)
def test_bad_network_values_stop_lab_run_in_one_line_naming_the_variable(argv, message, capsys):
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_an_exported_rtt_is_the_default_of_cases_that_name_none(monkeypatch):
    from ktor_lab.cli import main_parser
    from ktor_lab.commands.run import plan_of
    from ktor_lab.errors import LabError
    from ktor_lab.network import Network

    monkeypatch.setenv("UPSTREAM_RTT_MS", "20")
    args = main_parser().parse_args(["run", "--cases", "singleton-cio rtt 5,per-call-cio", "--jitter", "2"])
    p = plan_of(args)
    assert [c.name for c in p.cases_to_run()] == ["singleton-cio rtt 5", "per-call-cio rtt 20"]
    assert [p.network_for(c) for c in p.cases_to_run()] == [Network(5, 2, 0), Network(20, 2, 0)]
    monkeypatch.setenv("UPSTREAM_RTT_MS", "far")
    with pytest.raises(LabError, match=r"UPSTREAM_RTT_MS \(environment\): UPSTREAM_RTT_MS='far'"):
        plan_of(args)


def test_bad_network_values_stop_lab_up_in_one_line_naming_the_variable(capsys):
    assert main(["up", "singleton-cio", "--rtt", "abc"]) == 2
    assert "--rtt: UPSTREAM_RTT_MS='abc' is not valid" in capsys.readouterr().err
    assert main(["up", "singleton-cio", "--rtt", "2", "--jitter", "3"]) == 2
    assert "UPSTREAM_JITTER_MS=3 is more than UPSTREAM_RTT_MS=2" in capsys.readouterr().err


# --- a warm-up at capacity first (--warm-first) -------------------------------------------------


def test_a_not_warm_row_at_a_fixed_rate_names_warm_first_and_one_warmed_first_does_not():
    run = a_run(model="rate", users=20, target=100.0, rps=100.0)
    run.warmup = Warmup(seconds=30, settled=False)
    reason = next(r for r in verdict.judge(run).reasons if r.startswith("not warm after 30 s"))
    assert reason.endswith("--warm-first closed/50/0 warms the proxy at capacity first")
    run.warmup = Warmup(seconds=30, settled=False, first_load="closed/50/0", first_seconds=45)
    reason = next(r for r in verdict.judge(run).reasons if r.startswith("not warm after 30 s"))
    assert "--warm-first" not in reason
    # at capacity the measured load warms the JIT itself: no hint
    capacity = a_run()
    capacity.warmup = Warmup(seconds=150, settled=False)
    assert not any("--warm-first" in r for r in verdict.judge(capacity).reasons)


def test_warm_first_comes_once_per_proxy_before_its_first_other_load_and_only_with_a_warm_up():
    from ktor_lab import measure
    from ktor_lab.plan import Spec, parse_warm_first

    plan = Plan(["singleton-cio"], ["slow", "static-small"], [parse_load("rate/100")], warmup_s=30)
    assert plan.warm_first is None and parse_warm_first("none") is None and parse_warm_first("") is None
    plan.warm_first = parse_warm_first("closed/50/0")
    live = measure.Live(plan.proxies()[0], proxy=None, idle=None)  # type: ignore[arg-type]
    slow, small = (Spec(1, plan.cases[0], s, plan.loads[0]) for s in ("slow", "static-small"))
    assert measure.needs_warm_first(live, slow, plan)
    # the measured load is the warm-up's own: nothing to do first
    assert not measure.needs_warm_first(live, Spec(1, plan.cases[0], "static-small", plan.warm_first), plan)
    live.first = Warmup(seconds=45, settled=True)
    assert not measure.needs_warm_first(live, small, plan)  # once per proxy
    live.first, plan.warmup_s = None, 0
    assert not measure.needs_warm_first(live, slow, plan)  # --warmup 0: no warm-up of any kind
    # recorded with the warm-up at the measured load, and counted in the plan's time
    w = measure.with_first(Warmup(seconds=10, settled=True), Warmup(seconds=45, settled=True), plan)
    assert (w.first_load, w.first_scenario, w.first_seconds, w.first_end) == (
        "closed/50/0",
        "static-small",
        45,
        "settled",
    )
    plan.warmup_s = 30
    without = copy.copy(plan)
    without.warm_first = None
    assert measure.planned_seconds(plan) - measure.planned_seconds(without) == 30


def test_lab_run_finishes_each_window_within_the_next_records_it_once_and_flushes_before_a_batch_ends(
    monkeypatch, tmp_path
):
    """The order Session keeps, with every part faked but Session and Finish: a window's figures
    are read (its Finish) inside the next window's measure, on whichever proxy that is, and the
    window is recorded then, once, in order; the last window of a batch is finished before its
    proxies' leak checks and stops; a window that fails before its settle still has the window
    before it finished and recorded, and its own error is the one raised."""
    from ktor_lab import measure

    events: list[tuple] = []
    failing: set[tuple[str, int]] = set()

    class Backend:
        keeps_proxies, scrape_seconds = True, 2

        def describe(self) -> dict:
            return {"kind": "fake"}

        def stop_case(self, proxy) -> None:
            events.append(("stop", proxy))

    def fake_measure(backend, live, spec, plan, others, finishing, recorded):
        events.append(("measure", spec.case.id, spec.repeat))
        if (spec.case.id, spec.repeat) in failing:
            raise RuntimeError(f"{spec.case.id} {spec.repeat} failed")
        if finishing is not None and not finishing.done:
            finishing()  # what the real one does within this window's settle
        run = Run(spec.case.id, spec.case.engine, spec.case.lifetime, spec.scenario, spec.load, spec.repeat)
        return measure.Finish(backend, live, run, None, recorded)

    monkeypatch.setattr(measure, "environment", lambda: {})
    monkeypatch.setattr(measure, "start_live", lambda b, p, plan, keep: measure.Live(p, p.case.id, None))
    monkeypatch.setattr(measure, "measure", fake_measure)
    monkeypatch.setattr(
        measure, "finish_window", lambda b, live, run, e: events.append(("finish", run.case, run.repeat))
    )
    monkeypatch.setattr(measure, "finish_leak_check", lambda b, live: events.append(("leak", live.proxy)))
    monkeypatch.setattr(measure.Progress, "show", lambda self, what: None)
    monkeypatch.setattr(measure.Progress, "finish_one", lambda self, line: events.append(("recorded",)))
    monkeypatch.setattr(measure, "summary_line", lambda run: "")
    plan = Plan(
        ["singleton-cio", "singleton-okhttp"], ["static-small"], [parse_load("rate/10")], repeats=2, spare=0
    )
    results = measure.run_plan(plan, Backend(), tmp_path)
    order = [(r.case, r.repeat) for r in results.runs]
    assert sorted(order) == sorted({(s.case.id, s.repeat) for s in plan.runs()}) and len(order) == 4
    steps = [e for e in events if e[0] in ("measure", "finish")]
    taken = [e[1:] for e in steps if e[0] == "measure"]
    assert [e[1:] for e in steps if e[0] == "finish"] == taken == order
    for before, after in zip(taken, taken[1:], strict=False):  # finished inside the next measure
        assert steps.index(("finish", *before)) == steps.index(("measure", *after)) + 1
    assert events.count(("recorded",)) == 4 and events.index(("finish", *order[-1])) < min(
        i for i, e in enumerate(events) if e[0] in ("leak", "stop")
    )
    written = json.loads((tmp_path / "results.json").read_text())
    assert [(r["case"], r["repeat"]) for r in written["runs"]] == order

    events.clear()
    failing.add((taken[1][0], taken[1][1]))
    with pytest.raises(RuntimeError, match="failed"):
        measure.run_plan(plan, Backend(), tmp_path)
    assert [e for e in events if e[0] == "finish"] == [("finish", *taken[0])]
    assert [
        (r["case"], r["repeat"]) for r in json.loads((tmp_path / "results.json").read_text())["runs"]
    ] == [taken[0]]

    class Fresh(Backend):  # a fresh proxy a window (compose): finished at once, then recorded
        keeps_proxies = False

    def interrupted(*_):
        raise KeyboardInterrupt  # Ctrl-C while the first window's figures are read

    failing.clear()
    monkeypatch.setattr(measure, "finish_window", interrupted)
    results = measure.run_plan(plan, Fresh(), tmp_path)
    assert results.interrupted and len(results.runs) == 1
    assert "scrapes-missed" in results.runs[0].verdict.flags, results.runs[0].verdict  # (a fake: not warm)


def test_a_slower_scrape_interval_lengthens_the_planned_window_by_what_outlasts_the_settle():
    """A window's finish (its last scrape, nginx's log) is waited for within the next window's 2 s
    settle: natively, scraped every 2 s, it fits; on Swarm, every 5 s, up to 3 s more a window."""
    from ktor_lab import measure
    from ktor_lab.backends import NativeBackend, SwarmBackend

    plan = Plan.default()
    assert NativeBackend.scrape_seconds == measure.SCRAPE_S
    native = measure.kept_window_seconds(plan)
    assert native == plan.settle_s + plan.duration_s + measure.WINDOW_OVERHEAD_S
    assert measure.kept_window_seconds(plan, SwarmBackend.scrape_seconds) - native == 5 - plan.settle_s
    windows = len(plan.runs())
    more = measure.planned_seconds(plan, True, 5) - measure.planned_seconds(plan)
    assert more == windows * (5 - plan.settle_s)


def test_the_eta_counts_the_warm_ups_left_apart_from_the_windows_left(monkeypatch, capsys):
    """The default matrix warms 11 proxies in its first 11 windows (minutes) and then measures 44
    windows of seconds: an ETA of (time so far / windows done) x windows left read 100 min 15 min
    into a run that ended 23 min later."""
    from ktor_lab import measure

    plan = Plan(["singleton-cio", "per-call-cio"], ["static-small"], [parse_load("closed/50/0")], repeats=3)
    plan.warm_first = None
    order = plan.runs()
    warms = measure.warming(order, keep=True)
    assert warms == [True, True, False, False, False, False]
    assert measure.warming(order, keep=False) == [True] * 6  # a fresh proxy per window warms each
    clock = [1000.0]
    monkeypatch.setattr(measure.time, "monotonic", lambda: clock[0])
    progress = measure.Progress(warms, 150, 18)
    assert progress.eta() == 2 * 150 + 4 * 18  # the plan's limits before any window
    for took in (60, 70, 10):  # two warm-ups, then one window
        clock[0] += took
        progress.finish_one("")
    assert progress.eta() == 3 * 10  # windows left, at the measured window's time
    progress = measure.Progress(warms, 150, 18)
    clock[0] += 60
    progress.finish_one("")
    assert progress.eta() == 60 + 4 * 18  # one warm-up left at the measured one's time
    capsys.readouterr()


def test_warm_first_and_its_record_survive_results_json(tmp_path):
    plan = Plan(["singleton-cio"], ["slow"], [parse_load("rate/50")], warm_first=parse_load("closed/50/0"))
    run = a_run(model="rate", users=10, target=50.0, rps=50.0)
    run.warmup = Warmup(seconds=10, settled=True, first_load="closed/50/0", first_scenario="static-small")
    results = Results(plan, {"kind": "native"}, {"versions": {}, "machine": {}}, "now", runs=[run])
    again = Results.from_json(json.loads(json.dumps(results.to_json())))
    assert again.plan.warm_first == parse_load("closed/50/0")
    assert again.runs[0].warmup.first_load == "closed/50/0"
    # a results.json written before --warm-first reads as none
    old = results.to_json()
    del old["plan"]["warm_first"]
    assert Results.from_json(old).plan.warm_first is None


def test_a_proxy_that_collapsed_in_its_warm_up_at_capacity_is_not_passed_as_warm():
    run = a_run(model="rate", users=20, target=100.0, rps=100.0)
    run.warmup = Warmup(seconds=10, settled=True, first_load="closed/50/0", first_end="stopped answering")
    v = verdict.judge(run)
    assert "not-warm" in v.flags
    assert any(r.startswith("stopped answering in its first warm-up, at closed/50/0") for r in v.reasons)


def test_fail_on_turns_the_flags_it_names_into_exit_1_each_named_with_its_reason(capsys):
    """A CI job's check, as k6's thresholds: --fail-on errors, leak, ... (none by default): exit 1 when a
    window carries one, each window and flag on stderr with the verdict's reason; unknown flags are
    refused by the parser, naming the known ones."""
    import argparse

    from ktor_lab import verdict
    from ktor_lab.commands.run import fail_on, failed_checks
    from ktor_lab.plan import parse_load
    from ktor_lab.results import Run, Verdict

    def window(*flags: str) -> Run:
        r = Run("singleton-cio", "cio", "singleton", "static-small", parse_load("closed/50/0"), 1)
        r.verdict = Verdict(list(flags), True, [f"why {f}" for f in flags])
        return r

    runs = [window(), window("leak", "not-warm"), window("errors")]
    assert (
        fail_on("errors") == ("errors",)
        and fail_on("none") == ()
        and fail_on("leak, errors") == ("leak", "errors")
    )
    assert failed_checks(runs, fail_on("none")) == 0 and capsys.readouterr().err == ""
    assert failed_checks(runs, fail_on("errors")) == 1
    assert (
        capsys.readouterr().err
        == "lab run: singleton-cio static-small closed/50/0 #1: errors: why errors (--fail-on errors)\n"
    )
    assert failed_checks(runs, fail_on("leak,errors")) == 1
    assert capsys.readouterr().err.count("\n") == 2
    assert failed_checks(runs, fail_on("proxy-exceptions")) == 0
    with pytest.raises(argparse.ArgumentTypeError, match=r"^lek: not a flag \(known: generator-saturated"):
        fail_on("lek")
    assert set(verdict.FLAGS) >= {"errors", "leak", "not-warm", "machine-busy", "scrapes-missed"}


def test_results_csv_has_a_line_per_window_with_its_figures_and_flags(tmp_path):
    import csv
    import shutil

    from ktor_lab import run_report
    from ktor_lab.rules import WINDOW_FIGURES as FIGURES

    shutil.copy(Path(__file__).parents[1] / "fixtures" / "results-small" / "results.json", tmp_path)
    run_report.write_report(tmp_path)
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    results = run_report.load(tmp_path)
    assert len(rows) == len(results.runs)
    first, run = rows[0], results.runs[0]
    assert (first["row"], first["load"], first["window"]) == (run.row, run.load.label, str(run.repeat))
    assert float(first["rps"]) == pytest.approx(run.locust.rps) and first["flags"] == " ".join(
        run.verdict.flags
    )
    assert list(first)[-len(FIGURES) - 1 : -1] == [f.heading for f in FIGURES]


def test_the_report_shows_each_rows_windows_over_the_run():
    """Rates and latency over time (issue: a load tester expects a series): per scenario and load,
    rps and p99 per window at the window's start, one line per row, its points in time order."""
    from ktor_lab import render
    from ktor_lab.results import load

    results = load(Path(__file__).parents[1] / "fixtures" / "results-small")
    page = run_report.page(results)
    assert page.count("<title>rps per window over the run</title>") == len(results.plan.loads)
    assert page.count("<title>p99 ms per window over the run</title>") == len(results.plan.loads)
    svg = render.series("t", {"a": [(0, 1), (1, 3), (2, 2)], "b": [(0.5, 2)], "none": []}, digits=0)
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 4 and ">none<" not in svg
    assert 'points="60.0,163.3 320.0,30.0 580.0,96.7"' in svg  # 0..2 min across, 0..3 up (y grows down)


def test_spare_windows_are_measured_only_while_a_proxy_would_keep_fewer_than_its_windows():
    from ktor_lab.measure import spare_round
    from ktor_lab.plan import Plan, ProxySpec

    plan = Plan(
        ["singleton-cio", "singleton-okhttp"], ["static-small"], [parse_load("rate/10")], repeats=3, spare=2
    )
    load = plan.loads[0]
    cio, okhttp = (ProxySpec(Case.parse(c)) for c in ("singleton-cio", "singleton-okhttp"))

    def window(flags=(), spare=False):
        r = a_run()
        r.verdict.flags, r.spare = list(flags), spare
        return r

    busy, failed = ("machine-busy",), ("errors", "machine-busy")
    taken = {
        (cio, "static-small", load): [window(), window(busy), window()],
        (okhttp, "static-small", load): [window(), window(failed), window()],  # the engine's: kept
    }
    [spare] = spare_round(plan, taken, seed=3)
    assert (spare.case.id, spare.repeat, spare.scenario, spare.load) == (
        "singleton-cio",
        4,
        "static-small",
        load,
    )
    # a spare left out too: one more, then no more than plan.spare
    taken[(cio, "static-small", load)].append(window(("not-warm",), spare=True))
    assert [s.repeat for s in spare_round(plan, taken, seed=4)] == [5]
    taken[(cio, "static-small", load)].append(window(("not-warm",), spare=True))
    assert spare_round(plan, taken, seed=5) == []
    # kept in full: none
    taken[(cio, "static-small", load)][-1] = window(spare=True)
    taken[(cio, "static-small", load)][-2] = window(spare=True)
    assert spare_round(plan, taken, seed=5) == []
    # a proxy that stopped answering in its warm-up: every window of it is left out, a spare too
    cold = window(("not-warm",))
    cold.warmup = dataclasses.replace(cold.warmup, first_end="stopped answering")
    assert spare_round(plan, {(cio, "static-small", load): [cold, cold, cold]}, 6) == []
    cold.warmup = dataclasses.replace(cold.warmup, first_end="settled", collapsed=True)
    assert spare_round(plan, {(cio, "static-small", load): [cold, cold, cold]}, 6) == []
    assert len(spare_round(plan, {(cio, "static-small", load): [window(("not-warm",))] * 3}, 6)) == 1
    assert (
        spare_round(dataclasses.replace(plan, spare=0), {(cio, "static-small", load): [window(busy)]}, 1)
        == []
    )


def test_a_row_says_how_many_of_its_windows_are_spares():
    runs = [a_run(), a_run(), a_run(), a_run()]
    runs[1].machine = MachineFigures(cpus=2, window_s=30, others_cores=0.9, others_share=0.45)  # busy
    runs[3].spare = True
    for i, r in enumerate(runs):
        r.repeat = i + 1
    plan = Plan(["singleton-cio"], ["static-small"], [runs[0].load], repeats=3, spare=2)
    (group,) = conclusions.groups(Results(plan=plan, backend={}, environment={}, started="", runs=runs))
    (row,) = group.rows
    assert len(row.runs) == 3 and row.left == [runs[1]]
    assert "1 of 4 windows left out of its figures, which are its other 3: machine-busy in 1" in " ".join(
        row.reasons
    )
    assert "1 of its windows are spares, measured in place of those left out (--spare)" in row.reasons


def test_at_the_rate_model_users_start_as_evenly_as_their_requests():
    """600 users paced to 250 rps together start over 2.4 s (250 a second), not in one second: all
    at once they stay in step, and a window after an idle proxy's settle caught 220 of the 250 rps
    on a 2 s upstream. Loads whose users start within a second as before are unchanged."""
    from ktor_lab import measure

    started = []

    class Web:
        def swarm(self, host, users, spawn_rate, **custom):
            started.append((users, spawn_rate))

    for label, ramp in (("rate/250/600", 2.4), ("rate/400/40", 1.0), ("closed/50/0", 1.0)):
        load = parse_load(label)
        assert load.ramp_s == pytest.approx(ramp)
        measure.swarm(Web(), "http://127.0.0.1:1", "slow", load, "singleton-cio")
    assert started == [(600, pytest.approx(250.0)), (40, 40.0), (50, 50.0)]
