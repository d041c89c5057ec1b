"""`lab`: parses the command line and hands it to one command (commands/, studies/).

Every command stops with a message by raising LabError; main() prints `lab: <message>` and
exits with its code (2: what was asked cannot be done as given; 1: a run failed). A part
that fails at run time (RuntimeError, OSError, a timeout) ends the command with 1.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import requests

from . import confidence, studies
from .cases import DEFAULT_CASES
from .commands import Command, bench, bench_locust, compare, guide, report, run, swarm, up, verify
from .errors import LabError
from .plan import DEFAULT_LOAD, Plan

EPILOG = f"""\
examples:
  lab up singleton-cio                  nginx, proxy, Prometheus, Locust UI (and Grafana) until Ctrl-C
  lab up per-call-okhttp --proxy-port 9080 --set CLIENT_MAX_CONNECTIONS=200
  lab verify                            start everything, check every endpoint and metric, stop
  lab run                               {len(DEFAULT_CASES)} cases (not the deprecated apache), an A/A pair, \
static-small at {DEFAULT_LOAD}, {confidence.FORKS} JVMs a row x {confidence.WINDOWS} windows of \
{Plan.duration_s} s
  lab run --cases singleton-cio,per-call-cio --loads closed/1000/1-2,rate/500 --repeats 3
  lab report results/20261122-101500    report.md and report.html from a run's results.json (or a study's)
  lab compare results/before results/after   two runs of one plan: each change with its interval, ~ if none
  lab guide                             docs/guide.md (which engine and lifetime, per workload) and the
                                        pages of the studies kept under docs/studies/
  lab bench                             wrk against nginx, nginx proxy_pass and every case
  lab bench-locust --workers 2          Locust's own ceiling against nginx directly
  lab swarm up per-call-okhttp          the stack on Docker Swarm (docs/swarm.md); lab swarm down removes it
  lab study threads                     threads per engine for 100/500/1000 requests in flight (docs/studies/)
"""

COMMANDS: dict[str, Command] = {
    "up": up,
    "verify": verify,
    "run": run,
    "report": report,
    "compare": compare,
    "guide": guide,
    "bench": bench,
    "bench-locust": bench_locust,
    "swarm": swarm,
}


def main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lab",
        description="Ktor client engine lab, run natively on loopback.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    studies.add_parser(sub)
    for p in commands_of(parser):
        p.add_argument(
            "--dry-run",
            action="store_true",
            help="check the command and say what it would do (its runs, what it skips, how long it "
            "takes), without starting anything",
        )
    return parser


def commands_of(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser, `lab study NAME`'s and `lab swarm VERB`'s included."""
    out = []
    for action in parser._subparsers._group_actions if parser._subparsers else []:  # noqa: SLF001
        for child in action.choices.values():
            nested = commands_of(child)
            out += nested or [child]
    return out


FAILURES = (RuntimeError, TimeoutError, OSError, subprocess.CalledProcessError, requests.RequestException)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = main_parser().parse_args(argv)
    try:
        if args.command == "study":
            return studies.run(args, argv)
        if args.command == "report" and studies.plans.is_study(args.dir):
            return studies.report_again(args)
        if args.command == "guide":  # docs/guide.md, then the pages of the studies kept in docs/
            return max(guide.run(args), studies.publish(args))
        return COMMANDS[args.command].run(args)
    except LabError as e:
        print(f"lab: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"lab {args.command}: interrupted", file=sys.stderr)
        return 130
    except FAILURES as e:
        print(f"lab {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
