"""`lab run`: a headless matrix of cases x scenarios x load levels into results/<time>/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import backends, measure, run_report, verdict, versions
from ..cases import CASES, HTTP2_ENGINES, PROTOCOL_TITLES, SCENARIOS, all_of, case_list
from ..errors import LabError
from ..results import LOAD_HELP, Plan, parse_load
from ..rundirs import results_dir
from . import options


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="a headless matrix of cases x scenarios x load levels; writes results/<timestamp>/",
        description="Runs every case x scenario x load level (x repeats, interleaved) with a fresh proxy, "
        "an unmeasured warm-up and a fixed window; writes results.json, report.md and report.html.",
    )
    p.add_argument(
        "--cases",
        default=",".join(CASES),
        help="comma-separated cases, each <lifetime>-<engine> and optionally its dimensions, e.g. "
        f"'per-call-okhttp ktor 3.5.1' (default: {all_of(CASES, 'cases')})",
    )
    p.add_argument(
        "--scenarios",
        default="static-small",
        help=f"comma-separated, of: {', '.join(SCENARIOS)} (default: %(default)s)",
    )
    p.add_argument(
        "--loads",
        default="closed/50/0",
        help=f"comma-separated load levels: {LOAD_HELP} (default: %(default)s)",
    )
    p.add_argument(
        "--repeats", type=int, default=1, help="runs per cell, interleaved A B A B (default: %(default)s)"
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=Plan.warmup_s,
        help="most seconds of unmeasured load per run; ends as soon as two 5 s windows agree within 5%% "
        "and the proxy's JIT was quiet (default: %(default)s; on 2 cores a proxy needs 55-125 s)",
    )
    p.add_argument(
        "--duration",
        type=int,
        default=Plan.duration_s,
        help="seconds measured per run (default: %(default)s)",
    )
    p.add_argument("--workers", type=int, default=0, help="Locust workers (default: one Locust process)")
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
    options.add_versions(p, many=True)
    p.add_argument(
        "--protocols",
        default="",
        help="comma-separated, between the proxy and nginx: "
        + ", ".join(f"{k} ({v})" for k, v in PROTOCOL_TITLES.items())
        + "; each a dimension of every case (default: http only). HTTP/2 needs one of "
        + ", ".join(HTTP2_ENGINES),
    )
    options.add_network(p, many=True)
    options.add_java_opts(p, "-Xmx512m")
    options.add_settings(p)
    p.add_argument("--out", type=Path, default=None, help="results folder (default: results/<timestamp>)")


def plan_of(args: argparse.Namespace) -> Plan:
    try:
        cases = case_list(args.cases)
        if args.rtt is None and (default := options.env_rtt()):
            # UPSTREAM_RTT_MS: the round trip of each case that names none of its own.
            cases = [c if c.rtt_ms else c.with_dimensions(rtt_ms=default) for c in cases]
        return Plan(
            cases=cases,
            scenarios=[s.strip() for s in args.scenarios.split(",") if s.strip()],
            loads=[parse_load(x) for x in args.loads.split(",") if x.strip()],
            repeats=args.repeats,
            warmup_s=args.warmup,
            duration_s=args.duration,
            workers=args.workers,
            java_opts=args.java_opts,
            proxy_env=options.settings(args.set),
            ktor=versions.names(args.ktor),
            java=versions.names(args.java),
            protocols=versions.names(args.protocols),
            rtt=options.rtt_list(args.rtt),
            jitter_ms=options.network_value("--jitter", "UPSTREAM_JITTER_MS", args.jitter),
            bandwidth_kbps=options.network_value("--bandwidth", "UPSTREAM_BANDWIDTH_KBPS", args.bandwidth),
        )
    except ValueError as e:
        raise LabError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    plan = plan_of(args)
    backend = backends.make(args.backend, grafana=args.grafana)
    backend.check(plan)
    out = results_dir(args.out)
    runs = len(plan.runs())
    dims = f" x {len(plan.ktor)} Ktor releases" if plan.ktor else ""
    dims += f" x {len(plan.java)} JDKs" if plan.java else ""
    dims += f" x {len(plan.protocols)} protocols" if plan.protocols else ""
    dims += f" x {len(plan.rtt)} round trips" if plan.rtt else ""
    print(
        f"lab run: {runs} runs ({len(plan.cases)} cases x {len(plan.scenarios)} scenarios x "
        f"{len(plan.loads)} loads x {plan.repeats} repeats{dims}), warm-up <= {plan.warmup_s} s, "
        f"window {plan.duration_s} s; at most about {measure.format_seconds(measure.planned_seconds(plan))}; "
        f"results in {out}",
        flush=True,
    )
    options.handle_signals()
    try:
        backend.open(plan, out)
        results = measure.run_plan(plan, backend, out)
    except KeyboardInterrupt:
        print("lab run: interrupted before the first run finished", file=sys.stderr)
        return 130
    finally:
        backend.close()
    if results.runs:
        md, page = run_report.write_report(out)
        print(
            f"lab run: {len(results.runs)} runs in {measure.format_seconds(results.wall_seconds)}; "
            f"report: {md} and {page}"
        )
        print()
        print(run_report.summary(md.read_text()))
    if results.interrupted:
        return 130
    if failed := [r for r in results.runs if "errors" in r.verdict.flags]:
        for r in failed:
            print(
                f"lab run: {r.title()}: {r.locust.failures} of {r.locust.requests} requests failed "
                f"(more than {verdict.ERROR_RATIO_LIMIT:.0%})",
                file=sys.stderr,
            )
        return 1
    return 0
