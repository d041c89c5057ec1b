"""`lab run`, `lab report` and `lab verify`: option parsing, verdict rules, the report from a
stored result, and a real two-case matrix against the real parts."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ktor_lab import measure, metrics, run_report, verdict
from ktor_lab.backends import NativeBackend
from ktor_lab.cases import SCENARIOS
from ktor_lab.cli import main
from ktor_lab.paths import LOCUST_DIR
from ktor_lab.results import Load, LocustFigures, MachineFigures, Plan, Results, Run, Warmup, parse_load
from ktor_lab.stack import Ports

FIXTURE = Path(__file__).parent / "fixtures" / "results-small"
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
        (["--repeats", "0"], "repeats and duration must be at least 1"),
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


def test_repeats_are_interleaved_across_cases():
    plan = Plan(["singleton-cio", "per-call-cio"], ["static-small"], [parse_load("rate/10")], repeats=2)
    order = [(r.case, r.repeat) for r in plan.runs()]
    assert order == [("singleton-cio", 1), ("per-call-cio", 1), ("singleton-cio", 2), ("per-call-cio", 2)]


def test_scenarios_are_the_locustfiles():
    text = (LOCUST_DIR / "locustfile.py").read_text()
    assert tuple(re.findall(r'@scenario\("([\w-]+)"\)', text)) == SCENARIOS


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
    assert (
        "| case | rps | p50 ms | p95 ms | p99 ms | proxy p50 ms | proxy p99 ms | errors | CPU s / 1000 req |"
        in md
    )
    for case in results["plan"]["cases"]:
        assert re.search(rf"^\| {case} \| ", md, re.M), case
    # The earlier lab's setup is flagged, and its rps is not shown as capacity.
    earlier = [ln for ln in md.splitlines() if ln.startswith("| ") and "load-model" in ln]
    assert len(earlier) == len(results["plan"]["cases"]), md
    assert all("(not capacity)" in ln for ln in earlier)
    # Medians and the spread over the two repeats.
    singleton = [
        r for r in results["runs"] if r["case"] == "singleton-cio" and r["load"]["model"] == "closed"
    ]
    rps = sorted(r["locust"]["rps"] for r in singleton)
    assert f"{sum(rps) / 2:,.0f} ({rps[0]:,.0f}-{rps[1]:,.0f})" in md
    # Settings beside the numbers.
    assert results["environment"]["commit"][:12] in md
    assert "max_connections=1000" in md and "JAVA_OPTS" in md

    parser = Page()
    parser.feed(page)
    assert page.startswith("<!doctype html>")
    assert parser.tags.count("table") == 2 and parser.tags.count("svg") == 2 * len(run_report.CHARTS)
    assert "<script" not in page and "http://" not in page.split("<h2>Settings")[0].replace(
        'xmlns="http://', ""
    )
    assert "singleton-cio" in parser.cells and "load-model" in " ".join(parser.cells)


def test_report_opens_with_a_verdict_in_words(tmp_path):
    _, md, page = stored_report(tmp_path)
    # Before any table: per scenario and load, who leads on each figure, by how much, and
    # whether that is beyond the spread of the repeats; flagged rows named.
    verdict_text = md.split("## Verdict")[1].split("\n## ")[0]
    assert md.index("## Verdict") < md.index("| case |")
    lead = "p99 ms (lower is better): singleton-cio leads with 500.0, against 2,200.0 for per-call-apache"
    assert f"{lead} (4.40x)" in verdict_text
    assert "beyond the spread of the repeats" in verdict_text and "within the spread" in verdict_text
    # Every row of the fixture is not warm: the rate ranks nothing, and the rest says so.
    assert "rps: no row's rate is its capacity" in verdict_text
    assert "Indicative only: every row is flagged" in verdict_text
    assert "Their rate is not their capacity: singleton-cio (load-model, not-warm)" in verdict_text
    # The page says the same, in HTML and not in Markdown.
    text = re.sub(r"<[^>]+>", " ", page.split("<svg")[0])
    assert "leads with 500.0" in text and "higher is better" in text.lower() and "lower is better" in text
    for leak in ("*", "`", "| ", "](", "##"):
        assert leak not in text, leak


def test_report_page_as_a_browser_shows_it(tmp_path, browser):
    stored_report(tmp_path)
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.goto((tmp_path / "report.html").as_uri())
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    # The verdict is the first thing a reader sees, above the fold; tables and charts follow.
    box = page.locator("section.verdict").bounding_box()
    assert box is not None and box["y"] < 300 and box["height"] > 100, box
    assert page.locator("section.verdict li").count() == 12
    assert page.locator("table").count() == 2 and page.locator("svg").count() == 2 * len(run_report.CHARTS)
    # Charts say which way is better and mark the rates that are not capacity.
    assert page.locator("svg >> text=higher is better").count() == 2
    assert page.locator("svg >> text=/not capacity/").count() == 4
    shot = (tmp_path / "report.png").read_bytes()
    assert shot.startswith(b"\x89PNG") and len(shot) > 50_000


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
    assert (again["plan"]["ktor"], again["plan"]["java"]) == ([], [])
    for old, new in zip(stored["runs"], again["runs"], strict=True):
        for part in ("load", "locust", "warmup", "window"):
            assert {k: v for k, v in new[part].items() if k in old[part]} == old[part], part
        assert new["proxy"]["upstream_requests"] == old["proxy"]["upstream_requests"]
        assert new["prometheus"]["threads_live_max"] == old["prometheus"]["threads_live_max"]


def test_a_results_json_of_another_format_is_refused(tmp_path, capsys):
    (tmp_path / "results.json").write_text(json.dumps({"format": 2}))
    assert main(["report", str(tmp_path)]) == 2
    assert "results.json has format 2; this lab reads format 1" in capsys.readouterr().err


# --- real parts ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_case_matrix_agrees_with_the_proxys_own_count(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run(
        [
            LAB,
            "run",
            "--cases",
            "singleton-cio,per-call-java",
            "--loads",
            "rate/200",
            "--warmup",
            "5",
            "--duration",
            "6",
            # lab run's default heap: with a far smaller one, the GC hides per-call Java's leak.
            "--java-opts=-Xmx512m",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert [run["case"] for run in results["runs"]] == ["singleton-cio", "per-call-java"]
    for run in results["runs"]:
        sent, counted = run["locust"]["requests"], run["proxy"]["upstream_requests"]
        assert sent > 0 and run["locust"]["rps"] <= 200 * 1.05, run["locust"]
        # Locust's count and the proxy's agree but for the requests in the gap between their
        # edges of the window (measured), and 2%.
        gap = run["locust"]["rps"] * run["window"]["edges_s"]
        assert abs(sent - counted) <= 0.02 * counted + gap, (run["case"], sent, counted, gap)
        assert run["locust"]["failures"] == 0
        # From Prometheus over the window: every figure the report shows.
        prom = run["prometheus"]
        for key in (
            "threads_live_max",
            "threads_active_unparked_max",
            "heap_max_bytes",
            "open_fds_max",
            "generator_cpu_max_percent",
        ):
            assert prom[key] is not None and prom[key] > 0, (run["case"], key, prom)
        # Prometheus' increase() over the window extrapolates from the scrapes inside it: off by
        # up to about one scrape interval's worth of requests (a busy machine moves the scrapes).
        slack = counted * results["backend"]["scrape_interval_s"] / run["window"]["seconds"]
        assert abs(prom["upstream_requests"] - counted) <= slack, (prom, counted, slack)
        # CPU per request from the proxy's own counters; Prometheus' view of the same agrees.
        assert run["proxy"]["cpu_seconds_per_1000_requests"] > 0
        assert prom["cpu_seconds"] == pytest.approx(run["proxy"]["cpu_seconds"], rel=0.3)
        assert run["proxy"]["settings"]["case"] == run["case"]
        # The proxy's own latency over the window, beside Locust's: the same requests (and the
        # scrapes of /metrics), and never slower than what the caller saw.
        assert run["proxy"]["server_requests"] == pytest.approx(counted, rel=0.02, abs=30)
        assert 0 < run["proxy"]["server_p50_ms"] <= run["locust"]["p50_ms"] + 1, run["proxy"]
        assert run["machine"]["lab_cores"] > 0 and run["machine"]["cpus"] >= 1, run["machine"]
    singleton, per_call = results["runs"]
    # Per-call Java keeps each JDK client's selector thread and sockets until the GC finds it.
    assert "leak" in per_call["verdict"]["flags"], per_call["leak"]
    assert "leak" not in singleton["verdict"]["flags"], singleton["leak"]
    assert singleton["proxy"]["clients_opened"] == 0
    assert per_call["proxy"]["clients_opened"] == pytest.approx(
        per_call["proxy"]["upstream_requests"], abs=60
    )
    # The report was written, states its verdicts, and its rps is Locust's.
    md = (out / "report.md").read_text()
    assert "target" in md  # 200 rps is far below capacity: flagged, not presented as capacity
    for run in results["runs"]:
        assert f"{run['locust']['rps']:,.0f} (not capacity)" in md
    # What it prints at its end is that report up to its settings: the verdict and the tables.
    assert md.split("\n## Settings")[0] in r.stdout and "## Settings" not in r.stdout


BUSY_LOOP = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def one_case_run(out: Path) -> dict:
    r = subprocess.run(
        [LAB, "run", "--cases", "singleton-cio", "--loads", "rate/50", "--warmup", "0", "--duration", "6"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    return run


@pytest.mark.slow
def test_a_run_taken_while_other_work_loads_the_machine_is_flagged_busy(tmp_path):
    # Work that is not the lab's: two busy loops (one per core here), bounded in time, started
    # by this test and ended by it. Whatever else loads the machine, these two are others'.
    loops = [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(seconds=150)], start_new_session=True)
        for _ in range(2)
    ]
    try:
        run = one_case_run(tmp_path)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    m = run["machine"]
    assert "machine-busy" in run["verdict"]["flags"], m
    assert m["others_cores"] >= 0.5, m
    # The proxy is the lab's: the CPU it counted itself over the window is inside the lab's share.
    assert m["lab_cores"] * m["window_s"] >= 0.8 * run["proxy"]["cpu_seconds"], (m, run["proxy"])
    md = (tmp_path / "report.md").read_text()
    verdict_part = md.split("## Verdict")[1].split("\n## ")[0]
    assert verdict_part.strip().startswith("The machine was busy: in 1 of 1 runs"), verdict_part


@pytest.mark.slow
def test_a_proxy_that_stops_answering_is_flagged_and_the_matrix_goes_on(tmp_path, monkeypatch):
    """A collapsed proxy (per-call Java, thousands of threads) once timed out a scrape and ended
    the whole matrix. Here the proxy's JVM is stopped (SIGSTOP) as its window begins: a real
    process that accepts connections and answers none. The run keeps Locust's figures, is
    flagged `unresponsive`, and the next run of the plan is measured as usual."""
    monkeypatch.setattr(measure, "PROXY_SCRAPE_S", 2)
    plan = Plan(["singleton-cio", "singleton-okhttp"], ["static-small"], [parse_load("rate/20")])
    plan.warmup_s, plan.duration_s = 0, 3
    backend = NativeBackend(tmp_path / "logs", Ports.free(), "-Xmx256m", 0, plan.cases[0])
    stopped: list[int] = []
    start_case, container_ids = backend.start_case, backend.container_ids

    def resume():
        while stopped:
            os.kill(stopped.pop(), signal.SIGCONT)  # so that the stack's SIGTERM ends it

    def start_and_remember(case, *args, **kwargs):
        resume()
        pid = start_case(case, *args, **kwargs)
        if case == "singleton-cio":
            stopped.append(pid)
        return pid

    def stop_the_proxy_as_the_window_begins():
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        return container_ids()

    monkeypatch.setattr(backend, "start_case", start_and_remember)
    monkeypatch.setattr(backend, "container_ids", stop_the_proxy_as_the_window_begins)
    try:
        backend.open()
        results = measure.run_plan(plan, backend, tmp_path)
    finally:
        resume()
        backend.close()
    collapsed, fine = results.runs
    assert collapsed.unanswered == [
        f"{when}: ReadTimeout after up to 2 s" for when in ("window start", "window end", "leak check")
    ]
    assert "unresponsive" in collapsed.verdict.flags and not collapsed.verdict.capacity
    assert collapsed.proxy.cpu_seconds_per_1000_requests is None and collapsed.leak.threads_after is None
    assert collapsed.ktor and collapsed.locust.users == plan.loads[0].users  # known from before it stopped
    # the machine's CPU is shared by the time its samples span, stalled scrapes included (it once
    # divided 52 s of CPU by a 22 s window and flagged the machine busy)
    assert collapsed.machine.window_s >= plan.duration_s + 2 * measure.PROXY_SCRAPE_S
    assert collapsed.machine.busy_cores <= collapsed.machine.cpus + 0.05
    assert fine.unanswered == [] and "unresponsive" not in fine.verdict.flags
    assert fine.proxy.upstream_requests > 0 and fine.leak.known()
    run_report.write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "the proxy did not answer its /metrics (window start: ReadTimeout" in md


@pytest.mark.slow
def test_verify_checks_the_whole_stack(tmp_path):
    r = subprocess.run(
        [LAB, "verify", "per-call-okhttp", "--java-opts=-Xmx128m", "--run-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok   every dashboard panel has data" in r.stdout
    assert "FAIL" not in r.stdout
