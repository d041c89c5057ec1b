"""`lab`: the lab from the command line, without Docker."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from . import compose, stack, verdict
from .matrix import LOAD_HELP
from .paths import CASES, REPO, SCENARIOS, split_case
from .stack import Ports

EPILOG = """\
examples:
  lab up singleton-cio                  nginx, proxy, Prometheus, Locust UI (and Grafana) until Ctrl-C
  lab up per-call-okhttp --proxy-port 9080 --set CLIENT_MAX_CONNECTIONS=200
  lab verify                            start everything, check every endpoint and metric, stop
  lab run                               all 10 cases, static-small, closed/50/0, 20 s warm-up, 30 s window
  lab run --cases singleton-cio,per-call-cio --loads closed/1000/1-2,rate/500 --repeats 3
  lab report results/20261122-101500    report.md and report.html from a run's results.json
  lab bench                             wrk against nginx, nginx proxy_pass and every case
  lab bench-locust --workers 2          Locust's own ceiling against nginx directly
  lab study threads                     threads per engine for 100/500/1000 requests in flight (docs/studies/)
"""


def main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lab",
        description="Ktor client engine lab, run natively on loopback.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="the whole stack for one case on 127.0.0.1; Ctrl-C stops it")
    up.add_argument("case", help=f"one of: {', '.join(CASES)}")
    add_stack_options(up)
    add_service_ports(up)
    up.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra proxy variable, e.g. CLIENT_MAX_CONNECTIONS=200 (repeatable)",
    )
    up.add_argument("--workers", type=int, default=0, help="Locust workers beside the master (default: none)")

    verify = sub.add_parser(
        "verify", help="start the stack on free ports, check every endpoint and metric, stop"
    )
    verify.add_argument("case", nargs="?", default="singleton-cio", help="the case (default: %(default)s)")
    verify.add_argument(
        "--java-opts", default=os.environ.get("JAVA_OPTS", "-Xmx256m"), help="proxy JVM options"
    )
    verify.add_argument("--run-dir", type=Path, default=None, help="folder for configs and logs")

    run = sub.add_parser(
        "run",
        help="a headless matrix of cases x scenarios x load levels; writes results/<timestamp>/",
        description="Runs every case x scenario x load level (x repeats, interleaved) with a fresh proxy, "
        "an unmeasured warm-up and a fixed window; writes results.json, report.md and report.html.",
    )
    run.add_argument("--cases", default=",".join(CASES), help="comma-separated cases (default: all 10)")
    run.add_argument(
        "--scenarios",
        default="static-small",
        help=f"comma-separated, of: {', '.join(SCENARIOS)} (default: %(default)s)",
    )
    run.add_argument(
        "--loads",
        default="closed/50/0",
        help=f"comma-separated load levels: {LOAD_HELP} (default: %(default)s)",
    )
    run.add_argument(
        "--repeats", type=int, default=1, help="runs per cell, interleaved A B A B (default: %(default)s)"
    )
    run.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="most seconds of unmeasured load per run; ends sooner once the rate is stable and the JIT "
        "quiet (default: %(default)s; on 2 cores a proxy needs 50-100 s to be fully warm)",
    )
    run.add_argument(
        "--duration", type=int, default=30, help="seconds measured per run (default: %(default)s)"
    )
    run.add_argument("--workers", type=int, default=0, help="Locust workers (default: one Locust process)")
    run.add_argument(
        "--backend",
        choices=("native", "compose"),
        default="native",
        help="where the parts run: host processes, or the compose stack as a project of its own on free "
        "host ports, removed at the end (default: %(default)s)",
    )
    run.add_argument(
        "--grafana", action="store_true", help="compose: also start Grafana (it has no part in the figures)"
    )
    run.add_argument(
        "--java-opts", default=os.environ.get("JAVA_OPTS", "-Xmx512m"), help="proxy JVM options (native)"
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra proxy variable (repeatable)",
    )
    run.add_argument("--out", type=Path, default=None, help="results folder (default: results/<timestamp>)")

    report = sub.add_parser("report", help="report.md and report.html from a folder `lab run` wrote")
    report.add_argument("dir", type=Path, help="the folder holding results.json")

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

    from . import studies

    studies.add_parser(sub)
    return parser


def add_stack_options(p: argparse.ArgumentParser) -> None:
    defaults = Ports()
    p.add_argument(
        "--nginx-port",
        type=int,
        default=int(os.environ.get("LAB_NGINX_PORT", defaults.nginx)),
        help="nginx load port on 127.0.0.1 (env LAB_NGINX_PORT, default %(default)s)",
    )
    p.add_argument(
        "--nginx-status-port",
        type=int,
        default=int(os.environ.get("LAB_NGINX_STATUS_PORT", defaults.nginx_status)),
        help="nginx stub_status port (env LAB_NGINX_STATUS_PORT, default %(default)s)",
    )
    p.add_argument(
        "--proxy-port",
        type=int,
        default=int(os.environ.get("LAB_PROXY_PORT", defaults.proxy)),
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


def add_service_ports(p: argparse.ArgumentParser) -> None:
    defaults = Ports()
    for name, env, default, what in [
        ("locust", "LAB_LOCUST_PORT", defaults.locust, "Locust web UI and its /metrics"),
        ("prometheus", "LAB_PROMETHEUS_PORT", defaults.prometheus, "Prometheus"),
        ("exporter", "LAB_EXPORTER_PORT", defaults.exporter, "nginx exporter"),
        ("grafana", "LAB_GRAFANA_PORT", defaults.grafana, "Grafana (if installed)"),
    ]:
        p.add_argument(
            f"--{name}-port",
            type=int,
            default=int(os.environ.get(env, default)),
            help=f"{what} on 127.0.0.1 (env {env}, default %(default)s)",
        )


def run_dir(args: argparse.Namespace, name: str) -> Path:
    d = args.run_dir or REPO / "runs" / f"{datetime.now():%Y%m%d-%H%M%S}-{name}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def preflight() -> list[str]:
    """What `lab bench` needs: nginx, njs, the jar."""
    return stack.preflight(need_prometheus=False)


def extra_env(pairs: list[str]) -> dict[str, str]:
    """NAME=VALUE pairs of --set; ValueError naming the first bad one."""
    if bad := [kv for kv in pairs if "=" not in kv or not kv.split("=", 1)[0]]:
        raise ValueError(f"--set takes NAME=VALUE, not {bad[0]!r}")
    return dict(kv.split("=", 1) for kv in pairs)


def handle_signals() -> None:
    """Our own handlers: a process started in the background inherits SIGINT as ignored, and
    Ctrl-C (or SIGTERM, SIGHUP) must stop everything however the command was started."""

    def on_signal(*_):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the clean-up that follows must not be cut short
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)


def cmd_up(args: argparse.Namespace) -> int:
    try:
        split_case(args.case)
        extra = extra_env(args.set)
    except ValueError as e:
        print(f"lab: {e}", file=sys.stderr)
        return 2
    if stack.cannot_start(stack.preflight()):
        return 2
    ports = Ports(
        args.nginx_port,
        args.nginx_status_port,
        args.proxy_port,
        args.locust_port,
        args.prometheus_port,
        args.exporter_port,
        args.grafana_port,
    )
    parts = tuple(p for p in stack.PORT_OWNERS if p != "grafana" or stack.grafana_binary())
    if stack.cannot_start(stack.busy_ports(ports, parts)):
        return 2
    d = run_dir(args, args.case)
    lab = stack.NativeStack(d, ports, args.java_opts.split())
    handle_signals()
    try:
        lab.start_upstream()
        lab.start_proxy(args.case, **extra)
        lab.start_prometheus()
        lab.start_locust(args.case, args.workers)
        why_no_grafana = lab.start_grafana()
        print(f"lab: {args.case} is up (logs in {d})")
        print(f"  Locust     {lab.locust_url}/  (start a run there; its stats at /metrics)")
        if why_no_grafana:
            print(f"  Grafana    not started: {why_no_grafana}")
        else:
            print(f"  Grafana    {lab.grafana_url}/  (Lab overview, no login to view)")
        print(f"  Prometheus {lab.prometheus_url}/")
        print(f"  proxy      {lab.proxy_url}/  (/metrics, /health)")
        print(
            f"  nginx      {lab.upstream_url}/files/manifest.json  (status http://127.0.0.1:{ports.nginx_status}/stub_status)"
        )
        print("  Ctrl-C stops everything")
        while True:
            if exited := lab.exited():
                s = exited[0]
                print(f"lab: {s.name} exited with {s.proc.returncode}:\n{s.tail()}", file=sys.stderr)
                return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    except (RuntimeError, TimeoutError, OSError) as e:
        print(f"lab: {e}", file=sys.stderr)
        return 1
    finally:
        lab.stop()
        print("lab: stopped")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from . import matrix, report
    from .backends import ComposeBackend, NativeBackend

    try:
        plan = matrix.Plan(
            cases=[c.strip() for c in args.cases.split(",") if c.strip()],
            scenarios=[s.strip() for s in args.scenarios.split(",") if s.strip()],
            loads=[matrix.parse_load(x) for x in args.loads.split(",") if x.strip()],
            repeats=args.repeats,
            warmup_s=args.warmup,
            duration_s=args.duration,
            workers=args.workers,
            java_opts=args.java_opts,
            proxy_env=extra_env(args.set),
        )
    except ValueError as e:
        print(f"lab: {e}", file=sys.stderr)
        return 2
    if args.backend == "compose":
        if bad := sorted(set(plan.proxy_env) - set(compose.PROXY_VARIABLES)):
            print(
                f"lab: --set {bad[0]}: docker-compose.yml does not pass it to the proxy; "
                f"with --backend compose use one of {', '.join(compose.PROXY_VARIABLES)}",
                file=sys.stderr,
            )
            return 2
    if stack.cannot_start(stack.preflight() if args.backend == "native" else ComposeBackend.preflight()):
        return 2
    out = args.out or REPO / "results" / f"{datetime.now():%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    if args.backend == "native":
        backend = NativeBackend(out / "logs", stack.free_ports(), args.java_opts, args.workers, plan.cases[0])
    else:
        backend = ComposeBackend(args.workers, grafana=args.grafana)
        backend.project.env["PROXY_JAVA_OPTS"] = args.java_opts
    runs = len(plan.runs())
    print(
        f"lab run: {runs} runs ({len(plan.cases)} cases x {len(plan.scenarios)} scenarios x "
        f"{len(plan.loads)} loads x {plan.repeats} repeats), warm-up <= {plan.warmup_s} s, "
        f"window {plan.duration_s} s; at most about "
        f"{matrix.format_seconds(runs * (plan.warmup_s + plan.duration_s + 8))}; results in {out}",
        flush=True,
    )
    handle_signals()
    try:
        backend.open()
        results = matrix.run_matrix(plan, backend, out)
    except KeyboardInterrupt:
        print("lab run: interrupted before the first run finished", file=sys.stderr)
        return 130
    except (RuntimeError, TimeoutError, OSError, subprocess.CalledProcessError) as e:
        print(f"lab run: {e}", file=sys.stderr)
        return 1
    finally:
        backend.close()
    if results["runs"]:
        md, page = report.write_report(out)
        print(
            f"lab run: {len(results['runs'])} runs in {matrix.format_seconds(results['wall_seconds'])}; "
            f"report: {md} and {page}"
        )
        print()
        print(md.read_text().split("\n## Settings")[0])
    if results["interrupted"]:
        return 130
    if failed := [r for r in results["runs"] if "errors" in r["verdict"]["flags"]]:
        for r in failed:
            print(
                f"lab run: {r['case']} {r['scenario']} {r['load']['label']} #{r['repeat']}: "
                f"{r['locust']['failures']} of {r['locust']['requests']} requests failed "
                f"(more than {verdict.ERROR_RATIO_LIMIT:.0%})",
                file=sys.stderr,
            )
        return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from . import report

    try:
        md, page = report.write_report(args.dir)
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"lab: {e}", file=sys.stderr)
        return 2
    print(f"lab report: {md} and {page}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = main_parser().parse_args(argv)
    if args.command == "up":
        return cmd_up(args)
    if args.command == "verify":
        from .verify import cmd_verify

        return cmd_verify(args)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "report":
        return cmd_report(args)
    if args.command == "bench":
        from .bench import cmd_bench

        return cmd_bench(args)
    if args.command == "bench-locust":
        from .bench_locust import cmd_bench_locust

        return cmd_bench_locust(args)
    if args.command == "study":
        from .studies import cmd_study

        return cmd_study(args, argv)
    return 2


if __name__ == "__main__":
    sys.exit(main())
