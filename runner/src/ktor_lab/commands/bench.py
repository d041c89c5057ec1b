"""`lab bench`: the proxy's overhead, measured with wrk against references from the same run.

Targets, each on its own: nginx serving the file directly, nginx `proxy_pass` to that
nginx (the reference a proxy is judged by), then the Ktor proxy for each case, started
fresh. Every target is warmed up until its rate is stable and its JIT quiet (warmup.py), then
measured over a fixed window with fixed connections. Figures and every setting go to
bench.json in the run folder.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

from .. import render, stack
from ..cases import CASES, case_list
from ..errors import LabError
from ..machine import cpus, java, version
from ..parts import wrk
from ..rundirs import run_dir
from ..warmup import jit_cpu_seconds, warm_up
from . import options


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="wrk: nginx direct, nginx proxy_pass, and the proxy per case")
    options.add_stack_options(p)
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated cases (default: all 10)")
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


def measure(name: str, url: str, args: argparse.Namespace, jvm_pid: int | None = None) -> dict:
    warm = warm_up(lambda s: wrk.run(url, args.connections, args.threads, s)["rps"], args.warmup, jvm_pid)
    jit_before = jit_cpu_seconds(jvm_pid) if jvm_pid else 0.0
    r = wrk.run(url, args.connections, args.threads, args.duration)
    r.update(target=name, warmup_s=warm.seconds, warmup_settled=warm.settled)
    if jvm_pid:
        r["jit_cpu_s_in_window"] = round(jit_cpu_seconds(jvm_pid) - jit_before, 2)
    note = "" if warm.settled else "  (not warm at the end of the warm-up)"
    print(
        f"  {name:<22} {r['rps']:>9.0f} rps  p50 {r['p50_us'] / 1000:7.2f} ms  "
        f"p99 {r['p99_us'] / 1000:7.2f} ms  errors {r['errors']}  warm-up {warm.seconds:.0f} s{note}",
        flush=True,
    )
    return r


def run(args: argparse.Namespace) -> int:
    if problem := wrk.missing():
        raise LabError(problem)
    try:
        cases = case_list(args.cases)
    except ValueError as e:
        raise LabError(str(e)) from None
    stack.require(stack.missing(prometheus_too=False))
    ports = options.ports(args)
    stack.require(stack.busy_ports(ports, ("nginx", "nginx_status", "proxy")))
    d = run_dir("bench", args.run_dir)
    settings = {
        "path": args.path,
        "connections": args.connections,
        "wrk_threads": args.threads,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
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
    results = []
    with stack.Stack(d, ports, args.java_opts.split()) as lab:
        lab.nginx()
        results.append(measure("nginx direct", lab.upstream_url + args.path, args))
        reference, url = lab.proxy_pass()
        results.append(measure("nginx proxy_pass", url + args.path, args))
        lab.stop_service(reference)
        for case in cases:
            proxy = lab.proxy(case)
            results.append(measure(case, proxy.url + args.path, args, jvm_pid=proxy.service.pid))
            lab.stop_proxy()
            time.sleep(1)

    reference_rps = next(r for r in results if r["target"] == "nginx proxy_pass")["rps"]
    for r in results:
        r["ratio_to_proxy_pass"] = r["rps"] / reference_rps
    text = table(results).markdown()
    print("\n" + text)
    (d / "bench.json").write_text(json.dumps({"settings": settings, "results": results}, indent=2))
    (d / "bench.md").write_text(text + "\n")
    print(f"\nlab bench: written {d / 'bench.json'} and bench.md")
    return 0


def table(results: list[dict]) -> render.Table:
    return render.Table(
        [
            render.Column("target", lambda r: r["target"]),
            render.Column("rps", lambda r: r["rps"]),
            render.Column("p50 ms", lambda r: r["p50_us"] / 1000, 2),
            render.Column("p99 ms", lambda r: r["p99_us"] / 1000, 2),
            render.Column("errors", lambda r: r["errors"]),
            render.Column("x proxy_pass", lambda r: r["ratio_to_proxy_pass"], 3),
            render.Column(
                "warm-up s",
                lambda r: f"{r['warmup_s']:.0f}" + ("" if r["warmup_settled"] else " (unsettled)"),
            ),
        ],
        results,
        numeric=[False, True, True, True, True, True, True],
    )
