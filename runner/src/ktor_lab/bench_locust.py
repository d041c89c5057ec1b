"""`lab bench-locust`: the most requests a second the lab's Locust makes here, against nginx directly.

One process, then a master with N workers, each with users that never wait (closed model,
wait 0), so the rate is the generator's ceiling. Prints rps and each process's peak CPU
(from the lab's own export), and writes bench-locust.json to the run folder.
"""

from __future__ import annotations

import csv
import json
import time
from argparse import Namespace

import requests

from . import loadgen, nginx, stack
from .processes import Service, free_port


def _run(name: str, d, host: str, users: int, seconds: int, workers: int) -> dict:
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    common = [
        "-H",
        host,
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
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
    ]
    csv_prefix = d / name.replace(" ", "-").replace("+", "and")
    common += ["--csv", str(csv_prefix)]
    services = []
    try:
        if workers:
            mport = free_port()
            services.append(
                Service(
                    f"{name}-master",
                    loadgen.argv(
                        "--master",
                        "--master-bind-host",
                        "127.0.0.1",
                        "--master-bind-port",
                        str(mport),
                        "--expect-workers",
                        str(workers),
                        *common,
                    ),
                    d / f"{name}-master.log",
                )
            )
            for i in range(workers):
                services.append(
                    Service(
                        f"{name}-worker-{i}",
                        loadgen.argv("--worker", "--master-host", "127.0.0.1", "--master-port", str(mport)),
                        d / f"{name}-worker-{i}.log",
                    )
                )
        else:
            services.append(Service(name, loadgen.argv(*common), d / f"{name}.log"))
        deadline = time.monotonic() + seconds + 60
        while not loadgen.run_finished(web) and time.monotonic() < deadline:
            time.sleep(0.5)
        stats = requests.get(f"{web}/stats/requests", timeout=5).json()
        metrics = requests.get(f"{web}/metrics", timeout=5).text
    finally:
        for s in services:
            s.stop()
    total = next(e for e in stats["stats"] if e["name"] == "Aggregated")
    peaks = {}
    for line in metrics.splitlines():
        if line.startswith("locust_cpu_peak_percent{"):
            peaks[line.split('node="')[1].split('"')[0]] = float(line.split()[-1])
    # Locust's own rate over the time between its first and last request, not over the
    # nominal duration, which also holds spawning and the workers' last stats report.
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


def cmd_bench_locust(args: Namespace) -> int:
    from .cli import preflight, run_dir

    if stack.cannot_start([p for p in preflight() if "proxy-app" not in p]):
        return 2
    ports = stack.Ports(nginx=args.nginx_port, nginx_status=args.nginx_status_port)
    if stack.cannot_start(stack.busy_ports(ports, ("nginx", "nginx_status"))):
        return 2
    d = run_dir(args, "bench-locust")
    ports = nginx.NginxPorts(args.nginx_port, args.nginx_status_port)
    ng = nginx.start(d, ports)
    host = f"http://127.0.0.1:{ports.http}"
    print(
        f"lab bench-locust: static-small against nginx directly, "
        f"users={args.users}, wait 0, {args.duration} s"
    )
    try:
        results = [
            _run("one process", d, host, args.users, args.duration, 0),
            _run(f"master + {args.workers} workers", d, host, args.users, args.duration, args.workers),
        ]
    finally:
        ng.stop()
    (d / "bench-locust.json").write_text(json.dumps(results, indent=2))
    print(f"lab bench-locust: written {d / 'bench-locust.json'}")
    return 0
