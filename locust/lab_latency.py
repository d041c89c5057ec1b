"""Latency from the intended start, at microsecond resolution (issue 82): plain Python and hdrh,
nothing of Locust, so that the runner merges what the export recorded with the same code.

In the rate and sweep models each user has a schedule: one start every `interval` seconds. A
request slower than its interval makes the user late for its next start (sent at once, late) and
for those after it (never sent: the user re-anchors its schedule at the late send, as Locust's
pacing always did, so the load sent is unchanged). Measured from the actual send, such a stall is
seen by the one request caught in it (coordinated omission); measured from the intended start,
by every start it delayed. Both are recorded, each in an HdrHistogram of microseconds
(1 us to 1 h, 3 significant digits):

- `intended`: from the intended start to the answer. A start never sent is recorded as its delay
  to the late send plus that request's own time (what it would have seen sent in that burst, as
  HdrHistogram's correction by expected interval assumes).
- `sent`: from the actual send to the answer (the service time; Locust's own figure, unrounded).

In the closed model there is no schedule: both are the service time.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

LOWEST_US, HIGHEST_US, DIGITS = 1, 3_600_000_000, 3
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)


def histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


def encode(h: HdrHistogram) -> str:
    """The histogram compressed (HdrHistogram's own encoding, zlib and base64): about 100 bytes
    for a window of small GETs."""
    return h.encode().decode("ascii")


def decode(text: str) -> HdrHistogram:
    return HdrHistogram.decode(text.encode("ascii"))


def merged(texts) -> HdrHistogram | None:
    """The histograms `texts` (encoded; None or "" skipped) added into one; None when none."""
    out = None
    for text in texts:
        if not text:
            continue
        if out is None:
            out = histogram()
        out.add(decode(text))
    return out if out is not None and out.get_total_count() else None


def percentile_ms(h: HdrHistogram | None, p: float) -> float | None:
    """The `p`th percentile in milliseconds (None for an empty histogram)."""
    if h is None or not h.get_total_count():
        return None
    return h.get_value_at_percentile(p) / 1000.0


def curve(h: HdrHistogram | None, percentiles=PERCENTILES) -> list[tuple[float, float]]:
    """(percentile, milliseconds) at each of `percentiles`, for a percentile plot."""
    return [(p, v) for p in percentiles if (v := percentile_ms(h, p)) is not None]


@dataclass
class Schedule:
    """One user's intended starts at a fixed rate: `wait` says how long to sleep before the next
    request and what that request was late for."""

    rand: random.Random = field(default_factory=random.Random)
    intended: float | None = None  # the intended start (monotonic s) of the request about to be sent
    base: float | None = None  # where the next interval counts from: the last start, or a late send
    # Of the request about to be sent: whether the user was still busy at its intended start,
    # and the delays (s) of the starts it skipped, up to its own send.
    late: bool = False
    skipped: list[float] = field(default_factory=list)

    def wait(self, now: float, interval: float) -> float:
        """Seconds to sleep from `now` (monotonic) until the next intended start."""
        if self.base is None:  # the first start spreads the users over one interval
            self.intended = self.base = now + self.rand.uniform(0, interval)
            return self.intended - now
        self.intended = self.base + interval
        self.late = self.intended < now
        self.skipped = []
        if not self.late:
            self.base = self.intended
            return self.intended - now
        due = self.intended + interval
        while due < now:
            self.skipped.append(now - due)
            due += interval
        self.base = now  # sent at once; the schedule goes on from the send (Locust's pacing)
        return 0.0


@dataclass
class Latencies:
    """A process's latencies since the window's start (or since its last report to a master), and
    since it started (the export's counters)."""

    intended: HdrHistogram = field(default_factory=histogram)
    sent: HdrHistogram = field(default_factory=histogram)
    starts: int = 0  # intended starts, sent or not
    late: int = 0  # of them, sent late because the user was still busy (skipped ones included)
    missed: int = 0  # of them, never sent
    total_intended: HdrHistogram = field(default_factory=histogram)
    total_sent: HdrHistogram = field(default_factory=histogram)
    total_starts: int = 0
    total_late: int = 0
    total_missed: int = 0

    def record(self, service_s: float, intended_delay_s: float = 0.0, late: bool = False, skipped=()) -> None:
        """One request: its time from the send, how far its send was after its intended start, whether
        the user was busy then, and the delays of the starts it skipped."""
        service_us = max(LOWEST_US, min(HIGHEST_US, round(service_s * 1e6)))
        values = [service_us + max(0, round(intended_delay_s * 1e6))]
        values += [service_us + round(d * 1e6) for d in skipped]
        for h in (self.sent, self.total_sent):
            h.record_value(service_us)
        for h in (self.intended, self.total_intended):
            for v in values:
                h.record_value(min(HIGHEST_US, v))
        starts, late_, missed = len(values), int(late) + len(skipped), len(skipped)
        self.starts, self.late, self.missed = self.starts + starts, self.late + late_, self.missed + missed
        self.total_starts += starts
        self.total_late += late_
        self.total_missed += missed

    def window(self) -> dict:
        """The window's part, encoded (WindowStats' fields and a worker's report)."""
        return {
            "latency_intended": encode(self.intended) if self.intended.get_total_count() else "",
            "latency_sent": encode(self.sent) if self.sent.get_total_count() else "",
            "starts": self.starts,
            "late_starts": self.late,
            "missed_starts": self.missed,
        }

    def add(self, report: dict) -> None:
        """A worker's report (`window()`) into this master's window and totals."""
        for key, ours, total in (
            ("latency_intended", self.intended, self.total_intended),
            ("latency_sent", self.sent, self.total_sent),
        ):
            if report.get(key):
                h = decode(report[key])
                ours.add(h)
                total.add(h)
        self.starts += report.get("starts", 0)
        self.late += report.get("late_starts", 0)
        self.missed += report.get("missed_starts", 0)
        self.total_starts += report.get("starts", 0)
        self.total_late += report.get("late_starts", 0)
        self.total_missed += report.get("missed_starts", 0)

    def reset(self) -> None:
        """A new window (the totals go on)."""
        self.intended.reset()
        self.sent.reset()
        self.starts = self.late = self.missed = 0
