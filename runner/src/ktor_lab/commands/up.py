"""`lab up CASE`: the whole stack for one case on 127.0.0.1 until Ctrl-C, started through the
native backend as `lab run` starts its parts (backends.NativeBackend), on the ports a user gives."""

from __future__ import annotations

import argparse
import sys
import time

from .. import stack
from ..backends import NativeBackend
from ..cases import CASES, SCENARIOS
from ..network import Network
from ..plan import Plan, parse_load
from ..rundirs import run_dir
from . import options


def add_parser(sub) -> None:
    p = sub.add_parser("up", help="the whole stack for one case on 127.0.0.1; Ctrl-C stops it")
    p.add_argument(
        "case",
        help=f"one of: {', '.join(CASES)}; optionally with its dimensions, e.g. 'per-call-cio ktor 3.5.1'",
    )
    options.add_stack_options(p)
    options.add_service_ports(p)
    options.add_settings(p, ", e.g. CLIENT_MAX_CONNECTIONS=200")
    options.add_versions(p, many=False)
    options.add_network(p, many=False)
    p.add_argument("--workers", type=int, default=0, help="Locust workers beside the master (default: none)")


def run(args: argparse.Namespace) -> int:
    case = options.one_case(args.case, ktor=args.ktor, java=args.java)
    extra = options.settings(args.set)
    network = options.network(args, case.rtt_ms)
    if args.dry_run:
        print(
            f"lab up: dry run; would start nginx, its exporter, the proxy of {case.name} "
            f"(network: {network.describe()}), Prometheus, Locust and Grafana when installed, on 127.0.0.1"
        )
        return 0
    stack.require(stack.missing(network=network.on))
    ports = options.ports(args)
    grafana = stack.grafana_binary() is not None
    parts = tuple(p for p in stack.PORT_OWNERS if p != "grafana" or grafana)
    stack.require(stack.busy_ports(ports, parts))
    # The plan of what the Locust UI first offers: the case, its first scenario, 50 users.
    plan = Plan(
        [case],
        [SCENARIOS[0]],
        [parse_load("closed/50/0")],
        workers=args.workers,
        java_opts=args.java_opts,
        proxy_env=extra,
    )
    d = run_dir(case.id, args.run_dir)
    options.handle_signals()
    backend = NativeBackend(grafana=grafana, ports=ports, scrape_seconds=5)
    try:
        backend.open(plan, d)
        backend.start_case(case, extra, network)
        print(f"lab: {case.id} is up (logs in {d / 'logs'})")
        print_parts(backend.urls(), network)
        while True:
            if exited := backend.exited():
                print(f"lab: {exited}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    finally:
        backend.close()
        print("lab: stopped", flush=True)


def print_parts(urls: dict[str, str], network: Network) -> None:
    """Where each part answers, as a user opens it (Backend.urls)."""
    for part, url in urls.items():
        shown = f"{network.describe()}: {url}" if part == "network" else url
        print(f"  {part:<10} {shown}")
        if part == "Locust" and "Grafana" not in urls:
            print("  Grafana    not started: grafana is not installed (its dashboards run in compose)")
    print("  Ctrl-C stops everything", flush=True)
