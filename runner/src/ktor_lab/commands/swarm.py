"""`lab swarm up|run|push|ps|down`: the lab as a Docker Swarm stack (docker-stack.yml, docs/swarm.md).

`up` labels a one-node swarm, builds the proxy's and Locust's images and pushes them to a
registry the nodes share (one it starts on this machine unless --registry names another),
deploys the stack for a case and waits until every service is healthy. Every UI of the stack asks
for a login, user lab: the password is LAB_PASSWORD from the shell, else one made at the first
deploy and printed once (parts/swarm.py keeps it). `run` does the same, then measures the
case as `lab run` does (measure.run_plan: a warm-up, windows, the verdict's checks) through the
Locust master's web API, and writes results.json with where each part ran and every node's CPU
and memory, and the report, to results/. `down` removes it all.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path

import requests

from .. import measure, metrics, versions
from ..backends import SwarmBackend
from ..cases import CASES, SCENARIOS, Case
from ..errors import LabError
from ..network import Network
from ..parts import compose, swarm
from ..paths import REPO
from ..plan import Plan, parse_load
from ..results import Results
from ..rundirs import results_dir
from . import options
from . import run as lab_run

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
# Each node's idle CPU time, all cores (locust/lab_node.py): 1 - its rate per core is how busy it was.
IDLE = 'lab_node_cpu_seconds_total{mode="idle"}'


def add_parser(sub) -> None:
    p = sub.add_parser("swarm", help="the lab on Docker Swarm: up, run, push, ps, down (docs/swarm.md)")
    verbs = p.add_subparsers(dest="verb", required=True)
    for verb, text in (
        ("up", "deploy the stack for a case and wait until every service is healthy"),
        ("run", "deploy, measure the case as lab run does, its report and each node's figures in results/"),
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
            # lab run's own options of what is measured, how many windows and how each is warmed
            lab_run.add_what(v)
            lab_run.add_windows(v)
            lab_run.add_warming(v)
            v.add_argument("--keep", action="store_true", help="leave the stack up after the run")
            v.add_argument("--out", type=Path, help="results folder (default results/<timestamp>)")
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
    return deploy(args)


def deploy(args: argparse.Namespace) -> int:
    """`up`: the case's stack deployed and healthy, left up; `run`: then measured as `lab run`
    measures, and removed unless --keep."""
    try:
        case = Case.parse(args.case)
    except ValueError as e:
        raise LabError(str(e)) from None
    for option, low in (("workers", 1), ("timeout", 1)):
        if getattr(args, option) < low:
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
    plan = plan_of(args, case)
    backend.check(plan, machine=not args.dry_run)
    if args.dry_run:
        release = backend.release_of(case)
        print(f"lab swarm: dry run; would {args.verb} {case.id} (Ktor {release}) as the stack {args.name}")
        if args.verb == "run":
            print(
                lab_run.announce(
                    plan,
                    backend.keeps_proxies,
                    args.out or "results/<time>",
                    "lab swarm run",
                    backend.scrape_seconds,
                )
            )
        return 0
    options.handle_signals()
    backend.deployed = lambda deployed: announce(args, deployed, backend)
    try:
        if args.verb == "up":
            backend.open(plan, REPO / "results")  # it keeps no logs of its own
            backend.start_case(case, {}, Network())
            return 0
        out = results_dir(args.out)
        print(
            lab_run.announce(plan, backend.keeps_proxies, out, "lab swarm run", backend.scrape_seconds),
            flush=True,
        )
        backend.open(plan, out)
        results = measure.run_plan(plan, backend, out)
        if results.runs:
            try:
                record_nodes(results, backend, out)
            except (LabError, RuntimeError, requests.RequestException) as e:  # the windows stand without
                print(f"lab swarm run: each node's figures could not be read ({e}); the report follows")
        return lab_run.finish(results, out, args.fail_on, "lab swarm run")
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


def plan_of(args: argparse.Namespace, case: Case) -> Plan:
    """`up`: what the Locust UI first offers, as lab up's (the case, its first scenario, 50 users);
    `run`: lab run's plan of the one case, on one JVM, without an A/A pair."""
    if args.verb == "up":
        return Plan([case], [SCENARIOS[0]], [parse_load("closed/50/0")], workers=args.workers)
    try:
        return Plan([case], **lab_run.measured(args))
    except ValueError as e:
        raise LabError(str(e)) from None


def record_nodes(results: Results, backend: SwarmBackend, out: Path) -> None:
    """Into results.json's `backend`: where each service ran, each node's roles, how busy its CPU
    was from the first window's start to the last one's end and its memory available at the end,
    and the settings the stack was deployed with (and the images built with)."""
    start = min(r.window.start for r in results.runs)
    end = max(r.window.end for r in results.runs)
    span, auth, prometheus = f"{max(int(end - start), 15)}s", backend.auth, backend.prometheus_url
    busy = {
        r["metric"]["node"]: r["value"][1]
        for r in metrics.query(
            prometheus,
            f"1 - sum by (node) (rate({IDLE}[{span}])) / sum by (node) (lab_node_cpus)",
            at=end,
            auth=auth,
        )
    }
    memory = {
        r["metric"]["node"]: r["value"][1]
        for r in metrics.query(prometheus, 'lab_node_memory_bytes{kind="available"}', at=end, auth=auth)
    }
    stack_text = swarm.STACK_FILE.read_text() + swarm.PUBLISH_FILE.read_text()
    known = set(VARIABLE.findall(stack_text)) | BUILD_VARIABLES | LAB_VARIABLES
    results.backend |= {
        "placement": {service: ", ".join(where) for service, where in swarm.placement(backend.name).items()},
        "nodes": {
            n.hostname: {
                "address": n.addr,
                "roles": ", ".join(n.roles()),
                "cpu_busy": _number(busy.get(n.hostname)),
                "memory_available_bytes": _number(memory.get(n.hostname)),
            }
            for n in swarm.nodes()
        },
        "settings": {k: backend.env[k] for k in sorted(known) if k in backend.env},
    }
    results.write(out)
    for name, n in results.backend["nodes"].items():
        shown = "no figure" if n["cpu_busy"] is None else f"{n['cpu_busy']:.0%} busy"
        print(f"  node {name}: CPU {shown} over the windows, roles {n['roles']}")


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
