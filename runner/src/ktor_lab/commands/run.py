"""`lab run`: a headless matrix of cases x scenarios x load levels into results/<time>/."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .. import backends, confidence, machine, measure, run_report, verdict
from ..cases import CASES, DEFAULT_CASES, DEPRECATED_ENGINES, DIMENSIONS, SCENARIOS, all_of, case_list
from ..errors import LabError
from ..plan import (
    DEFAULT_LOAD,
    DEFAULT_WARM_FIRST,
    DEFAULT_WARMUP_S,
    LOAD_HELP,
    Plan,
    parse_load,
    parse_warm_first,
)
from ..rundirs import results_dir
from ..warmup import JIT_QUIET_SHARE
from . import options


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="a headless matrix of cases x scenarios x load levels; writes results/<timestamp>/",
        description="Starts --forks proxies (JVMs) per case and an A/A pair of the first case, warms "
        "each once, then measures every case x scenario x load level in windows interleaved across the "
        "proxies (A B C A B C); writes results.json, results.csv, report.md and report.html, whose "
        "verdict names a difference only when a test over the JVMs says so, each with its interval.",
    )
    add_measuring(p)
    add_where(p)


def add_measuring(p: argparse.ArgumentParser) -> None:
    """Every option of `lab run` but where the parts run (--backend, --grafana): a study's too."""
    p.add_argument(
        "--cases",
        default=",".join(DEFAULT_CASES),
        help="comma-separated cases, each <lifetime>-<engine> and optionally its dimensions, e.g. "
        f"'per-call-okhttp ktor 3.5.1'; 'all' for {all_of(CASES, 'cases')} (default: the "
        f"{len(DEFAULT_CASES)} of the engines Ktor still publishes; {', '.join(DEPRECATED_ENGINES)}, "
        "deprecated, by name or with 'all')",
    )
    add_what(p)
    add_windows(p)
    add_how_many(p)
    add_warming(p)


def add_what(p: argparse.ArgumentParser) -> None:
    """What is measured beside the cases: the scenarios and loads, and what fails the run (`lab
    swarm run` takes these too)."""
    p.add_argument(
        "--fail-on",
        default="none",
        type=fail_on,
        metavar="FLAGS",
        help="comma-separated flags: exit 1 when any window carries one, after the report is written, "
        "for a CI job, e.g. errors (default: none: the default matrix's per-call Java fails requests "
        f"by design; known: {', '.join(verdict.FLAGS)})",
    )
    p.add_argument(
        "--scenarios",
        default="static-small",
        help=f"comma-separated, of: {', '.join(SCENARIOS)} (default: %(default)s)",
    )
    p.add_argument(
        "--loads",
        default=DEFAULT_LOAD,
        help=f"comma-separated load levels: {LOAD_HELP} (default: %(default)s, the same rate for every row: "
        "CPU per request and latency compared at equal work)",
    )


def add_windows(p: argparse.ArgumentParser) -> None:
    """How many windows a JVM gets, and its spares (`lab swarm run` takes these too)."""
    p.add_argument(
        "--windows",
        "--repeats",
        dest="repeats",
        type=int,
        default=confidence.WINDOWS,
        help="measured windows per proxy (fork), interleaved across the proxies (default: %(default)s)",
    )
    p.add_argument(
        "--spare",
        type=int,
        default=confidence.SPARE,
        help="at most this many more windows per JVM, measured one round at a time only while fewer "
        "than --windows of its windows would be kept (left out: not warm, a busy machine, missed "
        "scrapes), so that each row keeps its windows (default: %(default)s; 0: none)",
    )


def add_how_many(p: argparse.ArgumentParser) -> None:
    """How many JVMs a row gets, and the A/A pair."""
    p.add_argument(
        "--forks",
        type=int,
        default=confidence.FORKS,
        help="proxies (JVMs) per row, each warmed once: the unit the tests sample, as JMH's forks "
        "(default: %(default)s; 1: the intervals are of one JVM, not of the engine)",
    )
    p.add_argument(
        "--aa",
        default="first",
        help="the case measured as two rows (#1, #2): the A/A pair, whose intervals should include 0 "
        "(the check that the method holds); 'first' (the plan's first case that runs with its "
        "dimensions), a case (with its dimensions, to pair that one alone), or 'none' (default: first; "
        "none needed when --cases names a case twice)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="a fresh proxy for every window, warmed again each time (as the compose backend always does)",
    )
    p.add_argument(
        "--margin",
        type=margin,
        default=confidence.MARGIN,
        metavar="PERCENT",
        help="two rows are the same when the interval of their difference lies within this share either "
        f"way (default: {confidence.MARGIN * 100:.0f}%%)",
    )
    p.add_argument(
        "--cpus",
        default="none",
        metavar="auto|none|LIST",
        help="where the proxy under load runs, natively: auto (CPUs of its own, the upper half: on 2 CPUs, "
        "CPU 1, with Locust, nginx, Prometheus, Toxiproxy and the idle proxies on the rest), none (wherever "
        "the kernel puts them), or its CPUs (1, 2-3, 1,3) (default: %(default)s)",
    )
    p.add_argument(
        "--budget",
        type=budget,
        default=None,
        metavar="TIME",
        help="the most the whole run may take (e.g. 35m, 1h): after the plan's JVMs, the rows of each "
        "first-screen comparison that is neither different nor the same get one more JVM, a round at a "
        f"time, while the next round fits (with 2 --forks or more); 0: none (default: {DEFAULT_BUDGET} "
        "for lab run, 0 for a study's parts)",
    )


def add_warming(p: argparse.ArgumentParser) -> None:
    """How each proxy is warmed and how long a window is."""
    options.add_warm_first(p, DEFAULT_WARM_FIRST)
    p.add_argument(
        "--settle",
        type=int,
        default=Plan.settle_s,
        help="seconds of unmeasured load before a window on a warm proxy that idled (default: %(default)s)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=DEFAULT_WARMUP_S,
        help="most seconds of unmeasured load per proxy at each warm-up load; ends as soon as two 5 s "
        f"windows agree within 5%% and the proxy's JIT used under {JIT_QUIET_SHARE * 100:.0f}%% of a core in "
        f"the last; a later window in which the JIT used more than {verdict.JIT_WINDOW_SHARE * 100:.0f}%% "
        "is left out of its row (default: %(default)s)",
    )
    p.add_argument(
        "--duration",
        type=int,
        default=Plan.duration_s,
        help="seconds measured per run (default: %(default)s)",
    )


def add_where(p: argparse.ArgumentParser) -> None:
    """Where the parts run, then what every case shares (add_shared)."""
    p.add_argument(
        "--backend",
        choices=tuple(backends.BACKENDS),
        default="native",
        help="where the parts run: host processes, or the compose stack as a project of its own on free "
        "host ports, removed at the end (default: %(default)s)",
    )
    p.add_argument(
        "--grafana",
        action="store_true",
        help="also start Grafana (natively: when installed); it has no part in the figures",
    )
    add_shared(p)


def add_shared(p: argparse.ArgumentParser) -> None:
    """Locust's workers, the dimensions of every case, the network, the proxy's settings, the folder
    (every `lab run` option a study's parts take too)."""
    p.add_argument("--workers", type=int, default=0, help="Locust workers (default: one Locust process)")
    for d in DIMENSIONS:
        options.add_dimension(p, d)
    options.add_network(p, many=True, rtt=False)
    options.add_java_opts(p, "-Xmx512m")
    options.add_settings(p)
    p.add_argument("--out", type=Path, default=None, help="results folder (default: results/<timestamp>)")


def plan_of(args: argparse.Namespace) -> Plan:
    try:
        machine.cpu_sets(args.cpus)  # a ValueError naming what to give
        cases = case_list(args.cases)
        if not args.rtt and (default := options.env_rtt()):
            # UPSTREAM_RTT_MS: the round trip of each case that names none of its own.
            cases = [c if c.rtt_ms else c.with_dimensions(rtt_ms=default) for c in cases]
        dims = {d.field: d.values(getattr(args, d.dest)) for d in DIMENSIONS}
        first_plan = Plan(cases, ["static-small"], [parse_load("closed/1/0")], dims=dims)  # what runs
        return Plan(
            cases=cases,
            **measured(args),
            forks=args.forks,
            aa=aa_case(args.aa, cases, first_plan.cases_to_run()),
            fresh=args.fresh,
            margin=args.margin,
            budget_s=args.budget or 0,
            cpus=args.cpus,
            java_opts=args.java_opts,
            proxy_env=options.settings(args.set),
            dims=dims,
            jitter_ms=options.network_value("--jitter", "UPSTREAM_JITTER_MS", args.jitter),
            bandwidth_kbps=options.network_value("--bandwidth", "UPSTREAM_BANDWIDTH_KBPS", args.bandwidth),
        )
    except ValueError as e:
        raise LabError(str(e)) from None


# lab run's budget unless --budget says otherwise: a default run on 2 cores takes 27-42 min, and
# its close calls' rounds (a JVM more of two rows, about 3 min) fit while the run stays within it.
DEFAULT_BUDGET = "35m"


def margin(text: str) -> float:
    """--margin: `10`, `10%` or `0.1`: a share above 0 and below 1."""
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a percentage, e.g. 10") from None
    share = value / 100 if value >= 1 or text.endswith("%") else value
    if not 0 < share < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a percentage above 0 and below 100")
    return share


def budget(text: str) -> int:
    """--budget: `35m`, `1h`, `2h30m`, `900s` or `0` (none), in seconds."""
    if text.strip() in ("0", "none"):
        return 0
    parts = re.fullmatch(r"\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?\s*", text)
    if not parts or not any(parts.groups()):
        raise argparse.ArgumentTypeError(f"{text!r}: give a time such as 35m, 1h or 1h30m, or 0 for none")
    h, m, s_ = (int(x or 0) for x in parts.groups())
    return h * 3600 + m * 60 + s_


def measured(args: argparse.Namespace) -> dict:
    """The Plan's fields from the options add_what, add_windows and add_warming give (and
    --workers): what `lab run` and `lab swarm run` share. ValueError naming a bad load."""
    return {
        "scenarios": [s.strip() for s in args.scenarios.split(",") if s.strip()],
        "loads": [parse_load(x) for x in args.loads.split(",") if x.strip()],
        "repeats": args.repeats,
        "spare": args.spare,
        "settle_s": args.settle,
        "warm_first": parse_warm_first(args.warm_first),
        "warmup_s": args.warmup,
        "duration_s": args.duration,
        "workers": args.workers,
    }


def fail_on(text: str) -> tuple[str, ...]:
    """--fail-on's flags (none: no flag fails the run); argparse names the unknown ones."""
    flags = tuple(f.strip() for f in text.split(",") if f.strip() and f.strip() != "none")
    if unknown := [f for f in flags if f not in verdict.FLAGS]:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown)}: not a flag (known: {', '.join(verdict.FLAGS)})"
        )
    return flags


def aa_case(text: str, cases: list, runs: list | None = None) -> str:
    """--aa: the A/A case's name, or "" for none (also when the plan already names a case twice, or
    has a single case: a pair of it is asked for with --cases X,X). "first": the first case that
    runs with the plan's dimensions (`runs`: Plan.cases_to_run; CIO runs no h2)."""
    if text == "none" or len(set(cases)) < 2 or len(set(cases)) < len(cases):
        return ""
    if text != "first":
        return text
    running = {c.id for c in runs} if runs is not None else {c.id for c in cases}
    return next((c.id for c in cases if c.id in running), "")


def run(args: argparse.Namespace) -> int:
    if args.budget is None:
        args.budget = budget(DEFAULT_BUDGET)
    plan = plan_of(args)
    backend = backends.make(args.backend, grafana=args.grafana)
    backend.check(plan, machine=not args.dry_run)
    out = (args.out or "results/<time>") if args.dry_run else results_dir(args.out)
    print(announce(plan, backend.keeps_proxies, out, scrape_s=backend.scrape_seconds), flush=True)
    for case, why in plan.skipped():
        print(f"lab run: skips {case.name}: {why.split('; ')[0]}", flush=True)
    if args.dry_run:
        print(
            f"lab run: dry run; {len(plan.proxies())} proxies: {', '.join(p.title for p in plan.proxies())}"
        )
        return 0
    options.handle_signals()
    try:
        backend.open(plan, out)
        results = measure.run_plan(plan, backend, out)
    except KeyboardInterrupt:
        print("lab run: interrupted before the first run finished", file=sys.stderr)
        return 130
    finally:
        backend.close()
    return finish(results, out, args.fail_on)


def finish(results, out: Path, fail_on: tuple[str, ...], who: str = "lab run") -> int:
    """The report of `results` (in `out`), its verdict printed, and the exit code: 130 when
    interrupted, else 1 when a window carries a flag of `fail_on` (failed_checks)."""
    if results.runs:
        md, page = run_report.write_report(out)
        print(
            f"{who}: {len(results.runs)} runs in {measure.format_seconds(results.wall_seconds)}; "
            f"report: {md} and {page}"
        )
        print()
        print(run_report.summary(md.read_text()))
    if results.interrupted:
        return 130
    return failed_checks(results.runs, fail_on)


def announce(
    plan: Plan, keeps_proxies: bool, out: object, who: str = "lab run", scrape_s: float = measure.SCRAPE_S
) -> str:
    """The plan in one line: its windows and what multiplies them, its proxies, its most time (the
    spare windows' apart: they are measured only where windows are left out), where it writes.
    `scrape_s`: the backend's scrape interval."""
    dims = "".join(
        f" x {len(values)} {d.word} values" for d in DIMENSIONS if (values := plan.dims.get(d.field))
    )
    if skipped := plan.skipped():  # each named on a line of its own
        dims += f", less {len(skipped)} combination{'s' if len(skipped) != 1 else ''} skipped"
    fresh = plan.fresh or not keeps_proxies
    how = "a fresh proxy per window" if fresh else f"{len(plan.proxies())} proxies, each warmed once"
    aa = f", A/A pair {plan.aa}" if plan.aa else ""
    planned = measure.planned_seconds(plan, keeps_proxies, scrape_s)
    spare = ""
    if plan.spare and not fresh:
        spare_s = len(plan.proxies()) * len(plan.scenarios) * len(plan.loads) * plan.spare
        spare_s *= measure.kept_window_seconds(plan, scrape_s)
        spare = (
            f" (plus up to {plan.spare} spare windows a JVM, about {measure.format_seconds(spare_s)} "
            "in all, only where windows are left out)"
        )
    return (
        f"{who}: {len(plan.runs())} windows ({len(plan.cases)} cases x {len(plan.scenarios)} scenarios x "
        f"{len(plan.loads)} loads x {plan.forks} JVMs x {plan.repeats} windows{dims}{aa}), {how}, "
        f"warm-up <= {plan.warmup_s} s, "
        f"window {plan.duration_s} s; at most about {measure.format_seconds(planned)}{spare}"
        + (
            f"; close calls get a JVM more a round while the run stays within "
            f"{measure.format_seconds(plan.budget_s)} (--budget)"
            if plan.budget_s and plan.forks > 1
            else ""
        )
        + f"; results in {out}"
    )


def failed_checks(runs: list, flags: tuple[str, ...]) -> int:
    """1 when a window carries one of `flags` (--fail-on), each named on stderr with its reason
    (the verdict gives one reason per flag, in the same order); else 0."""
    failed = [
        (r, f, why)
        for r in runs
        for f, why in zip(r.verdict.flags, r.verdict.reasons, strict=False)
        if f in flags
    ]
    for r, flag, why in failed:
        print(f"lab run: {r.title()}: {flag}: {why} (--fail-on {flag})", file=sys.stderr)
    return 1 if failed else 0
