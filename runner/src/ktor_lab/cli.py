"""`lab`: the lab from the command line, without Docker."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

from . import nginx, proxy
from .paths import CASES, PROXY_JAR, REPO, split_case
from .processes import Service

EPILOG = """\
examples:
  lab up singleton-cio                  nginx and the proxy on 127.0.0.1, until Ctrl-C
  lab up per-call-okhttp --proxy-port 9080 --set CLIENT_MAX_CONNECTIONS=200
  lab bench                             wrk against nginx, nginx proxy_pass and every case
  lab bench --cases singleton-cio --warmup 30 --duration 5
  lab bench-locust --workers 2          Locust's own ceiling against nginx directly
"""


def main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lab",
        description="Ktor client engine lab, run natively on loopback.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="start nginx and the proxy for one case; Ctrl-C stops them")
    up.add_argument("case", help=f"one of: {', '.join(CASES)}")
    add_stack_options(up)
    up.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra proxy variable, e.g. CLIENT_MAX_CONNECTIONS=200 (repeatable)",
    )

    bench = sub.add_parser("bench", help="wrk: nginx direct, nginx proxy_pass, and the proxy per case")
    add_stack_options(bench)
    bench.add_argument("--cases", default=",".join(CASES), help="comma-separated cases (default: all 10)")
    bench.add_argument("--path", default="/files/tiny.txt", help="what wrk fetches (default: %(default)s)")
    bench.add_argument("--connections", type=int, default=64, help="wrk connections (default: %(default)s)")
    bench.add_argument("--threads", type=int, default=1, help="wrk threads (default: %(default)s)")
    bench.add_argument(
        "--duration", type=int, default=10, help="seconds measured per target (default: %(default)s)"
    )
    bench.add_argument(
        "--warmup",
        type=int,
        default=150,
        help="most seconds of unmeasured load before each target; it ends sooner once two 5 s windows "
        "agree within 5%% and the proxy's JIT compilers were quiet (default: %(default)s)",
    )
    bl = sub.add_parser(
        "bench-locust", help="the most rps the lab's Locust makes against nginx: 1 process, then workers"
    )
    add_stack_options(bl)
    bl.add_argument("--users", type=int, default=100, help="users, never waiting (default: %(default)s)")
    bl.add_argument(
        "--workers", type=int, default=2, help="workers in the distributed run (default: %(default)s)"
    )
    bl.add_argument("--duration", type=int, default=15, help="seconds per run (default: %(default)s)")
    return parser


def add_stack_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nginx-port",
        type=int,
        default=int(os.environ.get("LAB_NGINX_PORT", 18080)),
        help="nginx load port on 127.0.0.1 (env LAB_NGINX_PORT, default %(default)s)",
    )
    p.add_argument(
        "--nginx-status-port",
        type=int,
        default=int(os.environ.get("LAB_NGINX_STATUS_PORT", 18081)),
        help="nginx stub_status port (env LAB_NGINX_STATUS_PORT, default %(default)s)",
    )
    p.add_argument(
        "--proxy-port",
        type=int,
        default=int(os.environ.get("LAB_PROXY_PORT", 18090)),
        help="proxy port on 127.0.0.1 (env LAB_PROXY_PORT, default %(default)s)",
    )
    p.add_argument(
        "--java-opts",
        default=os.environ.get("JAVA_OPTS", "-Xmx512m"),
        help="JVM options of the proxy, written as --java-opts='-Xmx256m -XX:+UseParallelGC' "
        "(env JAVA_OPTS, default %(default)s)",
    )
    p.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="folder for configs and logs (default: runs/<timestamp>/ in the repo)",
    )


def run_dir(args: argparse.Namespace, name: str) -> Path:
    d = args.run_dir or REPO / "runs" / f"{datetime.now():%Y%m%d-%H%M%S}-{name}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def preflight() -> list[str]:
    """What is missing to run the native stack, each with how to get it."""
    problems = []
    if not Path(nginx.NGINX).exists():
        problems.append("nginx is missing: apt-get install nginx-light libnginx-mod-http-js")
    elif not Path("/usr/share/nginx/modules/ngx_http_js_module.so").exists():
        problems.append("njs is missing: apt-get install libnginx-mod-http-js")
    if not PROXY_JAR.exists():
        problems.append(f"{PROXY_JAR.relative_to(REPO)} is missing: make build")
    return problems


def cmd_up(args: argparse.Namespace) -> int:
    try:
        split_case(args.case)
    except ValueError as e:
        print(f"lab: {e}", file=sys.stderr)
        return 2
    if bad := [kv for kv in args.set if "=" not in kv]:
        print(f"lab: --set takes NAME=VALUE, not {bad[0]!r}", file=sys.stderr)
        return 2
    extra = dict(kv.split("=", 1) for kv in args.set)
    if problems := preflight():
        print("lab: cannot start:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    d = run_dir(args, args.case)
    services: list[Service] = []
    stop = False

    def on_signal(*_):
        nonlocal stop
        stop = True

    # Our own handlers: a process started in the background inherits SIGINT as ignored,
    # and Ctrl-C must stop everything however `lab up` was started.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        services.append(nginx.start(d, nginx.NginxPorts(args.nginx_port, args.nginx_status_port)))
        upstream = f"http://127.0.0.1:{args.nginx_port}"
        env = proxy.case_env(args.case, upstream, args.proxy_port, **extra)
        services.append(proxy.start(d, env, args.java_opts.split()))
        print(f"lab: {args.case} is up (logs in {d})")
        print(f"  proxy    http://127.0.0.1:{args.proxy_port}/  (/metrics, /health)")
        print(
            f"  nginx    {upstream}/files/manifest.json  (status http://127.0.0.1:{args.nginx_status_port}/stub_status)"
        )
        print("  Ctrl-C stops everything")
        while not stop:
            for s in services:
                if not s.alive():
                    print(f"lab: {s.name} exited with {s.proc.returncode}:\n{s.tail()}", file=sys.stderr)
                    return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    except (RuntimeError, TimeoutError, OSError) as e:
        print(f"lab: {e}", file=sys.stderr)
        return 1
    finally:
        for s in reversed(services):
            s.stop()
        print("lab: stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = main_parser().parse_args(argv)
    if args.command == "up":
        return cmd_up(args)
    if args.command == "bench":
        from .bench import cmd_bench

        return cmd_bench(args)
    if args.command == "bench-locust":
        from .bench_locust import cmd_bench_locust

        return cmd_bench_locust(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
