"""`lab up CASE`: the whole stack for one case on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse
import sys
import time

from .. import stack
from ..cases import CASES
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
    parts = tuple(p for p in stack.PORT_OWNERS if p != "grafana" or stack.grafana_binary())
    stack.require(stack.busy_ports(ports, parts))
    d = run_dir(case.id, args.run_dir)
    options.handle_signals()
    with stack.Stack(d, ports, args.java_opts.split()) as lab:
        try:
            lab.nginx()
            lab.exporter()
            lab.proxy(case, network=network, **extra)
            lab.prometheus()
            lab.locust(case, args.workers)
            why_no_grafana = lab.grafana()
            print(f"lab: {case.id} is up (logs in {d})")
            print(f"  Locust     {lab.locust_url}/  (start a run there; its stats at /metrics)")
            if why_no_grafana:
                print(f"  Grafana    not started: {why_no_grafana}")
            else:
                print(f"  Grafana    {lab.grafana_url}/  (Lab overview, no login to view)")
            print(f"  Prometheus {lab.prometheus_url}/")
            print(f"  proxy      {lab.proxy_url}/  (/metrics, /health)")
            print(
                f"  nginx      {lab.upstream_url}/files/manifest.json  (status {lab.status_url}/stub_status)"
            )
            if lab.toxiproxy and network.on:
                print(
                    f"  network    {network.describe()}: Toxiproxy {lab.toxiproxy.api}/proxies between them"
                )
            print("  Ctrl-C stops everything", flush=True)
            while True:
                if exited := lab.exited():
                    s = exited[0]
                    print(f"lab: {s.name} exited with {s.proc.returncode}:\n{s.tail()}", file=sys.stderr)
                    return 1
                time.sleep(0.5)
        except KeyboardInterrupt:
            return 0
        finally:
            lab.stop()
            print("lab: stopped", flush=True)
