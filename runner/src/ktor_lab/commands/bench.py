"""`lab bench`: the proxy's overhead, measured with wrk against references from the same run.

Targets, each on its own: nginx serving the file directly, nginx `proxy_pass` to that nginx (the
reference a proxy is judged by), then the Ktor proxy for each case, started fresh, and after each
engine's first case that engine's references: the minimal Ktor proxy (bench/lean-proxy/) with a
client written without any of the lab's code (bench/plain-client/), in three forms:

- `plain ENGINE`: the engine's defaults (`HttpClient(Engine) { expectSuccess = false }`), bodies
  read whole (`client.get`, `respondBytes`): the plainest proxy a user writes;
- `plain-limits ENGINE`: the same with only the lab's connection limit: the reference the lab's
  overhead is judged against (`CPU x plain-limits`; the goal is 1.15x);
- `plain-limits streamed ENGINE`: that client, bodies copied as they arrive (`execute { }`,
  `respondBytesWriter`), as a proxy must for a large body: what streaming costs on its own.

`--ladder` climbs instead, per engine of the cases, from `plain-limits` to the lab's proxy one
piece at a time (LADDER: streaming, the lab's client, its metrics, its connection guards, its
forwarding), each rung's CPU per request and rate against the first rung's in the same round.

Every JVM is started once and warmed up until its rate is stable and its JIT quiet (warmup.py);
the JVMs of one engine (its cases and references, or its rungs) then stay up, and each round
measures every one of them in turn over a fixed window with fixed connections (A B C A B C), after
a few seconds of unmeasured load for one that idled. `--fresh` starts and warms a fresh JVM for
every window instead. For a JVM, its CPU time and its threads' voluntary context switches
(handoffs between threads) per request over the window too. Figures and every setting go to
bench.json in the run folder.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .. import confidence, render, stack, versions
from ..backends import NativeBackend, ProxyHandle
from ..cases import CASES, Case, all_of, case_list
from ..errors import LabError
from ..machine import (
    cpu_sample,
    cpus,
    environment,
    java,
    process_context_switches,
    process_cpu_seconds,
    version,
)
from ..measure import machine_figures
from ..network import Network
from ..parts import jfr, wrk
from ..rundirs import run_dir
from ..warmup import JitClock, Warmup, warm_up
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
        help="rounds over every target, interleaved (A B A B); the table gives medians, and each case's "
        "CPU and rate against its references as the medians of the rounds' ratios (default: %(default)s)",
    )
    add_what(p)


def add_what(p: argparse.ArgumentParser) -> None:
    """What the bench measures beside the cases: a profile, another release, the ladder, fresh JVMs."""
    p.add_argument(
        "--profile",
        action="store_true",
        help="record each JVM's measured window with Java Flight Recorder and say where its CPU went "
        "(by whose code, and the top frames); it starts before the warm-up, which waits out what its start "
        "costs, and still costs a little CPU, so figures with it are not the ones to compare",
    )
    p.add_argument(
        "--ktor",
        default="",
        help="the Ktor release of every target (the lab's proxy and its references, built on first use); "
        "an engine it does not publish is skipped (default: each case's own: the pom's, 3.5.2, and the "
        "apache engine on its last release, 3.4.1)",
    )
    p.add_argument(
        "--ladder",
        action="store_true",
        help="per engine of --cases, from the plain proxy with the lab's limits up to the lab's proxy, "
        "one piece at a time, instead of the cases and their references",
    )
    p.add_argument(
        "--rungs",
        default=",".join(DEFAULT_RUNGS),
        help="with --ladder, comma-separated rungs, of: "
        + ", ".join(RUNGS)
        + " (default: all but "
        + ", ".join(SPLIT_RUNGS)
        + ", which split lab-client into its parts)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="a fresh JVM, warmed again, for every window (default: each JVM warmed once, its windows "
        "interleaved with the others' of its engine)",
    )
    p.add_argument(
        "--report",
        metavar="DIR",
        default="",
        help="measure nothing: write the summary and bench.md of the run in DIR again from its bench.json's "
        "rounds",
    )
    p.add_argument(
        "--settle",
        type=int,
        default=3,
        help="seconds of unmeasured load before each window of a JVM that idled (default: %(default)s)",
    )


@dataclass
class Target:
    """A target of the bench: what it is called, its URL and, for a JVM, its process."""

    name: str
    url: str
    pid: int | None = None
    proxy: ProxyHandle | None = None
    warm: Warmup | None = None
    recording: jfr.Recording | None = None


def warm(target: Target, args: argparse.Namespace) -> None:
    """The target's warm-up (warmup.py's rule); a JFR recording starts before it with --profile."""
    if target.pid and args.profile:
        # Before the warm-up: JFR's start costs compiled code, and the warm-up waits that out.
        target.recording = jfr.Recording(target.pid, args.profile_dir / f"{_file_name(target.name)}.jfr")
        target.recording.start()
    target.warm = warm_up(
        lambda s: wrk.run(target.url, args.connections, args.threads, s)["rps"], args.warmup, target.pid
    )


def window(target: Target, args: argparse.Namespace, settle: int = 0) -> dict:
    """One measured window of the warm target (after `settle` s of unmeasured load)."""
    if settle:
        wrk.run(target.url, args.connections, args.threads, settle)
    jvm_pid = target.pid
    jit = JitClock(jvm_pid) if jvm_pid else None
    cpu_before = process_cpu_seconds(jvm_pid) if jvm_pid else 0.0
    switches_before = process_context_switches(jvm_pid) if jvm_pid else 0
    began = jfr.now()
    machine_before, wall = cpu_sample(), time.monotonic()
    r = wrk.run(target.url, args.connections, args.threads, args.duration)
    busy = machine_figures(machine_before, cpu_sample(), time.monotonic() - wall)
    recording, target.recording = target.recording, None  # the first window's profile
    if recording:
        recording.stop(began, jfr.now())
    r.update(
        target=target.name,
        pid=jvm_pid,
        warmup_s=target.warm.seconds,
        warmup_settled=target.warm.settled,
        settle_s=settle,
        # Others' CPU in the window (not the lab's processes) and the hypervisor's steal, as shares of
        # the machine: what a busy machine took from the figures.
        others_share=busy.others_share,
        steal_share=busy.steal_share,
        cpu_ms_per_request=None,
        switches_per_request=None,
    )
    if jvm_pid:
        r["jit_cpu_s_in_window"] = round(jit.lap(), 2)
        if r["requests"]:
            r["cpu_ms_per_request"] = (process_cpu_seconds(jvm_pid) - cpu_before) * 1000 / r["requests"]
            switches = process_context_switches(jvm_pid) - switches_before
            r["switches_per_request"] = switches / r["requests"]
    if recording:
        r["profile"] = recording.read().to_json()
    note = "" if target.warm.settled else "  (not warm at the end of the warm-up)"
    cpu = f"  CPU {r['cpu_ms_per_request']:.3f} ms/req" if r["cpu_ms_per_request"] is not None else ""
    if r["switches_per_request"] is not None:
        cpu += f"  {r['switches_per_request']:.1f} switches/req"
    print(
        f"  {target.name:<22} {r['rps']:>9.0f} rps  p50 {r['p50_us'] / 1000:7.2f} ms  "
        f"p99 {r['p99_us'] / 1000:7.2f} ms  errors {r['errors']}{cpu}  "
        f"warm-up {target.warm.seconds:.0f} s{note}",
        flush=True,
    )
    return r


def _file_name(target: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in target).strip("-")


def profiles(rounds: list[dict]) -> str:
    """Per profiled target, where its CPU went in the window: by owner of the code, and top frames."""
    lines = []
    for r in rounds:
        if not (p := r.get("profile")):
            continue
        owners = ", ".join(f"{k} {v:.0%}" for k, v in p["owners"].items())
        lines += [
            f"### {r['target']} (round {r['round']}, {p['samples']} samples)",
            "",
            f"By whose code: {owners}.",
            "",
        ]
        lines += ["| top frame | share |", "|---|---:|"]
        lines += [f"| `{name}` | {share:.1%} |" for name, share in p["top_frames"]]
        lines.append("")
    return "\n".join(lines)


def bench_cases(args: argparse.Namespace) -> list[Case]:
    """The cases, each on its release: --ktor's for all (an engine it lacks skipped, and named),
    else each case's own (an engine the default release lacks on its last). Every case's
    references are built on the same release; the JDK is the default one for all of them (a case
    on another JDK would be set beside references that are not)."""
    try:
        cases = case_list(args.cases)
        if named := [c for c in cases if c.java or (c.ktor and args.ktor)]:
            raise ValueError(
                f"--cases: {named[0].name!r} names its JDK, or its release beside --ktor: lab bench runs "
                "every target on the default JDK and one release per case (lab run --ktor/--java compares "
                "those)"
            )
        if args.ktor:
            cases = [c.with_dimensions(ktor=versions.release(args.ktor).name) for c in cases]
    except ValueError as e:
        raise LabError(str(e)) from None
    for case in [c for c in cases if c.refusal()]:
        print(f"lab bench: skips {case.name}: {case.refusal().split('; ')[0]}", flush=True)
    if not (kept := [c for c in cases if not c.refusal()]):
        raise LabError(f"lab bench: no case can run on Ktor {args.ktor}")
    return kept


def run(args: argparse.Namespace) -> int:
    if args.report:
        return report(args.report, dry=args.dry_run)
    if args.repeats < 1:
        raise LabError(f"--repeats {args.repeats}: give 1 or more rounds")
    if args.settle < 0:
        raise LabError(f"--settle {args.settle}: give 0 or more seconds")
    cases = bench_cases(args)
    if args.rungs != ",".join(DEFAULT_RUNGS) and not args.ladder:
        raise LabError("--rungs picks rungs of the ladder: add --ladder")
    rungs = ladder_rungs(args.rungs)
    plan = groups(cases, args.ladder, rungs)
    if args.dry_run:
        print(f"lab bench: dry run; {plan_text(plan, args)}")
        return 0
    if problem := wrk.missing():
        raise LabError(problem)
    stack.require(stack.missing(prometheus_too=False))
    ports = options.ports(args)
    stack.require(stack.busy_ports(ports, ("nginx", "nginx_status", "nginx_tls", "proxy")))
    # Every jar before any JVM starts: building lean-proxy (-am) packages proxy-app again, and a
    # JVM already running from that jar would lose its classes under it.
    singletons = [c.with_dimensions(lifetime="singleton") for c in cases]
    releases = {r.name: r for r in map(versions.release_of, singletons)}
    versions.ensure_jars(list(releases.values()), ("proxy-app", "lean-proxy"))
    d = run_dir("bench", args.run_dir)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    args.profile_dir = d
    settings = settings_of(args)
    print("lab bench: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    print(f"lab bench: {plan_text(plan, args)}", flush=True)
    rounds: list[dict] = []
    options.handle_signals()
    lab = NativeBackend(ports=ports)
    try:
        lab.open_upstream(d, args.java_opts)
        rounds.extend(measure_nginx(lab, args))
        for group in plan:
            rounds.extend(measure_group(lab, group, args))
    finally:
        lab.close()
    settings.update(
        cases=[c.name for c in cases],
        ladder=args.ladder,
        ktor={c.engine: versions.release_of(c).name for c in singletons},
        started=started,
        finished=datetime.now(UTC).isoformat(timespec="seconds"),
        environment=environment(),
    )
    write(d, settings, rounds)
    return 0


def settings_of(args: argparse.Namespace) -> dict:
    """What a bench run is made with, as bench.json records it (the machine's figures are added at
    its end)."""
    return {
        "path": args.path,
        "connections": args.connections,
        "wrk_threads": args.threads,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "repeats": args.repeats,
        "jvms": "a fresh JVM per window"
        if args.fresh
        else "each warmed once, windows interleaved per engine",
        "settle_s": 0 if args.fresh else args.settle,
        "java_opts": args.java_opts,
        "client_max_connections": "1000 (proxy default)",
        "cpus": cpus(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "nginx": version(["nginx", "-v"]),
        "wrk": version(["wrk", "-v"]),
        "java": version([java(), "-version"]),
    }


def write(d: Path, settings: dict, rounds: list[dict]) -> None:
    """bench.json (every setting and round, and their summary) and bench.md (the table) in `d`."""
    results, text = summary(settings, rounds)
    print("\n" + text)
    (d / "bench.json").write_text(
        json.dumps({"settings": settings, "results": results, "rounds": rounds}, indent=2)
    )
    (d / "bench.md").write_text(text + "\n")
    print(f"\nlab bench: written {d / 'bench.json'} and bench.md")


def summary(settings: dict, rounds: list[dict]) -> tuple[list[dict], str]:
    """A run's rows (`summarize`) and the text of its bench.md."""
    cases = [Case.parse(name) for name in settings["cases"]]
    results = summarize(rounds, cases, settings["ladder"])
    text = (
        explanation(settings) + busy_machine(rounds) + "\n\n" + table(results, settings["ladder"]).markdown()
    )
    if any(r.get("profile") for r in rounds):
        text += "\n\n## Profiles of the measured windows (JFR)\n\n" + profiles(rounds)
    return results, text


def explanation(settings: dict) -> str:
    """What the table's ratios are, above it."""
    rounds = settings["repeats"]
    below = (
        ", and each rung against the rung below it that it builds on (`+ lab client` for the rungs after "
        "HttpTimeout's), in CPU and in switches per request, each figure's comparisons adjusted together per "
        "engine (Benjamini-Hochberg)"
        if settings["ladder"]
        else ""
    )
    return (
        f"Ratios are taken within each round and summed up by their geometric mean, with its 95% interval "
        f"over the {rounds} round(s){below}. The rounds measure the same JVMs again (each warmed once), so "
        f"an interval is of these JVMs; another run's may differ by more. Goal: the lab's proxy within "
        f"{GOAL}x of plain-limits in CPU per request."
    )


def busy_machine(rounds: list[dict]) -> str:
    """What else ran on the machine in the windows: the most that processes other than the lab's
    and the hypervisor's steal took of it in a window (runs before this was recorded: nothing)."""
    others = [r["others_share"] for r in rounds if r.get("others_share") is not None]
    steal = [r["steal_share"] for r in rounds if r.get("steal_share") is not None]
    if not others:
        return ""
    return (
        f" In a window, other processes took at most {max(others):.1%} of the machine and the hypervisor's "
        f"steal {max(steal):.1%}."
    )


def report(folder: str, dry: bool = False) -> int:
    """`lab bench --report DIR`: bench.json's summary and bench.md written again from its rounds
    (with `dry`, only read and checked)."""
    d = Path(folder)
    try:
        kept = json.loads((d / "bench.json").read_text())
        settings, rounds = kept["settings"], kept["rounds"]
        settings["ladder"], settings["cases"]  # what summary() reads besides the rounds
    except (OSError, ValueError, KeyError) as e:
        raise LabError(f"--report {folder}: give a folder with a lab bench run's bench.json ({e})") from None
    if dry:
        summary(settings, rounds)
        print(
            f"lab bench: dry run; would write {d / 'bench.json'}'s summary and bench.md again from its rounds"
        )
        return 0
    write(d, settings, rounds)
    return 0


# A JVM the bench starts: its name in the tables, its case, and its variables (None: the case's own
# proxy; LAB_PROXY: the lab's proxy as a singleton of the case's engine; else lean-proxy's).
Spec = tuple[str, Case, "dict[str, str] | None"]


def ladder_rungs(text: str) -> list[tuple[str, dict[str, str]]]:
    """The rungs --rungs names, in the ladder's order; LabError naming the known ones otherwise."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if unknown := [n for n in names if n not in RUNGS]:
        raise LabError(f"--rungs: {unknown[0]!r} is not a rung; give some of {', '.join(RUNGS)}")
    if not names:
        raise LabError(f"--rungs: name at least one of {', '.join(RUNGS)}")
    return [RUNGS[n] for n in RUNGS if n in names]


def groups(cases: list[Case], ladder: bool, rungs: list[tuple[str, dict[str, str]]]) -> list[list[Spec]]:
    """The JVMs per engine, in the order they are measured: with --ladder its rungs; else its cases,
    then its references."""
    if ladder:
        firsts = {c.engine: c for c in reversed(cases)}
        return [
            [(rung_target(c.engine, rung), c, env) for rung, env in rungs]
            for c in sorted(firsts.values(), key=cases.index)
        ]
    by_engine: dict[str, list[Spec]] = {}
    for case in cases:
        by_engine.setdefault(case.engine, []).append((case.name, case, None))
    for engine, specs in by_engine.items():
        specs.extend((rung_target(engine, ref), specs[0][1], env) for ref, env in REFERENCES)
    return list(by_engine.values())


# A JVM's warm-up as the rule ends it on 2 cores: 25-70 s in the runs kept in docs/bench-runs/, about
# 45 s on average; with it the estimate read 20, 30 and 41 min for runs of 18.5, 26.5 and about 40.
WARMUP_S = 50


def plan_text(plan: list[list[Spec]], args: argparse.Namespace) -> str:
    """What the bench will measure and about how long it takes (WARMUP_S a JVM, at most --warmup)."""
    jvms = sum(len(g) for g in plan)
    window = args.duration + (0 if args.fresh else args.settle) + 1
    warmups = jvms * args.repeats if args.fresh else jvms
    seconds = 2 * 15 + warmups * min(args.warmup, WARMUP_S) + args.repeats * (jvms + 2) * window
    how = (
        f"a fresh JVM warmed for each of its {args.repeats} window(s)"
        if args.fresh
        else f"each JVM warmed once, then {args.repeats} round(s) of its engine's windows"
    )
    names = "; ".join(", ".join(name for name, _, _ in g) for g in plan)
    return (
        f"would measure nginx, nginx proxy_pass and {jvms} JVMs ({names}): {how}; about {seconds // 60} min"
    )


def start(lab: NativeBackend, spec: Spec) -> Target:
    """The JVM of `spec`, up beside the others (each on a free port)."""
    name, case, env = spec
    if env is None:
        proxy = lab.start_case(case, {}, Network(case.rtt_ms), keep=True)
    elif env is LAB_PROXY:
        proxy = lab.start_case(
            case.with_dimensions(lifetime="singleton"), {}, Network(case.rtt_ms), keep=True
        )
    else:
        singleton = case.with_dimensions(lifetime="singleton")
        jar = versions.ensure_jar("lean-proxy", versions.release_of(singleton))
        proxy = lab.start_reference(singleton, jar, env)
    return Target(name, proxy.url, proxy.pid, proxy)


def measure_nginx(lab: NativeBackend, args: argparse.Namespace) -> list[dict]:
    """nginx direct and nginx proxy_pass, each warmed, then a window of each per round."""
    reference, url = lab.proxy_pass()
    targets = [
        Target("nginx direct", lab.upstream_url + args.path),
        Target("nginx proxy_pass", url + args.path),
    ]
    for t in targets:
        warm(t, args)
    out = [dict(window(t, args), round=n) for n in range(1, args.repeats + 1) for t in targets]
    lab.stop_reference(reference)
    return out


def measure_group(lab: NativeBackend, group: list[Spec], args: argparse.Namespace) -> list[dict]:
    """One engine's JVMs: each warmed once and measured once per round, in turn (A B C A B C); with
    --fresh, a fresh JVM warmed for every window."""
    out = []
    if args.fresh:
        for n in range(1, args.repeats + 1):
            for spec in group:
                t = start(lab, spec)
                t.url += args.path
                try:
                    warm(t, args)
                    out.append(dict(window(t, args), round=n))
                finally:
                    lab.stop_case(t.proxy)
                time.sleep(1)
        return out
    up: list[Target] = []
    try:
        for spec in group:
            t = start(lab, spec)
            t.url += args.path
            up.append(t)
            warm(t, args)
            print(f"  warm: {t.name} after {t.warm.seconds:.0f} s", flush=True)
        for n in range(1, args.repeats + 1):
            if args.repeats > 1:
                print(f"round {n} of {args.repeats}", flush=True)
            out.extend(dict(window(t, args, settle=args.settle), round=n) for t in up)
    finally:
        for t in up:
            lab.stop_case(t.proxy)
    return out


# The references per engine (lean-proxy's variables): a plain client (bench/plain-client/, no code
# of the lab's) with the engine's defaults, with only the lab's connection limit, and that one streaming.
REFERENCES = (
    ("plain", {"LEAN_CLIENT": "plain"}),
    ("plain-limits", {"LEAN_CLIENT": "plain-limits"}),
    ("plain-limits streamed", {"LEAN_CLIENT": "plain-limits", "LEAN_BODY": "streamed"}),
)
# What the lab's overhead is judged against (the first is the goal's: 1.15x in CPU per request).
BASES = ("plain-limits", "plain", "plain-limits streamed")
LAB_PROXY: dict[str, str] = {}
# From the plain proxy (the engine's defaults, then the lab's limits) to the lab's proxy, one
# piece at a time; judged against plain-limits.
RUNGS = {
    "plain": ("plain", {"LEAN_CLIENT": "plain"}),
    "plain-limits": ("plain-limits", {"LEAN_CLIENT": "plain-limits"}),
    "streaming": ("+ streaming", {"LEAN_CLIENT": "plain-limits", "LEAN_BODY": "streamed"}),
    # `+ lab client` split into its parts (ClientPart in proxy-app's EngineSetup.kt), one more a rung:
    # not in the default ladder; `--rungs` names them.
    **{
        f"client-{parts[-1]}": (
            "+ lab client: " + ", ".join(parts),
            {"LEAN_CLIENT": "lab", "LEAN_BODY": "streamed", "LEAN_PARTS": ",".join(parts)},
        )
        for parts in (("limits",), ("limits", "flags"), ("limits", "flags", "engine"))
    },
    "lab-client": ("+ lab client", {"LEAN_CLIENT": "lab", "LEAN_BODY": "streamed"}),
    "httptimeout": (
        "+ lab client, timeouts by HttpTimeout",
        {"LEAN_CLIENT": "lab", "LEAN_BODY": "streamed", "LEAN_PARTS": "limits,flags,engine,timeouts-plugin"},
    ),
    "metrics": ("+ metrics", {"LEAN_CLIENT": "lab", "LEAN_BODY": "streamed", "LEAN_SERVER": "metrics"}),
    "guards": ("+ guards", {"LEAN_CLIENT": "lab", "LEAN_BODY": "streamed", "LEAN_SERVER": "metrics,guards"}),
    "forwarder": ("+ forwarder", {"LEAN_CLIENT": "lab", "LEAN_SERVER": "metrics,guards,forwarder"}),
    "lab-proxy": ("lab proxy", LAB_PROXY),
}
SPLIT_RUNGS = ("client-limits", "client-flags", "client-engine")
# A rung off the ladder's line: the next rung builds on the one below it, not on it.
SIDE_RUNGS = (RUNGS["httptimeout"][0],)
DEFAULT_RUNGS = tuple(n for n in RUNGS if n not in SPLIT_RUNGS)
LADDER = tuple(RUNGS[n] for n in DEFAULT_RUNGS)  # the default ladder


def rung_target(engine: str, rung: str) -> str:
    """The bench's name for a reference or rung of `engine`: `plain-limits okhttp`, `+ metrics okhttp`."""
    return f"{rung} {engine}"


def summarize(rounds: list[dict], cases: list[Case], ladder: bool = False) -> list[dict]:
    """One row per target in the order measured: medians over the rounds of its own figures, and
    each case's (or rung's) CPU per request and rate against its engine's references as the
    geometric mean of the ratios taken within a round (the two ran minutes apart, not a whole round
    apart), with the 95% interval of that ratio over the rounds (`within_rounds`). The lab's proxy
    gets a verdict against GOAL; with `ladder`, each rung its difference from the rung below it,
    the p values of an engine's ladder adjusted together."""
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
    by_round = {(r["round"], r["target"]): r for r in rounds}
    numbers = sorted({r["round"] for r in rounds})
    engines = {case.name: case.engine for case in cases}

    def ratios(target: str, base: str, figure: str) -> list[float]:
        out = []
        for n in numbers:
            mine, ref = by_round.get((n, target)), by_round.get((n, base))
            if mine and ref and mine.get(figure) and ref.get(figure):
                out.append(mine[figure] / ref[figure])
        return out

    for row in rows:
        row["ratio_to_proxy_pass"] = row["rps"] / reference_rps
        engine = engines.get(row["target"]) or _engine_of_rung(row["target"])
        if engine:
            _against_references(row, engine, ratios)
        lab_proxy = row["target"] in engines or (engine and row["target"] == rung_target(engine, "lab proxy"))
        row["goal"] = goal_verdict(row) if lab_proxy else None
    if ladder:
        _against_the_rung_below(rows, ratios)
    return rows


def _put_ratio(row: dict, key: str, values: list[float]) -> None:
    """`key` (a ratio's name in a row): the geometric mean of `values`, and its 95% interval."""
    row[key] = geometric_mean(values)
    _put_interval(row, key, within_rounds(values))


def _put_interval(row: dict, key: str, c: confidence.Comparison | None) -> None:
    """`key`'s interval as ratios (`key_low`, `key_high`): None without one."""
    row[f"{key}_low"] = None if c is None or c.low is None else 1 + c.low
    row[f"{key}_high"] = None if c is None or c.high is None else 1 + c.high


def _against_references(row: dict, engine: str, ratios) -> None:
    """A row's CPU per request and rate against each reference of its engine (BASES), and its
    switches per request against plain-limits', each ratio taken within a round."""
    for base in BASES:
        key = base.replace("-", "_").replace(" ", "_")
        reference = rung_target(engine, base)
        mine = row["target"] != reference
        cpu = ratios(row["target"], reference, "cpu_ms_per_request") if mine else []
        row[f"cpu_to_{key}_rounds"] = [round(x, 3) for x in cpu]
        _put_ratio(row, f"cpu_to_{key}", cpu)
        row[f"rps_to_{key}"] = geometric_mean(ratios(row["target"], reference, "rps") if mine else [])
        if base == "plain-limits":
            _put_ratio(
                row,
                "switches_to_plain_limits",
                ratios(row["target"], reference, "switches_per_request") if cpu else [],
            )


# The lab's proxy against `plain-limits`, in CPU per request: the goal its overhead is held to.
GOAL = 1.15


def goal_verdict(row: dict) -> str | None:
    """`within 1.15x`, `above 1.15x`, or `at 1.15x` (its interval holds it): the lab's proxy's CPU per
    request against plain-limits' by the 95% interval of its ratio; None without an interval."""
    low, high = row.get("cpu_to_plain_limits_low"), row.get("cpu_to_plain_limits_high")
    if low is None or high is None:
        return None
    if high <= GOAL:
        return f"within {GOAL}x"
    return f"above {GOAL}x" if low > GOAL else f"at {GOAL}x (its interval holds it)"


def within_rounds(ratios: list[float]) -> confidence.Comparison | None:
    """Ratios taken within each round as one difference: their geometric mean, the 95% interval of
    it and a t test against no difference, on their logarithms (scipy's t). The rounds measure the
    same JVMs again, so the interval is of these JVMs, not of every JVM of the engine. None with
    fewer than two rounds."""
    return confidence.paired(ratios)


def _against_the_rung_below(rows: list[dict], ratios) -> None:
    """Each rung against the one it builds on, measured before it on its engine, within each round,
    in CPU per request and in switches per request; a side rung (SIDE_RUNGS) is set against the one
    below it, and the next rung against the one below the side rung. An engine's comparisons of a
    figure are one family (confidence.adjust: Benjamini-Hochberg, intervals to match)."""
    by_engine: dict[str, list[dict]] = {}
    for row in rows:
        if engine := _engine_of_rung(row["target"]):
            by_engine.setdefault(engine, []).append(row)
    for ladder in by_engine.values():
        pairs = []
        base = None
        for row in ladder:
            side = row["target"].removesuffix(" " + _engine_of_rung(row["target"])) in SIDE_RUNGS
            if base is not None:
                row["below"] = base["target"]
                for figure, key in (("cpu_ms_per_request", "cpu"), ("switches_per_request", "switches")):
                    values = ratios(row["target"], base["target"], figure)
                    row[f"{key}_to_below_rounds"] = [round(x, 3) for x in values]
                    row[f"{key}_to_below"] = geometric_mean(values)
                    if (c := within_rounds(values)) is not None:
                        pairs.append((row, key, c))
            if not side:
                base = row
        for key in ("cpu", "switches"):
            mine = [(row, c) for row, k, c in pairs if k == key]
            for (row, _), c in zip(mine, confidence.adjust([c for _, c in mine]), strict=True):
                _put_interval(row, f"{key}_to_below", c)
                row[f"{key}_to_below_p"] = c.p
                row[f"{key}_to_below_family"] = c.family
                row[f"{key}_to_below_words"] = c.words()


def geometric_mean(values: list[float]) -> float | None:
    """The centre of ratios (None when there is none)."""
    known = [v for v in values if v is not None and v > 0]
    return statistics.geometric_mean(known) if known else None


def _engine_of_rung(target: str) -> str | None:
    """The engine a reference or rung is of (`+ metrics okhttp` -> okhttp)."""
    word = target.rsplit(" ", 1)[-1]
    known = {rung for rung, _ in (*REFERENCES, *RUNGS.values())}
    return word if target.removesuffix(" " + word) in known else None


def median(values: list) -> float | None:
    """The median of the known values (a nginx target has no CPU figure); None when none is known."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def interval(row: dict, key: str) -> str | None:
    """`1.08-1.22`: the 95% interval of a ratio, as a table cell."""
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    return None if low is None or high is None else f"{low:.2f}-{high:.2f}"


def table(results: list[dict], ladder: bool = False) -> render.Table:
    columns = [
        (render.Column("target", lambda r: r["target"]), False),
        (render.Column("rps", lambda r: r["rps"]), True),
        (render.Column("p50 ms", lambda r: r["p50_us"] / 1000, 2), True),
        (render.Column("p99 ms", lambda r: r["p99_us"] / 1000, 2), True),
        (render.Column("errors", lambda r: r["errors"]), True),
        (render.Column("x proxy_pass", lambda r: r["ratio_to_proxy_pass"], 3), True),
        (render.Column("CPU ms / req", lambda r: r["cpu_ms_per_request"], 3), True),
        (render.Column("CPU x plain-limits", lambda r: r.get("cpu_to_plain_limits"), 2), True),
        (render.Column("95%", lambda r: interval(r, "cpu_to_plain_limits")), False),
        (
            render.Column(
                "x plain-limits per round",
                lambda r: (
                    " ".join(f"{x:.2f}" for x in r.get("cpu_to_plain_limits_rounds", []))
                    if r["rounds"] > 1
                    else ""
                ),
            ),
            False,
        ),
        (render.Column(f"goal: {GOAL}x", lambda r: r.get("goal")), False),
        (render.Column("switches x plain-limits", lambda r: r.get("switches_to_plain_limits"), 2), True),
        (render.Column("95% ", lambda r: interval(r, "switches_to_plain_limits")), False),
        (render.Column("rps x plain-limits", lambda r: r.get("rps_to_plain_limits"), 2), True),
    ]
    if ladder:
        columns += [
            (render.Column("rung below", lambda r: r.get("below")), False),
            (render.Column("CPU against the rung below", lambda r: r.get("cpu_to_below_words")), False),
            (render.Column("switches against it", lambda r: r.get("switches_to_below_words")), False),
        ]
    else:
        columns += [
            (render.Column("CPU x plain", lambda r: r.get("cpu_to_plain"), 2), True),
            (render.Column("rps x plain", lambda r: r.get("rps_to_plain"), 2), True),
            (render.Column("CPU x streamed", lambda r: r.get("cpu_to_plain_limits_streamed"), 2), True),
        ]
    columns += [
        (render.Column("switches / req", lambda r: r["switches_per_request"], 1), True),
        (
            render.Column(
                "warm-up s",
                lambda r: f"{r['warmup_s']:.0f}" + ("" if r["warmup_settled"] else " (unsettled)"),
            ),
            True,
        ),
    ]
    return render.Table([c for c, _ in columns], results, numeric=[n for _, n in columns])
