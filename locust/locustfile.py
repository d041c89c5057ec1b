"""Locust scenarios of the Ktor client engine lab.

Scenarios (pick one with --scenario / LOCUST_SCENARIO, or the class picker in the UI):
  static-small  GET /files/tiny.txt
  static-large  GET /files/<size>.bin (15m by default), length and sha256 checked
  upload        PUT a body to /upload; the sink's byte count and sha256 must match
  slow          GET /delay?ms=<delay-ms>
  mix           all four, weighted 10:1:1:2
Load models (--load-model / LOCUST_LOAD_MODEL):
  closed  each user waits wait-min..wait-max seconds between requests (the published studies: 1-2 s)
  rate    each user is paced so that all users together start target-rps requests a second
  sweep   add locust/sweep.py to -f: the rate steps up until errors or p95 cross a limit
The model in force is printed at start and stop, shown in the UI's custom parameters,
and exported as locust_lab_info at /metrics (see lab_export.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import sys
import time

from lab_latency import Schedule
from locust.runners import MasterRunner, WorkerRunner

from lab_export import install as install_export
from lab_guard import check_connections
from lab_guard import install as install_guard
from lab_payload import digest_of, payload
from locust import FastHttpUser, events, task

log = logging.getLogger("lab")

SCENARIOS: dict[str, type] = {}
LOAD_MODELS = ("closed", "rate", "sweep")
SIZES = ("1k", "100k", "1m", "15m", "100m")
SIZE_BYTES = {
    "1k": 1024,
    "100k": 102400,
    "1m": 1 << 20,
    "15m": 15 << 20,
    "100m": 100 << 20,
}

# Settings in force, filled from the options in events.init (the same in every process).
settings: dict = {}
# Rate in force for the rate and sweep models: requests a second for `users` users together.
# The master (or the sweep shape) tells workers, which know only their own users.
target = {"rps": 0.0, "users": 0}
_environment: list = []


@events.init_command_line_parser.add_listener
def add_options(parser):
    # parser.add_argument, not a group's: only Locust's own add_argument makes an option a field
    # of the web UI's form (include_in_web_ui defaults to True there). Fixed sets are choices,
    # which the form shows as a list and argparse checks with a message naming the valid values.
    parser.add_argument(
        "--scenario",
        env_var="LOCUST_SCENARIO",
        default="static-small",
        choices=list(SCENARIOS),
        help=f"what each user requests: {', '.join(SCENARIOS)} (default: static-small)",
    )
    parser.add_argument(
        "--load-model",
        env_var="LOCUST_LOAD_MODEL",
        default="closed",
        choices=list(LOAD_MODELS),
        help="closed: each user sends its next request when its last is answered, after the wait "
        "below; with no wait (the default, as lab run) the rate is the engine's capacity, with a wait "
        "it is users / (wait + latency), the wait's and not the engine's; rate: all users together "
        "start --target-rps a second (latency at a fixed rate); sweep: needs locust/sweep.py "
        "(default: closed)",
    )
    parser.add_argument(
        "--wait-min",
        env_var="LOCUST_WAIT_MIN",
        type=float,
        default=0.0,
        help="closed model: least seconds between a user's requests (default: 0, no wait: the rate is "
        "the engine's capacity)",
    )
    parser.add_argument(
        "--wait-max",
        env_var="LOCUST_WAIT_MAX",
        type=float,
        default=0.0,
        help="closed model: most seconds between a user's requests (default: 0)",
    )
    parser.add_argument(
        "--target-rps",
        env_var="LOCUST_TARGET_RPS",
        type=float,
        default=0.0,
        help="rate model: requests a second started by all users together",
    )
    parser.add_argument(
        "--large-size",
        env_var="LOCUST_LARGE_SIZE",
        default="15m",
        choices=list(SIZES),
        help=f"static-large file: one of {', '.join(SIZES)} (default: 15m)",
    )
    parser.add_argument(
        "--upload-size",
        env_var="LOCUST_UPLOAD_SIZE",
        default="1m",
        choices=list(SIZES),
        help=f"upload body: one of {', '.join(SIZES)} (default: 1m)",
    )
    parser.add_argument(
        "--delay-ms",
        env_var="LOCUST_DELAY_MS",
        type=int,
        default=2000,
        help="slow scenario: the upstream's delay in milliseconds (default: 2000)",
    )
    parser.add_argument(
        "--lab-case",
        env_var="LAB_CASE",
        default="",
        help="label of the case under test, e.g. singleton-cio (for the export)",
    )


def validate(options) -> list[str]:
    """What argparse cannot check (its choices cover scenario, model and sizes)."""
    errors = []
    if not 0 <= options.wait_min <= options.wait_max:
        errors.append(
            f"--wait-min {options.wait_min} and --wait-max {options.wait_max}: need 0 <= min <= max"
        )
    if options.load_model == "rate" and options.target_rps <= 0:
        errors.append("--load-model rate needs --target-rps > 0")
    if options.delay_ms < 0:
        errors.append("--delay-ms must be >= 0")
    return errors


@events.init.add_listener
def on_init(environment, **_):
    options = environment.parsed_options
    if options is None:  # used as a library
        return
    sweeping = type(environment.shape_class).__name__ == "CapacitySweep"
    if sweeping:
        options.load_model = "sweep"
    elif options.load_model == "sweep":
        sys.stderr.write("lab: --load-model sweep needs the shape: -f locust/locustfile.py,locust/sweep.py\n")
        sys.exit(2)
    if errors := validate(options):
        for e in errors:
            sys.stderr.write(f"lab: {e}\n")
        sys.exit(2)
    if options.user_classes:
        # Classes named on the command line (e.g. `locust -f ... UploadUser`) win over --scenario.
        named = set(environment.user_classes)
        options.scenario = ",".join(name for name, cls in SCENARIOS.items() if cls in named)
    elif not isinstance(environment.runner, WorkerRunner):
        # Workers keep every scenario: the master decides which users they run.
        environment.user_classes[:] = [SCENARIOS[options.scenario]]
    load_settings(options)
    _environment[:] = [environment]  # for listeners that are not given it
    install_export(environment, settings, target)
    install_guard(environment)  # the login and the target's check (lab_guard.py)
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message("lab_rate", lambda msg, **_: target.update(msg.data))
    log.info("lab: %s", describe(settings))


def load_settings(options) -> None:
    """The settings in force, from the options (on a worker: the master's, sent with each spawn)."""
    settings.update(
        scenario=options.scenario,
        load_model=options.load_model,
        wait_min=options.wait_min,
        wait_max=options.wait_max,
        target_rps=options.target_rps,
        large_size=options.large_size,
        upload_size=options.upload_size,
        delay_ms=options.delay_ms,
        case=options.lab_case,
    )
    if options.load_model == "rate":  # under the sweep, the shape sets the rate
        target["rps"] = options.target_rps


def broadcast_rate(environment) -> None:
    """Master: tells every worker the rate in force and the total of users it is for."""
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        target["users"] = runner.target_user_count or target["users"]
        runner.send_message("lab_rate", dict(target))


@events.test_start.add_listener
def on_test_start(environment, **_):
    options = environment.parsed_options
    if options is None:
        return
    runner = environment.runner
    if (
        not isinstance(runner, WorkerRunner)
        and not options.user_classes
        and options.scenario != settings["scenario"]
    ):
        # Changed in the web UI's custom parameters since the last run (fires before users spawn).
        if options.scenario in SCENARIOS:
            environment.user_classes[:] = [SCENARIOS[options.scenario]]
        else:
            log.error("lab: --scenario %r is not valid; keeping %s", options.scenario, settings["scenario"])
            options.scenario = settings["scenario"]
    load_settings(options)
    broadcast_rate(environment)


@events.spawning_complete.add_listener
def on_spawned(user_count, **_):
    if _environment:
        broadcast_rate(_environment[0])


@events.test_stop.add_listener
def on_test_stop(environment, **_):
    log.info("lab: %s", describe(settings))


def describe(s: dict) -> str:
    model = s["load_model"]
    if model == "closed":
        how = f"closed loop, wait {s['wait_min']:g}-{s['wait_max']:g} s: rate <= users / (wait + latency)"
    elif model == "rate":
        how = f"fixed rate, {s['target_rps']:g} requests/s for all users together"
    else:
        how = "capacity sweep (locust/sweep.py)"
    return f"scenario={s['scenario']} model={model} ({how})"


class LabUser(FastHttpUser):
    abstract = True

    def __init__(self, environment):
        super().__init__(environment)
        # Below every attribute a class may carry: each connection the session opens is checked.
        guard = getattr(environment, "lab_guard", None)
        if guard is not None:
            check_connections(self.client, guard)
        self._lab_schedule: Schedule | None = None

    def run(self):
        # The last check of where the load goes (lab_guard.py), whichever way the run started: a
        # user whose host is not the lab's makes no request.
        guard = getattr(self.environment, "lab_guard", None)
        if guard is not None and (why := guard.refusal(self.host)):
            guard.warn_once(why)
            return
        super().run()

    def wait_time(self):
        if settings.get("load_model", "closed") == "closed":
            return random.uniform(settings["wait_min"], settings["wait_max"])
        # rate and sweep: each user starts one request every `interval` seconds, so that all
        # users together start target["rps"] a second. A user whose request took longer than
        # its interval starts the next at once: then the rate is not met, the export shows the
        # target beside what was achieved, and the starts it was late for are counted and timed
        # from when they were meant to start (lab_latency.Schedule).
        runner = self.environment.runner
        users = target["users"] or (runner.target_user_count if runner else 0) or 1
        interval = users / target["rps"] if target["rps"] > 0 else 1.0
        if self._lab_schedule is None:
            self._lab_schedule = Schedule()
        return self._lab_schedule.wait(time.monotonic(), interval)

    def context(self):
        """What the request event records beside Locust's own time (lab_export): the intended start
        of this request, its send, and the starts it was late for; nothing in the closed model."""
        s = self._lab_schedule
        if s is None or s.intended is None or settings.get("load_model", "closed") == "closed":
            return {}
        return {
            "lab_intended": s.intended,
            "lab_sent": time.monotonic(),
            "lab_late": s.late,
            "lab_skipped": s.skipped,
        }

    def get_checked(self, path: str, size: int, digest: str | None, name: str):
        with self.client.get(path, name=name, catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"status {r.status_code}")
            elif len(r.content or b"") != size:
                r.failure(f"{len(r.content or b'')} bytes, expected {size}")
            elif digest and hashlib.sha256(r.content).hexdigest() != digest:
                r.failure("sha256 mismatch")


def scenario(name: str):
    def register(cls):
        SCENARIOS[name] = cls
        return cls

    return register


@scenario("static-small")
class StaticSmallUser(LabUser):
    @task
    def tiny(self):
        self.get_checked("/files/tiny.txt", 9, None, "static-small")


@scenario("static-large")
class StaticLargeUser(LabUser):
    @task
    def large(self):
        size = SIZE_BYTES[settings.get("large_size", "15m")]
        self.get_checked(
            f"/files/{settings.get('large_size', '15m')}.bin",
            size,
            digest_of(size),
            "static-large",
        )


@scenario("upload")
class UploadUser(LabUser):
    @task
    def upload(self):
        size = SIZE_BYTES[settings.get("upload_size", "1m")]
        body = payload(size)
        with self.client.put("/upload", data=body, name="upload", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"status {r.status_code}")
                return
            try:
                answer = json.loads(r.content)
            except ValueError:
                r.failure("the sink's answer is not JSON")
                return
            if answer != {"bytes": size, "sha256": digest_of(size)}:
                r.failure(f"digest mismatch: sink saw {answer}")


@scenario("slow")
class SlowUser(LabUser):
    @task
    def slow(self):
        with self.client.get(
            f"/delay?ms={settings.get('delay_ms', 2000)}",
            name="slow",
            catch_response=True,
        ) as r:
            if r.status_code != 200:
                r.failure(f"status {r.status_code}")


@scenario("mix")
class MixUser(LabUser):
    tasks = {
        StaticSmallUser.tiny: 10,
        StaticLargeUser.large: 1,
        UploadUser.upload: 1,
        SlowUser.slow: 2,
    }
