"""`lab bench`: the proxy's overhead, measured with wrk against references from the same run.

Targets, each on its own: nginx serving the file directly, nginx `proxy_pass` to that
nginx (the reference a proxy is judged by), then the Ktor proxy for each case, started
fresh. Every target is warmed up until its rate is stable, then measured over a fixed
window with fixed connections. Figures and every setting go to bench.json in the run folder.

Why the warm-up is adaptive: on 2 cores the JIT compiles the proxy's path for about a
minute under load, and throughput triples meanwhile. A fixed few seconds would measure
the compiler, not the engine.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

from . import nginx, proxy, stack
from .processes import Service, free_port

# wrk calls done() once at the end; this prints one JSON line with what the table needs.
WRK_REPORT = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, "p50_us": %d, "p99_us": %d, "max_us": %d, ' ..
    '"connect_errors": %d, "read_errors": %d, "write_errors": %d, "timeouts": %d, "non_2xx_3xx": %d}\n',
    summary.requests, summary.duration, summary.bytes, latency:percentile(50), latency:percentile(99),
    latency.max, e.connect, e.read, e.write, e.timeout, e.status))
end
"""

PROXY_PASS_CONF = """\
worker_processes auto;
worker_rlimit_nofile 20000;
error_log {run}/proxy-pass-error.log warn;
pid {run}/proxy-pass.pid;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    proxy_temp_path {run}/tmp/proxy-pass;
    upstream lab_nginx {{
        server 127.0.0.1:{upstream};
        keepalive 1024;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://lab_nginx;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;
        }}
    }}
}}
"""


def wrk(url: str, connections: int, threads: int, seconds: int, script: Path) -> dict:
    out = subprocess.run(
        [
            "wrk",
            "-t",
            str(threads),
            "-c",
            str(connections),
            "-d",
            f"{seconds}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("{"))
    r = json.loads(line)
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    r["errors"] = (
        r["connect_errors"] + r["read_errors"] + r["write_errors"] + r["timeouts"] + r["non_2xx_3xx"]
    )
    return r


WARMUP_WINDOW_S = 5
WARMUP_TOLERANCE = 0.05
# The JIT counts as done when its compiler threads used under this share of one core
# during a window.
JIT_QUIET_SHARE = 0.02


def jit_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by the JVM's C1/C2 compiler threads (from /proc)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().startswith(("C1 Compiler", "C2 Compiler")):
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime + stime
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total / os.sysconf("SC_CLK_TCK")


def warm_up(url: str, args: Namespace, script: Path, jvm_pid: int | None = None) -> tuple[float, bool]:
    """Loads `url` in 5 s windows until it is warm, or `args.warmup` seconds pass.

    Warm: two windows in a row whose rates differ by under 5%, and, for a JVM, a window
    in which the JIT compilers were quiet. Returns the seconds spent and whether it got warm.
    """
    spent, previous = 0.0, None
    jit = jit_cpu_seconds(jvm_pid) if jvm_pid else 0.0
    while spent + WARMUP_WINDOW_S <= args.warmup:
        rps = wrk(url, args.connections, args.threads, WARMUP_WINDOW_S, script)["rps"]
        spent += WARMUP_WINDOW_S
        jit_quiet = True
        if jvm_pid:
            now = jit_cpu_seconds(jvm_pid)
            jit_quiet = now - jit < JIT_QUIET_SHARE * WARMUP_WINDOW_S
            jit = now
        if jit_quiet and previous and abs(rps - previous) <= WARMUP_TOLERANCE * previous:
            return spent, True
        previous = rps
    return spent, False


def measure(name: str, url: str, args: Namespace, script: Path, jvm_pid: int | None = None) -> dict:
    warm_s, settled = warm_up(url, args, script, jvm_pid)
    jit_before = jit_cpu_seconds(jvm_pid) if jvm_pid else 0.0
    r = wrk(url, args.connections, args.threads, args.duration, script)
    r.update(target=name, warmup_s=warm_s, warmup_settled=settled)
    if jvm_pid:
        r["jit_cpu_s_in_window"] = round(jit_cpu_seconds(jvm_pid) - jit_before, 2)
    note = "" if settled else "  (not warm at the end of the warm-up)"
    print(
        f"  {name:<22} {r['rps']:>9.0f} rps  p50 {r['p50_us'] / 1000:7.2f} ms  "
        f"p99 {r['p99_us'] / 1000:7.2f} ms  errors {r['errors']}  warm-up {warm_s:.0f} s{note}",
        flush=True,
    )
    return r


def cmd_bench(args: Namespace) -> int:
    from .cli import preflight, run_dir

    if shutil.which("wrk") is None:
        print("lab: wrk is missing: apt-get install wrk", file=sys.stderr)
        return 2
    if stack.cannot_start(preflight()):
        return 2
    ports = stack.Ports(nginx=args.nginx_port, nginx_status=args.nginx_status_port, proxy=args.proxy_port)
    if stack.cannot_start(stack.busy_ports(ports, ("nginx", "nginx_status", "proxy"))):
        return 2
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    d = run_dir(args, "bench")
    script = d / "report.lua"
    script.write_text(WRK_REPORT)
    settings = {
        "path": args.path,
        "connections": args.connections,
        "wrk_threads": args.threads,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "java_opts": args.java_opts,
        "client_max_connections": "1000 (proxy default)",
        "cpus": _cpus(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "nginx": _version(["nginx", "-v"]),
        "wrk": _version(["wrk", "-v"]),
        "java": _version([proxy.java(), "-version"]),
    }
    print("lab bench: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    results = []
    services: list[Service] = []
    try:
        ports = nginx.NginxPorts(args.nginx_port, args.nginx_status_port)
        services.append(nginx.start(d, ports))
        upstream = f"http://127.0.0.1:{ports.http}"
        results.append(measure("nginx direct", upstream + args.path, args, script))

        pp_port = free_port()
        (d / "tmp" / "proxy-pass").mkdir(parents=True, exist_ok=True)
        conf = d / "proxy-pass.conf"
        conf.write_text(PROXY_PASS_CONF.format(run=d.resolve(), upstream=ports.http, port=pp_port))
        pp = Service(
            "nginx-proxy-pass", [nginx.NGINX, "-c", str(conf), "-g", "daemon off;"], d / "proxy-pass.log"
        )
        services.append(pp)
        pp.wait_http(f"http://127.0.0.1:{pp_port}{args.path}")
        results.append(measure("nginx proxy_pass", f"http://127.0.0.1:{pp_port}{args.path}", args, script))
        pp.stop()
        services.remove(pp)

        for case in cases:
            svc = proxy.start(d, proxy.case_env(case, upstream, args.proxy_port), args.java_opts.split())
            try:
                url = f"http://127.0.0.1:{args.proxy_port}{args.path}"
                results.append(measure(case, url, args, script, jvm_pid=svc.pid))
            finally:
                svc.stop()
            time.sleep(1)
    finally:
        for s in services:
            s.stop()

    reference = next(r for r in results if r["target"] == "nginx proxy_pass")["rps"]
    for r in results:
        r["ratio_to_proxy_pass"] = r["rps"] / reference
    table = render_table(results)
    print("\n" + table)
    (d / "bench.json").write_text(json.dumps({"settings": settings, "results": results}, indent=2))
    (d / "bench.md").write_text(table + "\n")
    print(f"\nlab bench: written {d / 'bench.json'} and bench.md")
    return 0


def render_table(results: list[dict]) -> str:
    rows = [
        "| target | rps | p50 ms | p99 ms | errors | x proxy_pass | warm-up s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        warm = f"{r['warmup_s']:.0f}" + ("" if r["warmup_settled"] else " (unsettled)")
        rows.append(
            f"| {r['target']} | {r['rps']:.0f} | {r['p50_us'] / 1000:.2f} | {r['p99_us'] / 1000:.2f} "
            f"| {r['errors']} | {r['ratio_to_proxy_pass']:.3f} | {warm} |"
        )
    return "\n".join(rows)


def _version(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except OSError:
        return "missing"
    return (r.stdout + r.stderr).strip().splitlines()[0] if (r.stdout + r.stderr).strip() else "?"


def _cpus() -> int:
    return len(os.sched_getaffinity(0))
