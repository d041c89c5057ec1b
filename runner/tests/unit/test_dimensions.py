"""A dimension is declared once (cases.DIMENSIONS) and the rest follows from it: lab run's option
and the studies', the plan's values, a run's record and its row's name, results.json and .csv,
the report's change lines, and the proxy's variables natively and in compose. The pool limit
(--max-connections) is the dimension these tests drive end to end, through the real parser."""

from __future__ import annotations

import csv
import json

import pytest
from test_run_rules import FIXTURE, a_run

from ktor_lab import conclusions, run_report
from ktor_lab.cases import BY_FIELD, DIMENSIONS, Case
from ktor_lab.cli import main, main_parser
from ktor_lab.commands.run import plan_of
from ktor_lab.errors import LabError
from ktor_lab.parts import compose
from ktor_lab.plan import Plan, parse_load
from ktor_lab.results import Results


def lab_run(*argv: str) -> Plan:
    return plan_of(main_parser().parse_args(["run", *argv]))


def test_every_dimension_is_an_option_of_lab_run_that_fills_the_plan():
    options = {
        o
        for a in main_parser()._subparsers._group_actions[0].choices["run"]._actions
        for o in a.option_strings
    }
    for d in DIMENSIONS:
        assert d.option in options, d.word
    plan = lab_run("--cases", "singleton-okhttp", "--max-connections", "64,1000", "--protocols", "http,https")
    assert plan.dims == {"max_connections": [64, 1000], "protocol": ["http", "https"]}
    assert [c.name for c in plan.cases_to_run()] == [
        "singleton-okhttp connections 64",
        "singleton-okhttp",
        "singleton-okhttp protocol https connections 64",
        "singleton-okhttp protocol https",
    ]


def test_the_pool_limit_reaches_the_proxy_as_its_variable_and_java_is_skipped_by_name(capsys):
    plan = lab_run("--cases", "singleton-okhttp,per-call-java", "--max-connections", "64,1000")
    limited = Case.parse("singleton-okhttp connections 64")
    assert limited in plan.cases_to_run() and limited.max_connections == 64
    assert limited.proxy_env()["CLIENT_MAX_CONNECTIONS"] == "64"
    assert "CLIENT_MAX_CONNECTIONS" not in Case.parse("singleton-okhttp").proxy_env()  # the proxy's default
    [(skipped, why)] = plan.skipped()
    assert skipped.name == "per-call-java connections 64"
    assert (
        why == "max-connections 64 changes nothing of java: the JDK's HttpClient cannot limit its connections"
    )
    assert (
        main(
            ["run", "--cases", "singleton-okhttp,per-call-java", "--max-connections", "64,1000", "--dry-run"]
        )
        == 0
    )
    out = capsys.readouterr().out
    # 2 cases x 2 values, less the one a case cannot take: the line counts what runs
    assert (
        "lab run: 24 windows (2 cases x " in out
        and "x 2 connections values, less 1 combination skipped" in out
    )
    assert "lab run: skips per-call-java connections 64: max-connections" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["--max-connections", "0"],
            "--max-connections: max-connections '0': give a whole number of connections",
        ),
        (["--max-connections", "lots"], "--max-connections: max-connections 'lots'"),
        (
            ["--max-connections", "64", "--set", "CLIENT_MAX_CONNECTIONS=200"],
            "CLIENT_MAX_CONNECTIONS is what --max-connections sets: give its values there",
        ),
        (
            ["--cases", "singleton-cio connections 64", "--max-connections", "100"],
            "names its connections; give it there or with --max-connections, not both",
        ),
    ],
)
def test_a_bad_pool_limit_is_refused_in_one_line_naming_the_option(argv, message):
    with pytest.raises(LabError, match=message) as e:
        lab_run(*argv)
    assert "\n" not in str(e.value)


def test_a_study_spells_a_dimension_as_lab_run_does():
    """A study made of lab run parts takes lab run's own options; one with a runner of its own
    that varies a dimension takes its option from the same declaration."""
    from ktor_lab import cli

    parser = cli.main_parser()
    for name in ("dispatchers", "distance", "protocols", "versions", "streaming"):
        with pytest.raises(SystemExit):
            parser.parse_args(["study", name, "--help"])
    for name, d in (("dispatchers", "dispatcher"), ("distance", "rtt_ms"), ("streaming", "protocol")):
        args = parser.parse_args(["study", name, BY_FIELD[d].option, "http" if d == "protocol" else "1"])
        assert hasattr(args, BY_FIELD[d].dest), name


def test_compose_sets_a_case_s_variables_and_puts_back_what_was_there(monkeypatch):
    monkeypatch.delenv("CLIENT_MAX_CONNECTIONS", raising=False)
    project = compose.Project("ktor-lab-unit", {"proxy": 1})
    project.env["CLIENT_DISPATCHER"] = "io:8"  # a --set of the user's, for the cases at the default
    project.apply_case_env(Case.parse("singleton-okhttp connections 64 dispatcher virtual jdk 25"))
    assert (project.env["CLIENT_MAX_CONNECTIONS"], project.env["CLIENT_DISPATCHER"]) == ("64", "virtual")
    project.apply_case_env(Case.parse("singleton-okhttp"))
    assert "CLIENT_MAX_CONNECTIONS" not in project.env and project.env["CLIENT_DISPATCHER"] == "io:8"


def two_limits() -> Results:
    runs = []
    for limit, cpu in ((64, 30.0), (1000, 40.0)):
        for window in (1, 2, 3):
            r = a_run(model="rate", users=40, target=400, rps=400, cpu=cpu)
            r.case, r.engine, r.repeat, r.dimensions = "singleton-okhttp", "okhttp", window, True
            r.ktor, r.java, r.dims = "3.5.2", "17.0.15", {"max_connections": limit}
            r.proxy.cpu_seconds_per_1000_requests = cpu / 10 + window / 100
            runs.append(r)
    plan = Plan(
        ["singleton-okhttp"],
        ["static-small"],
        [parse_load("rate/400/40")],
        dims={"max_connections": [64, 1000]},
    )
    stored = json.loads((FIXTURE / "results.json").read_text())  # a real run's machine and backend
    return Results(
        plan=plan, backend=stored["backend"], environment=stored["environment"], started="", runs=runs
    )


def test_a_run_s_pool_limit_names_its_row_and_its_change_line(tmp_path):
    results = Results.from_json(json.loads(json.dumps(two_limits().to_json())))  # as stored, read back
    assert {r.row for r in results.runs} == {
        "singleton-okhttp ktor 3.5.2 jdk 17 connections 64",
        "singleton-okhttp ktor 3.5.2 jdk 17",
    }
    (group,) = conclusions.groups(results)
    [change] = [c for c in conclusions.changes(group) if c.dimension == "pool limit"]
    assert (change.before_name, change.after_name) == ("64", "1000")
    assert "pool limit 64 -> 1000" in change.sentence()
    assert "Dimensions: pool limit 64, 1000" in run_report.markdown(results)
    run_report.write_csv(results, tmp_path / "results.csv")
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert sorted({r["max_connections"] for r in rows}) == ["1000", "64"]


def test_results_stored_before_dimensions_were_a_mapping_read_the_same():
    stored = two_limits().to_json()
    stored["plan"] |= {"protocols": ["https"], "rtt": [20]}
    stored["plan"].pop("dims")
    for run in stored["runs"]:
        run |= {"protocol": "https", "rtt_ms": 20, "dispatcher": "io"}
        run.pop("dims")
    results = Results.from_json(stored)
    assert results.plan.dims == {"protocol": ["https"], "rtt_ms": [20]}
    assert {(r.dim("protocol"), r.dim("rtt_ms"), r.dim("max_connections")) for r in results.runs} == {
        ("https", 20, 1000)
    }


def test_the_a_a_pair_is_of_the_first_case_that_runs_with_the_dimensions():
    """CIO speaks no h2: its rows are skipped, and the pair is of the next case, never of none."""
    plan = lab_run("--cases", "singleton-cio,singleton-okhttp,per-call-okhttp", "--protocols", "h2")
    assert plan.aa == "singleton-okhttp"
    assert [p.copy for p in plan.proxies() if p.case.id == "singleton-okhttp" and p.fork == 1] == [1, 2]
    with pytest.raises(LabError, match="the A/A case 'singleton-cio' runs in no combination"):
        lab_run("--cases", "singleton-cio,singleton-okhttp", "--protocols", "h2", "--aa", "singleton-cio")
    named = lab_run("--cases", "singleton-okhttp,singleton-apache5", "--protocols", "http,h2",
                    "--aa", "singleton-okhttp protocol h2")  # fmt: skip
    pairs = {p.case.name for p in named.proxies() if p.copy == 2}
    assert pairs == {"singleton-okhttp protocol h2"}
