"""`lab swarm up|run|push|ps|down`: the lab as a Docker Swarm stack (docker-stack.yml, docs/swarm.md).

`up` labels a one-node swarm, builds the proxy's and Locust's images and pushes them to a
registry the nodes share (one it starts on this machine unless --registry names another),
deploys the stack for a case and waits until every service is healthy. Every UI of the stack asks
for a login, user lab: the password is LAB_PASSWORD from the shell, else one made at the first
deploy and printed once (parts/swarm.py keeps it). `run` does the same,
then one headless Locust run through the Locust master's web API, and writes its figures with
where each part ran and every node's CPU and memory to results/. `down` removes it all.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

from .. import metrics, versions
from ..backends import ProxyHandle, SwarmBackend
from ..cases import CASES, SCENARIOS, Case
from ..errors import LabError
from ..network import Network
from ..parts import compose, swarm
from ..parts.loadgen import LocustWeb
from ..paths import REPO
from ..plan import Load, Plan, parse_load
from ..processes import wait_until
from ..rundirs import stamp
from . import options

VARIABLE = re.compile(r"\$\{(\w+)")
# Variables lab swarm sets from its own options.
BY_OPTION = {
    "CLIENT_ENGINE": "the case",
    "CLIENT_LIFETIME": "the case",
    "LAB_REGISTRY": "--registry",
    "LOCUST_WORKERS": "--workers",
    "GRAFANA_REPLICAS": "--no-grafana",
    "LAB_PASSWORD_SECRET": "--name (the secret is NAME-password)",
    "LAB_PASSWORD": "your shell's LAB_PASSWORD (a --set would show it in the process list)",
}
STACK_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
REGISTRY = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:\d{1,5})?")
# What the images' build reads besides (docker-compose.yml's build args): the proxy's JVM image, Locust's.
BUILD_VARIABLES = {"PROXY_RUN_IMAGE", "LOCUST_IMAGE"}
# What lab swarm itself reads: 1 publishes the proxy and nginx (docker-stack.publish-proxy.yml).
LAB_VARIABLES = {"LAB_PUBLISH_PROXY"}
# The proxy's count of its exchanges with nginx, read before and after the run, as Prometheus
# scrapes it (prometheus/swarm.yml's target).
SERVED = "lab_upstream_requests_seconds_count"
PROXY_TARGET = "proxy:8080"
LOCUST_TARGET = "locust:8089"
# Each node's idle CPU time, all cores (locust/lab_node.py): 1 - its rate per core is how busy it was.
IDLE = 'lab_node_cpu_seconds_total{mode="idle"}'


def add_parser(sub) -> None:
    p = sub.add_parser("swarm", help="the lab on Docker Swarm: up, run, push, ps, down (docs/swarm.md)")
    verbs = p.add_subparsers(dest="verb", required=True)
    for verb, text in (
        ("up", "deploy the stack for a case and wait until every service is healthy"),
        ("run", "deploy, one headless Locust run, its figures and each node's in results/"),
    ):
        v = verbs.add_parser(verb, help=text)
        v.add_argument("case", help=f"one of: {', '.join(CASES)}")
        v.add_argument(
            "--workers", type=int, default=2, help="Locust workers (default 2, spread over the nodes)"
        )
        v.add_argument("--registry", help="HOST:PORT every node pulls from (default: one started here)")
        v.add_argument(
            "--registry-port", type=int, default=swarm.REGISTRY_PORT, help="of the registry started here"
        )
        v.add_argument("--no-build", action="store_true", help="push the images as they are")
        v.add_argument("--no-push", action="store_true", help="the images are in --registry already")
        v.add_argument("--no-grafana", action="store_true", help="leave Grafana out (0 replicas)")
        v.add_argument("--timeout", type=float, default=300, help="seconds to wait for health (default 300)")
        options.add_settings(v, " of docker-stack.yml, e.g. LOCUST_HOST_PORT=18089")
        add_name(v)
        if verb == "run":
            v.add_argument("--users", type=int, default=50, help="Locust users (default 50)")
            v.add_argument("--rate", type=float, default=0, help="requests a second (default: closed loop)")
            v.add_argument("--seconds", type=int, default=60, help="length of the run (default 60)")
            v.add_argument("--keep", action="store_true", help="leave the stack up after the run")
            v.add_argument(
                "--run-dir", type=Path, help="where to write (default results/swarm-<time>-<case>)"
            )
    push = verbs.add_parser(
        "push", help="build the proxy's and Locust's images and push them (for docker stack deploy)"
    )
    push.add_argument("--registry", required=True, help="HOST:PORT every node pulls from")
    push.add_argument("--no-build", action="store_true", help="push the images as they are")
    options.add_settings(push, ", e.g. KTOR_VERSION=3.5.1")
    add_name(verbs.add_parser("ps", help="where each service runs, and every node's labels"))
    add_name(verbs.add_parser("down", help="remove the stack and the registry lab swarm started"))


def add_name(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="ktor-lab", help="the stack's name (default ktor-lab)")


def stack_settings(pairs: list[str]) -> dict[str, str]:
    """--set pairs, each a variable docker-stack.yml or the images' build reads (LabError naming
    the first that is not, or the option that sets it)."""
    given = options.settings(pairs)
    if flagged := sorted(set(given) & set(BY_OPTION)):
        raise LabError(f"--set {flagged[0]}: {BY_OPTION[flagged[0]]} sets it")
    stack_files = swarm.STACK_FILE.read_text() + swarm.PUBLISH_FILE.read_text()
    known = set(VARIABLE.findall(stack_files)) | BUILD_VARIABLES | LAB_VARIABLES
    if unknown := sorted(set(given) - known):
        reads = ", ".join(sorted(known - set(BY_OPTION)))
        raise LabError(
            f"--set {unknown[0]}: neither docker-stack.yml nor the build reads it; they read {reads}"
        )
    if "KTOR_VERSION" in given:
        try:
            versions.release(given["KTOR_VERSION"])
        except ValueError as e:
            raise LabError(f"--set KTOR_VERSION: {e}") from None
    return given


def check_names(args: argparse.Namespace) -> None:
    """The stack's name and the registry's address, as Docker takes them."""
    if not STACK_NAME.fullmatch(getattr(args, "name", "ktor-lab")):
        raise LabError(f"--name {args.name!r}: a stack name is letters, digits, '_', '.' and '-'")
    if getattr(args, "registry", None) and not REGISTRY.fullmatch(args.registry):
        raise LabError(f"--registry {args.registry!r}: give HOST:PORT (or HOST), e.g. registry.example:5000")


def run(args: argparse.Namespace) -> int:
    check_names(args)
    if args.dry_run and args.verb in ("push", "down", "ps"):
        print(f"lab swarm: dry run; would {args.verb} {getattr(args, 'name', 'the stack')}")
        return 0
    if args.verb == "push":
        base = {**compose.dotenv(), **os.environ, **stack_settings(args.set)}
        if problem := compose.engine_problem():
            raise LabError(problem)
        for tag in swarm.build_and_push(args.registry, base, build=not args.no_build):
            print(f"lab swarm: pushed {tag}")
        return 0
    if args.verb in ("down", "ps"):
        if problem := swarm.swarm_problem():
            raise LabError(problem)
        if args.verb == "down":
            return down(args.name)
        show_placement(args.name)
        return 0
    try:
        case = Case.parse(args.case)
    except ValueError as e:
        raise LabError(str(e)) from None
    for option, low in (("workers", 1), ("timeout", 1), *((("users", 1), ("seconds", 1), ("rate", 0)))):
        if getattr(args, option, low) < low:
            raise LabError(f"--{option} must be {low} or more")
    if args.no_push and not args.registry:
        raise LabError("--no-push needs --registry: the registry the images are in")
    backend = SwarmBackend(
        args.name,
        args.registry,
        args.registry_port,
        stack_settings(args.set),
        build=not args.no_build,
        push=not args.no_push,
        grafana=not args.no_grafana,
        timeout=args.timeout,
    )
    # What the Locust UI first offers, as lab up's: the case, its first scenario, 50 users.
    plan = Plan([case], [SCENARIOS[0]], [parse_load("closed/50/0")], workers=args.workers)
    backend.check(plan, machine=not args.dry_run)
    if args.dry_run:
        release = backend.release_of(case)
        print(f"lab swarm: dry run; would {args.verb} {case.id} (Ktor {release}) as the stack {args.name}")
        return 0
    options.handle_signals()
    try:
        backend.open(plan, REPO / "results")  # it keeps no logs of its own
        proxy = backend.start_case(case, {}, Network())
        announce(args, case, backend)
        if args.verb == "up":
            return 0
        return headless(args, case, backend, proxy)
    except BaseException:
        if args.verb == "run" and not args.keep:
            print(f"lab swarm: removing {args.name} after the failure", file=sys.stderr)
        elif args.verb == "up":
            print(f"lab swarm: {args.name} is left as it is: `lab swarm down` removes it", file=sys.stderr)
        raise
    finally:
        if args.verb == "run" and not args.keep:
            down(args.name)


def announce(args: argparse.Namespace, case: Case, backend: SwarmBackend) -> None:
    """Where each service runs, and the UIs' addresses with their login."""
    counts = backend.counts
    print(f"lab swarm: {case.id} is up: {', '.join(f'{s} {r}/{d}' for s, (r, d) in counts.items())}")
    show_placement(args.name)
    env = backend.env
    published = ("proxy", "nginx") if swarm.publishes_proxy(env) else ()
    for service in ("locust", "grafana", "prometheus", *published):
        if service == "grafana" and args.no_grafana:
            continue
        print(f"  {service:<10} {swarm.url(args.name, service, env)}/")
    assert backend.login is not None
    print(f"lab swarm: Locust, Prometheus and Grafana ask for a login: {backend.login.describe()}")
    if not published:
        print("lab swarm: the proxy and nginx are not published (LAB_PUBLISH_PROXY=1 publishes them)")


def show_placement(name: str) -> None:
    for service, where in swarm.placement(name).items():
        print(f"  {service:<15} on {', '.join(where)}")
    for node in swarm.nodes():
        roles = ", ".join(node.roles()) or "no lab role"
        print(f"  node {node.hostname} ({node.addr}, {node.state}): {roles}")


def scraped(prometheus: str, auth: tuple[str, str], target: str, after: float) -> None:
    """Wait until Prometheus has scraped `target` (a service on the overlay) after `after`."""
    if not wait_until(lambda: metrics.scraped_since(prometheus, target, after, auth), timeout=30):
        raise LabError(f"Prometheus did not scrape {target} within 30 s", code=1)


def proxy_served(prometheus: str, auth: tuple[str, str], after: float) -> float:
    """The proxy's count of its exchanges with nginx, from a scrape Prometheus made after `after`
    (the proxy's own port is not published: Prometheus reads it on the overlay)."""
    scraped(prometheus, auth, PROXY_TARGET, after)
    return metrics.scalar(prometheus, f"sum({SERVED})", auth=auth) or 0.0


def headless(args: argparse.Namespace, case: Case, backend: SwarmBackend, proxy: ProxyHandle) -> int:
    """One run through the Locust master's web API, as its UI starts one; its figures, the
    proxy's count of the same requests, where each part ran and each node's CPU and memory."""
    d = args.run_dir or REPO / "results" / f"swarm-{stamp()}-{case.id}"
    d.mkdir(parents=True, exist_ok=True)
    auth = backend.auth
    env = backend.env
    web = LocustWeb(backend.locust_url, auth=auth)
    prometheus = backend.prometheus_url
    deadline = time.monotonic() + 60
    while web.stats().workers < args.workers and time.monotonic() < deadline:
        time.sleep(1)
    if (have := web.stats().workers) < args.workers:
        raise LabError(f"only {have} of {args.workers} Locust workers joined the master in 60 s", code=1)
    # Prometheus finds each node's exporter by DNS (every 5 s): every node in it before the run.
    count = len([n for n in swarm.nodes() if n.state == "ready" and n.availability == "active"])
    while (
        len(metrics.query(prometheus, "lab_node_cpus", auth=auth)) < count
        and time.monotonic() < deadline + 60
    ):
        time.sleep(1)
    if (seen := len(metrics.query(prometheus, "lab_node_cpus", auth=auth))) < count:
        print(f"lab swarm run: Prometheus has {seen} of {count} nodes' figures; the others' are null")
    custom = {"scenario": "static-small", "lab_case": case.id}
    load = Load("closed", args.users)
    if args.rate:
        custom |= {"load_model": "rate", "target_rps": args.rate}
        load = Load("rate", args.users, target_rps=args.rate)
    before = proxy_served(prometheus, auth, time.time())
    # Locust's figures of the whole load in Prometheus (and so in Grafana's panels for its span):
    # Locust scraped before the load starts and after its last workers' report.
    scraped(prometheus, auth, LOCUST_TARGET, time.time())
    start = time.time()
    web.swarm(backend.locust_host(proxy), args.users, args.users / load.ramp_s, **custom)  # Load.ramp_s
    time.sleep(args.seconds)
    web.stop()
    time.sleep(4)  # workers send their last requests' stats with their next 3 s report
    stats = web.stats()
    end = time.time()
    window = f"{max(int(end - start), 15)}s"  # 3 scrapes at least
    nodes = {
        r["metric"]["node"]: r["value"][1]
        for r in metrics.query(
            prometheus,
            f"1 - sum by (node) (rate({IDLE}[{window}])) / sum by (node) (lab_node_cpus)",
            at=end,
            auth=auth,
        )
    }
    memory = {
        r["metric"]["node"]: r["value"][1]
        for r in metrics.query(prometheus, 'lab_node_memory_bytes{kind="available"}', at=end, auth=auth)
    }
    proxy_cores = metrics.query(
        prometheus, f"sum(rate(process_cpu_time_ns_total[{window}])) / 1e9", at=end, auth=auth
    )
    # The last exchanges are counted as their bodies end: a scrape half a second later has them.
    served = proxy_served(prometheus, auth, time.time() + 0.5) - before
    scraped(prometheus, auth, LOCUST_TARGET, end)
    in_prometheus = time.time()
    stack_text = swarm.STACK_FILE.read_text() + swarm.PUBLISH_FILE.read_text()
    result = {
        "case": case.id,
        "users": args.users,
        "target_rps": args.rate or None,
        "seconds": args.seconds,
        # the load's span (Unix seconds): from its start until Prometheus had scraped Locust and the
        # proxy after the last workers' report, so a range to `ended` holds the whole run's figures
        "started": round(start, 3),
        "ended": round(in_prometheus, 3),
        "workers": stats.workers,
        "requests": stats.requests,
        "failures": stats.failures,
        "errors": stats.errors,
        "proxy_upstream_requests": round(served),
        # the services' own CPU beside their nodes': the proxy's in cores, each Locust process's peak
        "proxy_cpu_cores": float(proxy_cores[0]["value"][1]) if proxy_cores else None,
        "locust_cpu_peak_percent": stats.cpu_peak_percent,
        "placement": swarm.placement(args.name),
        "nodes": [
            {
                "hostname": n.hostname,
                "address": n.addr,
                "roles": n.roles(),
                "cpu_busy": _number(nodes.get(n.hostname)),
                "memory_available_bytes": _number(memory.get(n.hostname)),
            }
            for n in swarm.nodes()
        ],
        # what the stack was deployed with, and what the images were built with
        "settings": {
            k: env[k]
            for k in sorted(set(VARIABLE.findall(stack_text)) | BUILD_VARIABLES | LAB_VARIABLES)
            if k in env
        },
    }
    (d / "swarm-run.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"lab swarm run: {stats.requests} requests, {stats.failures} failed; the proxy: {round(served)}")
    for n in result["nodes"]:
        busy = "no figure" if n["cpu_busy"] is None else f"{n['cpu_busy']:.0%} busy"
        print(f"  node {n['hostname']}: CPU {busy}, roles {', '.join(n['roles'])}")
    if result["proxy_cpu_cores"] is not None:
        print(f"  the proxy used {result['proxy_cpu_cores']:.2f} cores")
    print(f"lab swarm run: {d / 'swarm-run.json'}")
    return 0 if stats.failures == 0 else 1


def _number(value: str | None) -> float | None:
    """A Prometheus value as a number for JSON: None when missing or not a number."""
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def down(name: str) -> int:
    left = swarm.remove(name)
    if left:
        raise LabError(f"stack {name}: still there after removal: {', '.join(left)}", code=1)
    print(f"lab swarm: {name} removed; nothing of it is left")
    return 0
