"""`lab verify`: bring the native stack up on free ports, check that every endpoint and every
metric the dashboards use answers, tear it down. A smoke test users can run (about a minute)."""

from __future__ import annotations

import argparse
import sys
import time

import requests

from .. import metrics, stack
from ..backends import NativeBackend
from ..cases import SCENARIOS, Case
from ..metrics import query as prom
from ..network import Network
from ..parts import grafana
from ..parts.loadgen import LocustWeb
from ..plan import Plan, parse_load
from ..processes import wait_until
from ..rundirs import run_dir
from . import options

LOAD_SECONDS = 15
NO_GRAFANA = "grafana is not installed (the dashboards run in the compose stack)"


class Checks:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def check(self, what: str, ok: bool, detail: str = "") -> bool:
        print(
            f"  {'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""), flush=True
        )
        if not ok:
            self.failed.append(what)
        return ok


def get(url: str) -> requests.Response | None:
    try:
        return requests.get(url, timeout=5)
    except requests.RequestException:
        return None


def wait_for(condition, timeout: float) -> bool:
    """wait_until, with a part that does not answer yet counted as not yet."""

    def quietly() -> bool:
        try:
            return bool(condition())
        except (requests.RequestException, RuntimeError, ValueError):
            return False

    return wait_until(quietly, timeout, interval=0.5)


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="start the stack on free ports, check every endpoint and metric, stop")
    p.add_argument("case", nargs="?", default="singleton-cio", help="the case (default: %(default)s)")
    options.add_java_opts(p, "-Xmx256m")
    options.add_run_dir(p)


def run(args: argparse.Namespace) -> int:
    case = options.one_case(args.case)
    if args.dry_run:
        print(f"lab verify: dry run; would start {case.name} on free loopback ports, check it, and stop")
        return 0
    stack.require(stack.missing())
    d = run_dir("verify", args.run_dir)
    options.handle_signals()
    # The parts as lab up starts them (on free ports), Grafana when installed, scraped every second.
    with_grafana = stack.grafana_binary() is not None
    backend = NativeBackend(grafana=with_grafana, scrape_seconds=1)
    plan = Plan([case], [SCENARIOS[0]], [parse_load("closed/10/0")], java_opts=args.java_opts)
    c = Checks()
    print(f"lab verify: {case.id} on free loopback ports (logs in {d / 'logs'})", flush=True)
    try:
        backend.open(plan, d)
        proxy = backend.start_case(case, {}, Network(case.rtt_ms))
        urls = backend.endpoints()
        check_endpoints(urls, proxy.url, case, c)
        check_load(urls, proxy.url, case, c)
    except (RuntimeError, TimeoutError, OSError, requests.RequestException) as e:
        c.check("the stack starts and answers", False, str(e))
    except KeyboardInterrupt:
        c.check("not interrupted", False)
    finally:
        backend.close()
    if c.failed:
        print(f"lab verify: {len(c.failed)} check(s) failed; logs in {d / 'logs'}", file=sys.stderr)
        return 1
    print("lab verify: everything answers")
    return 0


def check_endpoints(urls: dict[str, str], proxy: str, case: Case, c: Checks) -> None:
    """nginx, its exporter and the proxy answer as they should, without load."""
    r = get(f"{urls['nginx']}/files/tiny.txt")
    c.check("nginx serves /files/tiny.txt", r is not None and r.text == "Success!\n")
    r = get(f"{urls['nginx']}/files/manifest.json")
    c.check("nginx serves the manifest of its files", r is not None and "100m.bin" in r.text)
    r = get(f"{urls['nginx_status']}/stub_status")
    c.check("nginx stub_status answers", r is not None and "Active connections" in r.text)
    r = get(f"{urls['exporter']}/metrics")
    c.check("nginx exporter reads stub_status", r is not None and "nginx_up 1" in r.text)
    r = get(f"{proxy}/health")
    c.check("proxy /health", r is not None and r.ok)
    r = get(f"{proxy}/files/tiny.txt")
    c.check(
        f"proxy forwards through {case.engine} ({case.lifetime})",
        r is not None and r.text == "Success!\n",
    )
    r = get(f"{proxy}/metrics")
    c.check(
        "proxy /metrics has lab_proxy_info for the case",
        r is not None and f'case="{case.id}"' in r.text,
    )


def check_load(urls: dict[str, str], proxy: str, case: Case, c: Checks) -> None:
    """Locust drives a short load through the proxy; Prometheus scrapes it all; every panel has data."""
    web = LocustWeb(urls["locust"])
    web.swarm(proxy, 10, 10, load_model="rate", target_rps=50, scenario="static-small")
    time.sleep(LOAD_SECONDS)
    stats = web.stats()
    c.check(
        f"Locust ran {LOAD_SECONDS} s at 50 rps without failures",
        stats.requests > 10 * LOAD_SECONDS and stats.failures == 0,
        f"{stats.requests} requests, {stats.failures} failures",
    )
    r = get(f"{urls['locust']}/metrics")
    c.check("Locust exports its stats at /metrics", r is not None and "locust_requests_total" in r.text)

    base = urls["prometheus"]
    c.check(
        "Prometheus scrapes proxy, Locust and the nginx exporter",
        wait_for(lambda: len(prom(base, "up == 1")) == 3, 30),
        str(prom(base, "up")),
    )
    absent = grafana.not_exposed(metrics.scrape(proxy).labels("lab_proxy_info"))
    values = {"engine": case.engine, "lifetime": case.lifetime}
    empty = grafana.panels_without_data(base, values, "10s", absent=absent)
    c.check("every dashboard panel has data", not empty, "; ".join(empty))
    web.stop()

    if "grafana" in urls:
        r = get(f"{urls['grafana']}/api/dashboards/uid/ktor-lab-overview")
        c.check("Grafana shows Lab overview without a login", r is not None and r.ok)
    else:
        print(f"  skip Grafana: {NO_GRAFANA}")
