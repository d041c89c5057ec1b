"""What Locust's /lab/stats answers (lab_export.window_stats): the totals of a window, named once.

The export fills a WindowStats; `lab run` reads the JSON back into one (runner/src/ktor_lab/
parts/loadgen.py imports this module, installed beside the runner by locust/pyproject.toml).
Plain Python, nothing of Locust: the runner must not import Locust, which patches the process it
is imported into.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WindowStats:
    """Totals since the run started or Locust's stats were last reset."""

    state: str
    now: float  # time.time() when answered
    start_time: float  # of the window (Locust's reset or the run's start)
    last_request_timestamp: float | None
    requests: int
    failures: int
    # Exact percentiles from Locust's per-millisecond counts; None before the first request.
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    avg_ms: float | None
    users: int
    workers: int  # connected to a master; 0 for one process
    target_rps: float  # rate and sweep models; 0 for the closed model
    cpu_peak_percent: dict[str, float] = field(default_factory=dict)  # by node, in the window
    saturated: bool = False  # a Locust process reached the saturation threshold in the window
    settings: dict = field(default_factory=dict)  # the load settings in force
    errors: list = field(default_factory=list)  # Locust's error table, at most 20 rows
    # HdrHistograms of microseconds (lab_latency.encode): from each request's intended start and
    # from its send; "" before the first request.
    latency_intended: str = ""
    latency_sent: str = ""
    starts: int = 0  # intended starts (the closed model: requests)
    late_starts: int = 0  # of them, sent late because the user was still busy (missed ones too)
    missed_starts: int = 0  # of them, never sent

    @property
    def rps(self) -> float:
        return self.requests / max(self.now - self.start_time, 1e-3)
