"""`lab bench`: the proxy's overhead, measured with wrk against references from the same run.

Targets, each on its own: nginx serving the file directly, nginx `proxy_pass` to that
nginx (the reference a proxy is judged by), then the Ktor proxy for each case, started
fresh, and after each engine's singleton case the minimal Ktor proxy (lean-proxy/: one client
built the same way, nothing else) with that engine in its two forms: `lean` reads each body
whole (`client.get`, `respondBytes`), `lean streamed` copies it as it arrives (`execute { }`,
`respondBytesWriter`), as a proxy must for a large body. The lab's proxy against `lean` is its
whole overhead; against `lean streamed`, its overhead beside what streaming costs on its own.
Every target is warmed up until its rate is stable and its JIT quiet (warmup.py), then
measured over a fixed window with fixed connections; for a JVM, its CPU time and its threads'
voluntary context switches (handoffs between threads) per request over the window too.
Figures and every setting go to bench.json in the run folder.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from .. import render, stack
from ..cases import CASES, Case, all_of, case_list
from ..errors import LabError
from ..machine import cpus, java, process_context_switches, process_cpu_seconds, version
from ..parts import wrk
from ..paths import LEAN_PROXY_JAR, REPO
from ..rundirs import run_dir
from ..warmup import JitClock, warm_up
from . import options


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="wrk: nginx direct, nginx proxy_pass, and the proxy per case")
    options.add_stack_options(p)
    p.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated cases (default: {all_of(CASES, 'cases')})"
    )
    p.add_argument("--path", default="/files/tiny.txt", help="what wrk fetches (default: %(default)s)")
    p.add_argument("--connections", type=int, default=64, help="wrk connections (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="wrk threads (default: %(default)s)")
    p.add_argument(
        "--duration", type=int, default=10, help="seconds measured per target (default: %(default)s)"
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=150,
        help="most seconds of unmeasured load before each target; it ends sooner once two 5 s windows "
        "agree within 5%% and the proxy's JIT compilers were quiet (default: %(default)s)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds over every target, interleaved (A B A B); the table gives medians, and each "
        "case's CPU against its minimal proxy as the median of the rounds' ratios (default: %(default)s)",
    )


def measure(name: str, url: str, args: argparse.Namespace, jvm_pid: int | None = None) -> dict:
    warm = warm_up(lambda s: wrk.run(url, args.connections, args.threads, s)["rps"], args.warmup, jvm_pid)
    jit = JitClock(jvm_pid) if jvm_pid else None
    cpu_before = process_cpu_seconds(jvm_pid) if jvm_pid else 0.0
    switches_before = process_context_switches(jvm_pid) if jvm_pid else 0
    r = wrk.run(url, args.connections, args.threads, args.duration)
    r.update(
        target=name,
        warmup_s=warm.seconds,
        warmup_settled=warm.settled,
        cpu_ms_per_request=None,
        switches_per_request=None,
    )
    if jvm_pid:
        r["jit_cpu_s_in_window"] = round(jit.lap(), 2)
        if r["requests"]:
            r["cpu_ms_per_request"] = (process_cpu_seconds(jvm_pid) - cpu_before) * 1000 / r["requests"]
            switches = process_context_switches(jvm_pid) - switches_before
            r["switches_per_request"] = switches / r["requests"]
    note = "" if warm.settled else "  (not warm at the end of the warm-up)"
    cpu = f"  CPU {r['cpu_ms_per_request']:.3f} ms/req" if r["cpu_ms_per_request"] is not None else ""
    if r["switches_per_request"] is not None:
        cpu += f"  {r['switches_per_request']:.1f} switches/req"
    print(
        f"  {name:<22} {r['rps']:>9.0f} rps  p50 {r['p50_us'] / 1000:7.2f} ms  "
        f"p99 {r['p99_us'] / 1000:7.2f} ms  errors {r['errors']}{cpu}  warm-up {warm.seconds:.0f} s{note}",
        flush=True,
    )
    return r


def run(args: argparse.Namespace) -> int:
    if problem := wrk.missing():
        raise LabError(problem)
    if args.repeats < 1:
        raise LabError(f"--repeats {args.repeats}: give 1 or more rounds")
    try:
        cases = case_list(args.cases)
    except ValueError as e:
        raise LabError(str(e)) from None
    missing = stack.missing(prometheus_too=False)
    if not LEAN_PROXY_JAR.exists():
        missing.append(f"{LEAN_PROXY_JAR.relative_to(REPO)} is missing: make build")
    stack.require(missing)
    ports = options.ports(args)
    stack.require(stack.busy_ports(ports, ("nginx", "nginx_status", "proxy")))
    d = run_dir("bench", args.run_dir)
    settings = {
        "path": args.path,
        "connections": args.connections,
        "wrk_threads": args.threads,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "repeats": args.repeats,
        "java_opts": args.java_opts,
        "client_max_connections": "1000 (proxy default)",
        "cpus": cpus(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "nginx": version(["nginx", "-v"]),
        "wrk": version(["wrk", "-v"]),
        "java": version([java(), "-version"]),
    }
    print("lab bench: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    rounds: list[dict] = []
    with stack.Stack(d, ports, args.java_opts.split()) as lab:
        lab.nginx()
        for n in range(1, args.repeats + 1):
            if args.repeats > 1:
                print(f"round {n} of {args.repeats}", flush=True)
            rounds.extend(dict(r, round=n) for r in one_round(lab, cases, args))
    results = summarize(rounds, cases)
    text = table(results).markdown()
    print("\n" + text)
    (d / "bench.json").write_text(
        json.dumps({"settings": settings, "results": results, "rounds": rounds}, indent=2)
    )
    (d / "bench.md").write_text(text + "\n")
    print(f"\nlab bench: written {d / 'bench.json'} and bench.md")
    return 0


def one_round(lab: stack.Stack, cases: list[Case], args: argparse.Namespace) -> list[dict]:
    """Every target once: nginx, nginx proxy_pass, then each case and, after each engine's first
    case, that engine's minimal proxy in its two forms."""
    results = [measure("nginx direct", lab.upstream_url + args.path, args)]
    reference, url = lab.proxy_pass()
    results.append(measure("nginx proxy_pass", url + args.path, args))
    lab.stop_service(reference)
    for case in cases:
        proxy = lab.proxy(case)
        results.append(measure(case.name, proxy.url + args.path, args, jvm_pid=proxy.service.pid))
        lab.stop_proxy()
        time.sleep(1)
        singleton = Case("singleton", case.engine)
        if case.lifetime == "singleton" or singleton not in cases:
            for body in LEAN_FORMS:
                lean = lab.proxy(singleton, jar=LEAN_PROXY_JAR, LEAN_BODY=body)
                target = lean_target(case.engine, body)
                results.append(measure(target, lean.url + args.path, args, jvm_pid=lean.service.pid))
                lab.stop_proxy()
                time.sleep(1)
    return results


LEAN_FORMS = ("whole", "streamed")


def lean_target(engine: str, body: str) -> str:
    """The bench's name for the minimal proxy of `engine` in the form `body` (LEAN_BODY)."""
    return f"lean {engine}" if body == "whole" else f"lean {body} {engine}"


def summarize(rounds: list[dict], cases: list[Case]) -> list[dict]:
    """One row per target in the order measured: medians over the rounds, and each case's CPU per
    request against its engine's minimal proxy, in both forms, as the median of the ratios taken
    within a round (the two ran minutes apart, not a whole round apart)."""
    targets = list(dict.fromkeys(r["target"] for r in rounds))
    rows = []
    for target in targets:
        runs = [r for r in rounds if r["target"] == target]
        row = {
            "target": target,
            "rounds": len(runs),
            **{k: median([r[k] for r in runs]) for k in ("rps", "p50_us", "p99_us")},
            "requests": sum(r["requests"] for r in runs),
            "errors": sum(r["errors"] for r in runs),
            "warmup_s": max(r["warmup_s"] for r in runs),
            "warmup_settled": all(r["warmup_settled"] for r in runs),
            "cpu_ms_per_request": median([r["cpu_ms_per_request"] for r in runs]),
            "switches_per_request": median([r.get("switches_per_request") for r in runs]),
        }
        rows.append(row)
    reference_rps = next(r for r in rows if r["target"] == "nginx proxy_pass")["rps"]
    cpu = {(r["round"], r["target"]): r["cpu_ms_per_request"] for r in rounds}
    numbers = sorted({r["round"] for r in rounds})
    for row in rows:
        row["ratio_to_proxy_pass"] = row["rps"] / reference_rps
        by_name = {case.name: case for case in cases}
        engine = by_name[row["target"]].engine if row["target"] in by_name else None
        for body, key in (("whole", "cpu_to_lean"), ("streamed", "cpu_to_lean_streamed")):
            ratios = []
            if engine:
                for n in numbers:
                    mine, ref = cpu.get((n, row["target"])), cpu.get((n, lean_target(engine, body)))
                    if mine and ref:
                        ratios.append(mine / ref)
            row[f"{key}_rounds"] = [round(x, 3) for x in ratios]
            row[key] = median(ratios)
    return rows


def median(values: list) -> float | None:
    """The median of the known values (a nginx target has no CPU figure); None when none is known."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def table(results: list[dict]) -> render.Table:
    return render.Table(
        [
            render.Column("target", lambda r: r["target"]),
            render.Column("rps", lambda r: r["rps"]),
            render.Column("p50 ms", lambda r: r["p50_us"] / 1000, 2),
            render.Column("p99 ms", lambda r: r["p99_us"] / 1000, 2),
            render.Column("errors", lambda r: r["errors"]),
            render.Column("x proxy_pass", lambda r: r["ratio_to_proxy_pass"], 3),
            render.Column("CPU ms / req", lambda r: r["cpu_ms_per_request"], 3),
            render.Column("CPU x lean", lambda r: r["cpu_to_lean"], 2),
            render.Column(
                "x lean per round",
                lambda r: " ".join(f"{x:.2f}" for x in r["cpu_to_lean_rounds"]) if r["rounds"] > 1 else "",
            ),
            render.Column("CPU x lean streamed", lambda r: r["cpu_to_lean_streamed"], 2),
            render.Column("switches / req", lambda r: r["switches_per_request"], 1),
            render.Column(
                "warm-up s",
                lambda r: f"{r['warmup_s']:.0f}" + ("" if r["warmup_settled"] else " (unsettled)"),
            ),
        ],
        results,
        numeric=[False, True, True, True, True, True, True, True, False, True, True, True],
    )
