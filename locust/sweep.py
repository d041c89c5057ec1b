"""Capacity sweep: add to -f (`-f locust/locustfile.py,locust/sweep.py`) to use it.

The target rate starts at --sweep-start-rps and rises by --sweep-step-rps every
--sweep-step-seconds, paced as in the rate model with --sweep-users users. After each
step it checks that step alone: when failures pass --sweep-max-failure-ratio or p95
passes --sweep-max-p95-ms, or the achieved rate falls under 90% of the target, the
sweep stops, and the last step within limits is the capacity. Kept in its own file
because Locust always uses a shape class it finds in a loaded locustfile.
"""

from __future__ import annotations

import logging

from locust.stats import calculate_response_time_percentile, diff_response_time_dicts

from locust import LoadTestShape, events
from locustfile import broadcast_rate, target

log = logging.getLogger("lab")


@events.init_command_line_parser.add_listener
def add_options(parser):
    # parser.add_argument (not a group's), so each is a field of the web UI's form too.
    parser.add_argument(
        "--sweep-start-rps",
        env_var="LOCUST_SWEEP_START_RPS",
        type=float,
        default=100,
        help="first step's rate (default: 100)",
    )
    parser.add_argument(
        "--sweep-step-rps",
        env_var="LOCUST_SWEEP_STEP_RPS",
        type=float,
        default=100,
        help="rate added each step (default: 100)",
    )
    parser.add_argument(
        "--sweep-step-seconds",
        env_var="LOCUST_SWEEP_STEP_SECONDS",
        type=float,
        default=10,
        help="length of a step (default: 10)",
    )
    parser.add_argument(
        "--sweep-max-rps",
        env_var="LOCUST_SWEEP_MAX_RPS",
        type=float,
        default=20000,
        help="the sweep ends after this rate (default: 20000)",
    )
    parser.add_argument(
        "--sweep-users",
        env_var="LOCUST_SWEEP_USERS",
        type=int,
        default=200,
        help="users that share the rate (default: 200)",
    )
    parser.add_argument(
        "--sweep-max-failure-ratio",
        env_var="LOCUST_SWEEP_MAX_FAILURE_RATIO",
        type=float,
        default=0.01,
        help="a step failing more than this ends the sweep (default: 0.01)",
    )
    parser.add_argument(
        "--sweep-max-p95-ms",
        env_var="LOCUST_SWEEP_MAX_P95_MS",
        type=float,
        default=1000,
        help="a step whose p95 is above this ends the sweep (default: 1000)",
    )


class CapacitySweep(LoadTestShape):
    def __init__(self):
        super().__init__()
        self.step = -1
        self.mark = None  # (requests, failures, response_times) at the start of the step
        self.capacity = None
        self.done = False

    def tick(self):
        if self.done:
            return None
        o = self.runner.environment.parsed_options
        step = int(self.get_run_time() // o.sweep_step_seconds)
        if step != self.step:
            if self.step >= 0 and not self._step_within_limits(o):
                self.done = True
                log.info(
                    "lab sweep: capacity %s",
                    f"{self.capacity:g} rps" if self.capacity else "below the first step",
                )
                return None
            rps = o.sweep_start_rps + step * o.sweep_step_rps
            if rps > o.sweep_max_rps:
                self.done = True
                log.info(
                    "lab sweep: reached --sweep-max-rps; capacity at least %g rps",
                    self.capacity or 0,
                )
                return None
            self.step = step
            total = self.runner.stats.total
            self.mark = (
                total.num_requests,
                total.num_failures,
                dict(total.response_times),
            )
            target.update(rps=rps, users=o.sweep_users)
            broadcast_rate(self.runner.environment)
        return o.sweep_users, o.sweep_users

    def _step_within_limits(self, o) -> bool:
        total = self.runner.stats.total
        n = total.num_requests - self.mark[0]
        failed = total.num_failures - self.mark[1]
        times = diff_response_time_dicts(total.response_times, self.mark[2])
        p95 = calculate_response_time_percentile(times, n, 0.95) if n else 0
        achieved = n / o.sweep_step_seconds
        ok = (
            n > 0
            and failed / n <= o.sweep_max_failure_ratio
            and p95 <= o.sweep_max_p95_ms
            and achieved >= 0.9 * target["rps"]
        )
        log.info(
            "lab sweep: step %d: target %g rps, achieved %.0f rps, p95 %d ms, failures %d/%d -> %s",
            self.step,
            target["rps"],
            achieved,
            p95,
            failed,
            n,
            "within limits" if ok else "limit crossed",
        )
        if ok:
            self.capacity = target["rps"]
        return ok
