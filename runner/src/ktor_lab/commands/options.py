"""Options and helpers several commands share: ports, JVM options, proxy variables, signals."""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

from .. import versions
from ..cases import DIMENSIONS, Case, Dimension
from ..errors import LabError
from ..network import Network, NetworkError, value
from ..plan import WARM_FIRST_SCENARIO
from ..stack import PORT_OWNERS, Ports


def add_stack_options(p: argparse.ArgumentParser) -> None:
    """nginx's and the proxy's ports, the proxy's JVM options, the run folder."""
    add_ports(p, "nginx", "nginx_status", "nginx_tls", "proxy")
    add_java_opts(p, "-Xmx512m")
    add_run_dir(p)


def add_service_ports(p: argparse.ArgumentParser) -> None:
    add_ports(p, "locust", "prometheus", "exporter", "grafana")


def add_ports(p: argparse.ArgumentParser, *names: str) -> None:
    """The option of each of `names` (fields of Ports, stack.PORT_OWNERS), its default from
    LAB_<NAME>_PORT or Ports()."""
    defaults = Ports()
    for name in names:
        _, option, what = PORT_OWNERS[name]
        env = f"LAB_{name.upper()}_PORT"
        p.add_argument(
            option,
            type=int,
            default=int(os.environ.get(env, getattr(defaults, name))),
            help=f"{what} (env {env}, default %(default)s)",
        )


def add_java_opts(p: argparse.ArgumentParser, default: str, what: str = "") -> None:
    p.add_argument(
        "--java-opts",
        default=os.environ.get("JAVA_OPTS", default),
        help="JVM options of the proxy, written as --java-opts='-Xmx256m -XX:+UseParallelGC' "
        f"(env JAVA_OPTS, default %(default)s){what}",
    )


def add_run_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="folder for configs and logs (default: runs/<time>-<name>/)",
    )


def add_settings(p: argparse.ArgumentParser, example: str = "") -> None:
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"an extra proxy variable{example} (repeatable)",
    )


def ports(args: argparse.Namespace) -> Ports:
    """The ports the options give; the ones a command has no option for keep their defaults."""
    defaults = vars(Ports())
    return Ports(**{name: getattr(args, f"{name}_port", default) for name, default in defaults.items()})


def settings(pairs: list[str]) -> dict[str, str]:
    """NAME=VALUE pairs of --set; LabError naming the first bad one."""
    if bad := [kv for kv in pairs if "=" not in kv or not kv.split("=", 1)[0]]:
        raise LabError(f"--set takes NAME=VALUE, not {bad[0]!r}")
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


def add_versions(p: argparse.ArgumentParser, many: bool) -> None:
    """--ktor and --java: the proxy's Ktor release (built on first use) and the JDK it runs on."""
    each = "comma-separated, each a dimension of the matrix: " if many else ""
    p.add_argument(
        "--ktor",
        default="",
        help=f"{each}Ktor release{'s' if many else ''} of ktor-releases.tsv, e.g. "
        f"{'3.4.0,3.5.1' if many else '3.5.1'}; a release other than the default is built into "
        "proxy-app/target/ktor-<release>/ on first use (default: the pom's, "
        f"{versions.default_release().name})",
    )
    p.add_argument(
        "--java",
        default="",
        help=f"{each}JDK{'s' if many else ''} by major version (e.g. {'17,25' if many else '25'}) or a JDK's "
        "folder (default: $JAVA_HOME's, else java on PATH)",
    )


def one_case(text: str, **given: str) -> Case:
    """The case of a command that runs one (lab up, lab verify), with the dimensions its options
    give (--ktor 3.5.1: field ktor): the rule of every command, a plan's too, is that a dimension
    comes from the case's name or from an option, never both. LabError (one line) for a case that
    cannot run: a release without its engine, h2 through an HTTP/1.1-only engine, an unknown JDK."""
    try:
        case = Case.parse(text)
        for d in DIMENSIONS:
            value = given.get(d.field)
            if not value:
                continue
            if d.value_of(case) != d.default:
                raise ValueError(f"the case names its {d.word}; give it there or with {d.option}, not both")
            case = case.with_dimensions(**{d.field: d.parse(value)})
        if why := case.refusal():
            raise ValueError(f"case {case.name!r}: {why}")
        if case.java:
            versions.jdk(case.java)
    except ValueError as e:
        raise LabError(str(e)) from None
    return case


def add_dimension(p: argparse.ArgumentParser, d: Dimension, default: str = "", more: str = "") -> None:
    """A dimension's option (cases.DIMENSIONS): comma-separated values, each a dimension of every
    case; the same spelling and help in lab run and every study. `default` and `more` are a study's."""
    shown = f" (here, default: {default})" if default else ""
    p.add_argument(
        d.option,
        dest=d.dest,
        default=default,
        help=f"comma-separated, each a dimension of every case: {d.help}{more}{shown}",
    )


def add_network(p: argparse.ArgumentParser, many: bool, rtt: bool = True) -> None:
    """--rtt, --jitter and --bandwidth: the network between the proxy and nginx (Toxiproxy, built on
    first use; docs/network.md), defaults from UPSTREAM_RTT_MS, UPSTREAM_JITTER_MS and
    UPSTREAM_BANDWIDTH_KBPS. `rtt` False: --rtt is a dimension's option (add_dimension)."""
    if rtt:
        each = "comma-separated, each a dimension of every case, e.g. 0,1,20,80: " if many else ""
        p.add_argument(
            "--rtt",
            default=None,
            help=f"{each}round trip in ms added between the proxy and nginx, half each way "
            "(default: env UPSTREAM_RTT_MS for each case that names no rtt of its own; else 0, no network, "
            "the proxy calls nginx directly)",
        )
    p.add_argument(
        "--jitter",
        default=os.environ.get("UPSTREAM_JITTER_MS", "0"),
        help="each round trip varies by up to +- this many ms, at most the RTT "
        "(env UPSTREAM_JITTER_MS, default %(default)s)",
    )
    p.add_argument(
        "--bandwidth",
        default=os.environ.get("UPSTREAM_BANDWIDTH_KBPS", "0"),
        help="KB/s per connection each way (1 KB = 1000 bytes); 0: not limited "
        "(env UPSTREAM_BANDWIDTH_KBPS, default %(default)s)",
    )


def network_value(option: str, variable: str, text: str) -> int:
    """One value of --rtt, --jitter or --bandwidth, checked as its variable is (LabError naming both)."""
    try:
        return value(variable, text)
    except NetworkError as e:
        raise LabError(f"{option}: {e}") from None


def rtt_list(text: str | None) -> list[int]:
    """--rtt's comma-separated values, each checked (none when it was not given)."""
    values = [v.strip() for v in (text or "").split(",")]
    return [network_value("--rtt", "UPSTREAM_RTT_MS", v) for v in values if v]


def env_rtt() -> int | None:
    """UPSTREAM_RTT_MS from the environment, checked; None when unset or empty. A default only: a
    case that names its rtt keeps it, and --rtt on the command line replaces it."""
    text = os.environ.get("UPSTREAM_RTT_MS", "").strip()
    return network_value("UPSTREAM_RTT_MS (environment)", "UPSTREAM_RTT_MS", text) if text else None


def network(args: argparse.Namespace, case_rtt: int = 0) -> Network:
    """The network of lab up: the case's rtt, else --rtt (one), else UPSTREAM_RTT_MS; with --jitter
    and --bandwidth (LabError naming the variable when they do not go together)."""
    rtt = rtt_list(args.rtt)
    if len(rtt) > 1:
        raise LabError(f"--rtt {args.rtt!r}: give one round trip here (lab run takes several)")
    if case_rtt and rtt:
        raise LabError(f"the case names its rtt ({case_rtt} ms); give it there or with --rtt, not both")
    chosen = case_rtt or (rtt[0] if rtt else env_rtt() or 0)
    try:
        return Network(
            chosen,
            network_value("--jitter", "UPSTREAM_JITTER_MS", args.jitter),
            network_value("--bandwidth", "UPSTREAM_BANDWIDTH_KBPS", args.bandwidth),
        )
    except NetworkError as e:
        raise LabError(str(e)) from None


def add_warm_first(p: argparse.ArgumentParser, default: str) -> None:
    """--warm-first: a warm-up at capacity once per proxy before its first measured load's."""
    p.add_argument(
        "--warm-first",
        default=default,
        metavar="LOAD",
        help=f"warm each proxy once at this load on {WARM_FIRST_SCENARIO} before the warm-up at its measured "
        "load (the same rule, up to --warmup each): at a fixed rate or on the slow scenario the JIT compiles "
        "the proxy's path for minutes, at capacity in 25-60 s; 'none' for no such warm-up (default: "
        "%(default)s)",
    )
