#!/usr/bin/env python3
"""Where a proxy JVM's CPU goes, by user and system time and by thread name, under wrk at capacity.

    tools/cpu-by-thread.py RUN_DIR [ENGINES] [ROUNDS] > OUT.json

RUN_DIR: a `lab bench` run folder (its nginx.conf serves the upstream on 127.0.0.1:18080). Per
round and engine (A B A B): the lab's proxy jar on 127.0.0.1:18090 (singleton, CLIENT_ENGINE set),
40 s of wrk -c64 unmeasured, then 10 s measured; /proc's utime and stime of every thread before and
after, summed by thread name (digits folded), and the context switches, each per request. A
diagnosis beside `lab bench --profile` (JFR samples Java code only): one line of JSON a window on
stderr, all of them on stdout at the end. Every process is started here and ended by its PID."""

import collections
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAR = f"{REPO}/proxy-app/target/proxy-app.jar"
NGINX_CONF = ""  # the run folder's, from the first argument
TICK = os.sysconf("SC_CLK_TCK")
URL = "http://127.0.0.1:18090/files/tiny.txt"


def proc_times(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                s = f.read()
        except FileNotFoundError:
            continue
        name = s[s.index("(") + 1 : s.rindex(")")]
        fields = s[s.rindex(")") + 2 :].split()
        out[tid] = (name, int(fields[11]), int(fields[12]))  # utime, stime
    return out


def group(name):
    name = re.sub(r"\d+", "N", name)
    return name


def switches(pid):
    v = n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            txt = open(f"/proc/{pid}/task/{tid}/status").read()
        except FileNotFoundError:
            continue
        v += int(re.search(r"voluntary_ctxt_switches:\s+(\d+)", txt).group(1))
        n += int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", txt).group(1))
    return v, n


def wrk(seconds):
    r = subprocess.run(
        ["wrk", "-t1", "-c64", f"-d{seconds}s", URL], capture_output=True, text=True, timeout=seconds + 30
    )
    m = re.search(r"(\d+) requests in", r.stdout)
    return int(m.group(1))


def measure(pid, seconds=10):
    before, sw0 = proc_times(pid), switches(pid)
    reqs = wrk(seconds)
    after, sw1 = proc_times(pid), switches(pid)
    by = collections.Counter()
    user = sys_ = 0
    for tid, (name, u, s) in after.items():
        u0, s0 = before.get(tid, (name, 0, 0))[1:]
        du, ds = u - u0, s - s0
        user += du
        sys_ += ds
        by[group(name)] += du + ds
    ms = 1000 / TICK
    return {
        "requests": reqs,
        "rps": reqs / seconds,
        "user_ms_per_req": user * ms / reqs,
        "sys_ms_per_req": sys_ * ms / reqs,
        "switches_per_req": (sw1[0] - sw0[0] + sw1[1] - sw0[1]) / reqs,
        "threads_ms_per_req": {k: v * ms / reqs for k, v in by.most_common(8)},
    }


def main():
    global NGINX_CONF
    if len(sys.argv) < 2 or not os.path.exists(os.path.join(sys.argv[1], "nginx.conf")):
        sys.exit("cpu-by-thread: give a lab bench run folder (with its nginx.conf) as the first argument")
    NGINX_CONF = os.path.join(sys.argv[1], "nginx.conf")
    engines = sys.argv[2].split(",") if len(sys.argv) > 2 else ["okhttp", "java"]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    nginx = subprocess.Popen(
        ["nginx", "-c", NGINX_CONF, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    procs = {}
    out = {e: [] for e in engines}
    try:
        time.sleep(1)
        for rnd in range(rounds):
            for e in engines:
                env = dict(
                    os.environ,
                    PORT="18090",
                    HOST="127.0.0.1",
                    UPSTREAM_URL="http://127.0.0.1:18080",
                    CLIENT_ENGINE=e,
                    CLIENT_LIFETIME="singleton",
                    JAVA_OPTS="-Xmx512m",
                )
                p = subprocess.Popen(
                    ["java", "-Xmx512m", "-jar", JAR],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                procs[e] = p
                for _ in range(60):  # up within 30 s
                    if subprocess.run(["curl", "-s", "-o", "/dev/null", URL]).returncode == 0:
                        break
                    time.sleep(0.5)
                wrk(40)  # warm-up
                m = measure(p.pid)
                m.update(engine=e, round=rnd + 1)
                out[e].append(m)
                print(json.dumps(m), file=sys.stderr, flush=True)
                p.terminate()
                p.wait(timeout=20)
                procs.pop(e)
    finally:
        for p in procs.values():
            p.kill()
        nginx.terminate()
        nginx.wait(timeout=20)
    json.dump(out, sys.stdout, indent=1)


main()
