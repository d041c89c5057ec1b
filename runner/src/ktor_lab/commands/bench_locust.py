"""`lab bench-locust`: the most requests a second the lab's Locust makes here, against nginx directly.

One process, then a master with N workers, each with users that never wait (closed model,
wait 0), so the rate is the generator's ceiling. Prints rps and each process's peak CPU
(from the lab's own export), and writes bench-locust.json to the run folder: its settings (the
commit, the machine, the versions, when) beside each setup's figures.
"""

from __future__ import annotations

import argparse
import csv
import json
from datetime import UTC, datetime

import requests

from .. import machine, metrics, stack
from ..backends import NativeBackend
from ..parts import loadgen
from ..processes import wait_until
from ..rundirs import run_dir
from . import options


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench-locust", help="the most rps the lab's Locust makes against nginx: 1 process, then workers"
    )
    options.add_ports(p, "nginx", "nginx_status", "locust")  # no proxy here: Locust aims at nginx
    options.add_run_dir(p)
    p.add_argument("--users", type=int, default=100, help="users, never waiting (default: %(default)s)")
    p.add_argument(
        "--workers", type=int, default=2, help="workers in the distributed run (default: %(default)s)"
    )
    p.add_argument("--duration", type=int, default=15, help="seconds per run (default: %(default)s)")


def one(lab: NativeBackend, name: str, users: int, seconds: int, workers: int) -> dict:
    csv_prefix = lab.run_dir / name.replace(" ", "-").replace("+", "and")
    lab.start_locust(
        host=lab.upstream_url,
        workers=workers,
        name=name.replace(" ", "-"),
        options=[
            "-u",
            str(users),
            "-r",
            str(users),
            "-t",
            f"{seconds}s",
            "--wait-min",
            "0",
            "--wait-max",
            "0",
            "--autostart",
            "--autoquit",
            "30",
            "--csv",
            str(csv_prefix),
        ],  # fmt: skip
    )
    try:
        wait_until(lambda: loadgen.run_finished(lab.locust_url), timeout=seconds + 60, interval=0.5)
        stats = requests.get(f"{lab.locust_url}/stats/requests", timeout=5).json()
        peaks = metrics.scrape(lab.locust_url, timeout=5).by_label("locust_cpu_peak_percent", "node")
    finally:
        lab.stop_locust()
    total = next(e for e in stats["stats"] if e["name"] == "Aggregated")
    # Locust's rate from its first to its last request, not over the nominal duration (spawning too).
    with open(f"{csv_prefix}_stats.csv", newline="") as f:
        aggregated = next(row for row in csv.DictReader(f) if row["Name"] == "Aggregated")
    r = {
        "setup": name,
        "users": users,
        "workers": workers,
        "seconds": seconds,
        "requests": total["num_requests"],
        "failures": total["num_failures"],
        "rps": float(aggregated["Requests/s"]),
        "cpu_peak_percent": peaks,
    }
    print(
        f"  {name:<22} {r['rps']:>8.0f} rps  failures {r['failures']}  peak CPU "
        + ", ".join(f"{k} {v:.0f}%" for k, v in sorted(peaks.items())),
        flush=True,
    )
    return r


def run(args: argparse.Namespace) -> int:
    if args.dry_run:
        print(f"lab bench-locust: dry run; would load nginx directly with {args.users} users")
        return 0
    stack.require([p for p in stack.missing(prometheus_too=False) if "proxy-app" not in p])
    ports = options.ports(args)
    stack.require(stack.busy_ports(ports, ("nginx", "nginx_status", "locust")))
    d = run_dir("bench-locust", args.run_dir)
    print(
        f"lab bench-locust: static-small against nginx directly, users={args.users}, wait 0, "
        f"{args.duration} s"
    )
    options.handle_signals()
    settings = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "scenario": "static-small",
        "target": "nginx directly",
        "users": args.users,
        "wait_s": 0,
        "duration_s": args.duration,
        **machine.environment(),
    }
    lab = NativeBackend(ports=ports)
    try:
        lab.open_upstream(d, "")
        results = [
            one(lab, "one process", args.users, args.duration, 0),
            one(lab, f"master + {args.workers} workers", args.users, args.duration, args.workers),
        ]
    finally:
        lab.close()
    (d / "bench-locust.json").write_text(json.dumps({"settings": settings, "results": results}, indent=2))
    print(f"lab bench-locust: written {d / 'bench-locust.json'}")
    return 0
