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
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import cattrs

from .. import confidence, render, stack, versions
from ..backends import NativeBackend, ProxyHandle
from ..cases import CASES, Case, all_of, case_list
from ..errors import LabError
from ..machine import (
    cpu_sample,
    cpus,
    environment,
    java,
    process_cpu_seconds,
    switches_between,
    thread_context_switches,
    version,
)
from ..measure import machine_figures
from ..network import Network
from ..parts import jfr, wrk
from ..results import CONVERTER
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
        help="rounds over every target, interleaved (A B A B); the table gives geometric means over them, "
        "and each case's CPU and rate against its references as the geometric mean of the rounds' ratios "
        "with its interval (default: %(default)s)",
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


@dataclass
class BenchWindow:
    """One target's measured window in a round, as bench.json keeps it: wrk's figures (latency in
    µs), and for a JVM its CPU, context switches and JIT over the window, and a profile with
    --profile; what a busy machine took of it (others' CPU and the hypervisor's steal, as shares)."""

    target: str = ""
    round: int = 0
    requests: int = 0
    duration_us: int = 0
    bytes: int = 0
    p50_us: float = 0.0
    p99_us: float = 0.0
    max_us: float = 0.0
    connect_errors: int = 0
    read_errors: int = 0
    write_errors: int = 0
    timeouts: int = 0
    non_2xx_3xx: int = 0
    rps: float = 0.0
    errors: int = 0
    pid: int | None = None
    warmup_s: float = 0.0
    warmup_settled: bool = False
    settle_s: int = 0
    others_share: float | None = None
    steal_share: float | None = None
    cpu_ms_per_request: float | None = None
    switches_per_request: float | None = None
    jit_cpu_s_in_window: float | None = None
    profile: dict | None = None


def warm(target: Target, args: argparse.Namespace) -> None:
    """The target's warm-up (warmup.py's rule); a JFR recording starts before it with --profile."""
    if target.pid and args.profile:
        # Before the warm-up: JFR's start costs compiled code, and the warm-up waits that out.
        target.recording = jfr.Recording(target.pid, args.profile_dir / f"{_file_name(target.name)}.jfr")
        target.recording.start()
    target.warm = warm_up(
        lambda s: wrk.run(target.url, args.connections, args.threads, s)["rps"], args.warmup, target.pid
    )


def window(target: Target, args: argparse.Namespace, n: int, settle: int = 0) -> BenchWindow:
    """Round `n`'s measured window of the warm target (after `settle` s of unmeasured load)."""
    if settle:
        wrk.run(target.url, args.connections, args.threads, settle)
    pid = target.pid
    jit = JitClock(pid) if pid else None
    cpu_before = process_cpu_seconds(pid) if pid else 0.0
    switches_before = thread_context_switches(pid) if pid else {}
    began = jfr.now()
    machine_before, wall = cpu_sample(), time.monotonic()
    w = CONVERTER.structure(wrk.run(target.url, args.connections, args.threads, args.duration), BenchWindow)
    busy = machine_figures(machine_before, cpu_sample(), time.monotonic() - wall)
    recording, target.recording = target.recording, None  # the first window's profile
    if recording:
        recording.dump(began, jfr.now())
    warmed = target.warm
    w = replace(
        w, target=target.name, round=n, pid=pid, warmup_s=warmed.seconds, warmup_settled=warmed.settled,
        settle_s=settle, others_share=busy.others_share, steal_share=busy.steal_share,
    )  # fmt: skip
    if pid:
        w.jit_cpu_s_in_window = round(jit.lap(), 2)
        if w.requests:
            w.cpu_ms_per_request = (process_cpu_seconds(pid) - cpu_before) * 1000 / w.requests
            switches = switches_between(switches_before, thread_context_switches(pid))
            w.switches_per_request = switches / w.requests
    if recording:
        w.profile = recording.read().to_json()
    print_window(w)
    return w


def print_window(w: BenchWindow) -> None:
    note = "" if w.warmup_settled else "  (not warm at the end of the warm-up)"
    cpu = f"  CPU {w.cpu_ms_per_request:.3f} ms/req" if w.cpu_ms_per_request is not None else ""
    if w.switches_per_request is not None:
        cpu += f"  {w.switches_per_request:.1f} switches/req"
    print(
        f"  {w.target:<22} {w.rps:>9.0f} rps  p50 {w.p50_us / 1000:7.2f} ms  "
        f"p99 {w.p99_us / 1000:7.2f} ms  errors {w.errors}{cpu}  warm-up {w.warmup_s:.0f} s{note}",
        flush=True,
    )


def _file_name(target: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in target).strip("-")


def profiles(rounds: list[BenchWindow]) -> str:
    """Per profiled target, where its CPU went in the window: by owner of the code, and top frames."""
    lines = []
    for r in rounds:
        if not (p := r.profile):
            continue
        owners = ", ".join(f"{k} {v:.0%}" for k, v in p["owners"].items())
        lines += [
            f"### {r.target} (round {r.round}, {p['samples']} samples)",
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
        return write_again(args.report, dry=args.dry_run)
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
    releases = {r.name: r for r in map(versions.proxy_release_of, singletons)}
    versions.ensure_jars(list(releases.values()), ("proxy-app", "lean-proxy"))
    d = run_dir("bench", args.run_dir)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    args.profile_dir = d
    settings = settings_of(args)
    print("lab bench: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    print(f"lab bench: {plan_text(plan, args)}", flush=True)
    rounds: list[BenchWindow] = []
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
    write_files(d, settings, rounds)
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


def write_files(d: Path, settings: dict, rounds: list[BenchWindow]) -> None:
    """bench.json (every setting and round, and their summary) and bench.md (the table) in `d`."""
    results, text = summary(settings, rounds)
    print("\n" + text)
    kept = {
        "settings": settings,
        "results": CONVERTER.unstructure(results),
        "rounds": CONVERTER.unstructure(rounds),
    }
    (d / "bench.json").write_text(json.dumps(kept, indent=2))
    (d / "bench.md").write_text(text + "\n")
    print(f"\nlab bench: written {d / 'bench.json'} and bench.md")


def summary(settings: dict, rounds: list[BenchWindow]) -> tuple[list[BenchRow], str]:
    """A run's rows (`summarize`) and the text of its bench.md."""
    cases = [Case.parse(name) for name in settings["cases"]]
    results = summarize(rounds, cases, settings["ladder"])
    text = (
        explanation(settings) + busy_machine(rounds) + "\n\n" + table(results, settings["ladder"]).markdown()
    )
    if any(r.profile for r in rounds):
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
        f"A target's figures are their geometric means over the {rounds} round(s). Ratios are taken within "
        f"each round and summed up by their geometric mean, with its 95% interval "
        f"over the rounds{below}. The rounds measure the same JVMs again (each warmed once), so "
        f"an interval is of these JVMs; another run's may differ by more. Goal: the lab's proxy within "
        f"{GOAL}x of plain-limits in CPU per request, and keeping at least {CAPACITY_GOAL}x its rate at "
        f"capacity."
    )


def busy_machine(rounds: list[BenchWindow]) -> str:
    """What else ran on the machine in the windows: the most that processes other than the lab's
    and the hypervisor's steal took of it in a window (runs before this was recorded: nothing)."""
    others = [r.others_share for r in rounds if r.others_share is not None]
    steal = [r.steal_share for r in rounds if r.steal_share is not None]
    if not others:
        return ""
    return (
        f" In a window, other processes took at most {max(others):.1%} of the machine and the hypervisor's "
        f"steal {max(steal):.1%}."
    )


def write_again(folder: str, dry: bool = False) -> int:
    """`lab bench --report DIR`: bench.json's summary and bench.md written again from its rounds
    (with `dry`, only read and checked)."""
    d = Path(folder)
    try:
        kept = json.loads((d / "bench.json").read_text())
        settings, rounds = kept["settings"], CONVERTER.structure(kept["rounds"], list[BenchWindow])
        settings["ladder"], settings["cases"]  # what summary() reads besides the rounds
    except (OSError, ValueError, KeyError, TypeError, cattrs.BaseValidationError) as e:
        raise LabError(f"--report {folder}: give a folder with a lab bench run's bench.json ({e})") from None
    if dry:
        summary(settings, rounds)
        print(
            f"lab bench: dry run; would write {d / 'bench.json'}'s summary and bench.md again from its rounds"
        )
        return 0
    write_files(d, settings, rounds)
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


def start_target(lab: NativeBackend, spec: Spec) -> Target:
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


def measure_nginx(lab: NativeBackend, args: argparse.Namespace) -> list[BenchWindow]:
    """nginx direct and nginx proxy_pass, each warmed, then a window of each per round."""
    reference, url = lab.proxy_pass()
    targets = [
        Target("nginx direct", lab.upstream_url + args.path),
        Target("nginx proxy_pass", url + args.path),
    ]
    for t in targets:
        warm(t, args)
    out = [window(t, args, n) for n in range(1, args.repeats + 1) for t in targets]
    lab.stop_reference(reference)
    return out


def measure_group(lab: NativeBackend, group: list[Spec], args: argparse.Namespace) -> list[BenchWindow]:
    """One engine's JVMs: each warmed once and measured once per round, in turn (A B C A B C); with
    --fresh, a fresh JVM warmed for every window."""
    out = []
    if args.fresh:
        for n in range(1, args.repeats + 1):
            for spec in group:
                t = start_target(lab, spec)
                t.url += args.path
                try:
                    warm(t, args)
                    out.append(window(t, args, n))
                finally:
                    lab.stop_case(t.proxy)
                time.sleep(1)
        return out
    up: list[Target] = []
    try:
        for spec in group:
            t = start_target(lab, spec)
            t.url += args.path
            up.append(t)
            warm(t, args)
            print(f"  warm: {t.name} after {t.warm.seconds:.0f} s", flush=True)
        for n in range(1, args.repeats + 1):
            if args.repeats > 1:
                print(f"round {n} of {args.repeats}", flush=True)
            out.extend(window(t, args, n, settle=args.settle) for t in up)
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


@dataclass
class Ratio:
    """B over A, taken within each round: the ratios, their geometric mean and its 95% interval over
    the rounds (confidence.paired: a t test of their logarithms against 0); where a family of them
    was adjusted together (confidence.adjust), its p, size and words."""

    rounds: list[float] = field(default_factory=list)
    centre: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None
    family: int = 1
    words: str = ""

    @classmethod
    def of(cls, values: list[float], c: confidence.Comparison | None = None) -> Ratio:
        """The ratios `values` as one difference, tested alone unless `c` is their family's test."""
        tested = c or confidence.paired(values)
        out = cls([round(x, 3) for x in values], confidence.geometric_mean(values))
        if tested is not None:
            out.low, out.high, out.p = 1 + tested.low, 1 + tested.high, tested.p
        if c is not None:
            out.family, out.words = c.family, c.words()
        return out

    def span(self) -> str | None:
        """`1.08-1.22`: the interval as a table cell."""
        return None if self.low is None or self.high is None else f"{self.low:.2f}-{self.high:.2f}"


@dataclass
class BenchRow:
    """A target over the rounds: its figures' geometric means (confidence.Estimate's centre, the
    verdict's), and a JVM's against its engine's references (`cpu_to`, `rps_to`, by reference), the
    lab's proxy's against GOAL (CPU per request) and CAPACITY_GOAL (rate), and with --ladder a rung's
    against the rung below it."""

    target: str
    rounds: int
    rps: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    requests: int = 0
    errors: int = 0
    warmup_s: float = 0.0
    warmup_settled: bool = True
    cpu_ms_per_request: float | None = None
    switches_per_request: float | None = None
    ratio_to_proxy_pass: float | None = None
    cpu_to: dict[str, Ratio] = field(default_factory=dict)
    rps_to: dict[str, Ratio] = field(default_factory=dict)
    switches_to_plain_limits: Ratio | None = None
    goal: str | None = None
    capacity: str | None = None
    below: str | None = None
    cpu_to_below: Ratio | None = None
    switches_to_below: Ratio | None = None


def centre(values: list[float | None]) -> float | None:
    """The verdict's centre of a target's rounds (confidence.Estimate: their geometric mean)."""
    return confidence.Estimate.of(values).mean


# Each target's windows by round.
Ratios = dict[str, dict[int, BenchWindow]]


def ratios(by_round: Ratios, target: str, base: str, figure: str) -> list[float]:
    """`target`'s `figure` over `base`'s, round by round (the two ran minutes apart, not a round apart)."""
    refs = by_round.get(base, {})
    out = []
    for n, mine in by_round.get(target, {}).items():
        ref = refs.get(n)
        if ref and getattr(mine, figure) and getattr(ref, figure):
            out.append(getattr(mine, figure) / getattr(ref, figure))
    return out


def summarize(rounds: list[BenchWindow], cases: list[Case], ladder: bool = False) -> list[BenchRow]:
    """One row per target in the order measured: its figures over the rounds, and each case's (or
    rung's) CPU per request and rate against its engine's references, as the geometric mean of the
    ratios taken within a round with the 95% interval of it over the rounds. The lab's proxy gets a
    verdict against GOAL and one against CAPACITY_GOAL; with `ladder`, each rung its difference
    from the rung below it, the p values of an engine's ladder adjusted together."""
    rows = []
    for target in dict.fromkeys(r.target for r in rounds):
        runs = [r for r in rounds if r.target == target]
        rows.append(
            BenchRow(
                target, len(runs), centre([r.rps for r in runs]), centre([r.p50_us for r in runs]),
                centre([r.p99_us for r in runs]), sum(r.requests for r in runs), sum(r.errors for r in runs),
                max(r.warmup_s for r in runs), all(r.warmup_settled for r in runs),
                centre([r.cpu_ms_per_request for r in runs]), centre([r.switches_per_request for r in runs]),
            )
        )  # fmt: skip
    reference_rps = next(r for r in rows if r.target == "nginx proxy_pass").rps
    by_round: Ratios = {}
    for r in rounds:
        by_round.setdefault(r.target, {})[r.round] = r
    engines = {case.name: case.engine for case in cases}
    for row in rows:
        row.ratio_to_proxy_pass = row.rps / reference_rps
        engine = engines.get(row.target) or _engine_of_rung(row.target)
        if engine:
            _against_references(row, engine, by_round)
        if row.target in engines or (engine and row.target == rung_target(engine, "lab proxy")):
            row.goal = goal_verdict(row.cpu_to.get("plain-limits"), GOAL, lower_is_better=True)
            row.capacity = goal_verdict(row.rps_to.get("plain-limits"), CAPACITY_GOAL, lower_is_better=False)
    if ladder:
        _against_the_rung_below(rows, by_round)
    return rows


def _against_references(row: BenchRow, engine: str, by_round: Ratios) -> None:
    """A row's CPU per request and rate against each reference of its engine (BASES), and its
    switches per request against plain-limits', each ratio taken within a round."""
    for base in BASES:
        reference = rung_target(engine, base)
        mine = row.target != reference
        cpu = ratios(by_round, row.target, reference, "cpu_ms_per_request") if mine else []
        row.cpu_to[base] = Ratio.of(cpu)
        row.rps_to[base] = Ratio.of(ratios(by_round, row.target, reference, "rps") if mine else [])
        if base == "plain-limits":
            switches = ratios(by_round, row.target, reference, "switches_per_request") if cpu else []
            row.switches_to_plain_limits = Ratio.of(switches)


# The lab's proxy against `plain-limits`, in CPU per request: the goal its overhead is held to.
GOAL = 1.15
# The lab's proxy against `plain-limits`, in rate at capacity (wrk's connections kept busy): the
# share of the minimal proxy's rate it keeps at least.
CAPACITY_GOAL = 0.9


def goal_verdict(ratio: Ratio | None, goal: float, lower_is_better: bool) -> str | None:
    """The lab's proxy's ratio to plain-limits against `goal`, by its 95% interval: `within`/`at least`
    the goal where the whole interval is on the goal's good side, `above`/`below` it where the whole
    interval is beyond it, and `at` the goal where the interval holds it; None without an interval."""
    if ratio is None or ratio.low is None or ratio.high is None:
        return None
    good, bad = ("within", "above") if lower_is_better else ("at least", "below")
    # The interval's end nearest the goal's good side, and its end farthest from it.
    best, worst = (ratio.low, ratio.high) if lower_is_better else (ratio.high, ratio.low)

    def beyond(x: float) -> bool:
        return x > goal if lower_is_better else x < goal

    if not beyond(worst):
        return f"{good} {goal}x"
    return f"{bad} {goal}x" if beyond(best) else f"at {goal}x (its interval holds it)"


def _against_the_rung_below(rows: list[BenchRow], by_round: Ratios) -> None:
    """Each rung against the one it builds on, measured before it on its engine, within each round,
    in CPU per request and in switches per request; a side rung (SIDE_RUNGS) is set against the one
    below it, and the next rung against the one below the side rung. An engine's comparisons of a
    figure are one family (confidence.adjust: Benjamini-Hochberg, intervals to match)."""
    by_engine: dict[str, list[BenchRow]] = {}
    for row in rows:
        if engine := _engine_of_rung(row.target):
            by_engine.setdefault(engine, []).append(row)
    for ladder in by_engine.values():
        pairs: dict[str, list[tuple[BenchRow, list[float]]]] = {"cpu": [], "switches": []}
        base = None
        for row in ladder:
            if base is not None:
                row.below = base.target
                for figure, key in (("cpu_ms_per_request", "cpu"), ("switches_per_request", "switches")):
                    pairs[key].append((row, ratios(by_round, row.target, base.target, figure)))
            if row.target.removesuffix(" " + _engine_of_rung(row.target)) not in SIDE_RUNGS:
                base = row
        for key, mine in pairs.items():
            tested = [
                (row, values, c) for row, values in mine if (c := confidence.paired(values)) is not None
            ]
            adjusted = dict(
                zip((id(r) for r, _, _ in tested), confidence.adjust([c for *_, c in tested]), strict=True)
            )
            for row, values in mine:
                setattr(row, f"{key}_to_below", Ratio.of(values, adjusted.get(id(row))))


def _engine_of_rung(target: str) -> str | None:
    """The engine a reference or rung is of (`+ metrics okhttp` -> okhttp)."""
    word = target.rsplit(" ", 1)[-1]
    known = {rung for rung, _ in (*REFERENCES, *RUNGS.values())}
    return word if target.removesuffix(" " + word) in known else None


def _centre(ratio: Ratio | None) -> float | None:
    return ratio.centre if ratio else None


def _span(ratio: Ratio | None) -> str | None:
    return ratio.span() if ratio else None


def _per_round(r: BenchRow) -> str:
    """`1.15 1.14 1.17`: the CPU ratios to plain-limits, round by round (more than one round)."""
    limits = r.cpu_to.get("plain-limits")
    return " ".join(f"{x:.2f}" for x in limits.rounds) if limits and r.rounds > 1 else ""


# The table's columns: heading, cell, digits (None: text); then the ladder's or the references'.
COLUMNS = [
    ("target", lambda r: r.target, None),
    ("rps", lambda r: r.rps, 0),
    ("p50 ms", lambda r: r.p50_us / 1000, 2),
    ("p99 ms", lambda r: r.p99_us / 1000, 2),
    ("errors", lambda r: r.errors, 0),
    ("x proxy_pass", lambda r: r.ratio_to_proxy_pass, 3),
    ("CPU ms / req", lambda r: r.cpu_ms_per_request, 3),
    ("CPU x plain-limits", lambda r: _centre(r.cpu_to.get("plain-limits")), 2),
    ("CPU 95%", lambda r: _span(r.cpu_to.get("plain-limits")), None),
    ("x plain-limits per round", _per_round, None),
    (f"goal: {GOAL}x", lambda r: r.goal, None),
    ("switches x plain-limits", lambda r: _centre(r.switches_to_plain_limits), 2),
    ("switches 95%", lambda r: _span(r.switches_to_plain_limits), None),
    ("rps x plain-limits", lambda r: _centre(r.rps_to.get("plain-limits")), 2),
    ("rps 95%", lambda r: _span(r.rps_to.get("plain-limits")), None),
    (f"capacity goal: {CAPACITY_GOAL}x", lambda r: r.capacity, None),
]
LADDER_COLUMNS = [
    ("rung below", lambda r: r.below, None),
    ("CPU against the rung below", lambda r: r.cpu_to_below.words if r.cpu_to_below else None, None),
    ("switches against it", lambda r: r.switches_to_below.words if r.switches_to_below else None, None),
]
REFERENCE_COLUMNS = [
    ("CPU x plain", lambda r: _centre(r.cpu_to.get("plain")), 2),
    ("rps x plain", lambda r: _centre(r.rps_to.get("plain")), 2),
    ("CPU x streamed", lambda r: _centre(r.cpu_to.get("plain-limits streamed")), 2),
]
LAST_COLUMNS = [
    ("switches / req", lambda r: r.switches_per_request, 1),
    ("warm-up s", lambda r: f"{r.warmup_s:.0f}" + ("" if r.warmup_settled else " (unsettled)"), ""),
]


def table(results: list[BenchRow], ladder: bool = False) -> render.Table:
    """bench.md's table: a row per target (digits "" is a number written as text: right-aligned)."""
    columns = [*COLUMNS, *(LADDER_COLUMNS if ladder else REFERENCE_COLUMNS), *LAST_COLUMNS]
    made = [render.Column(h, get, digits) if digits else render.Column(h, get) for h, get, digits in columns]
    return render.Table(made, results, numeric=[digits is not None for _, _, digits in columns])
