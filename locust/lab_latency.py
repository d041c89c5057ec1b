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

import bisect
import random
import weakref
from array import array
from dataclasses import dataclass, field
from itertools import accumulate

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
    """The histograms `texts` (encoded; None or "" skipped) added into one; None when none. The
    result is for reading (percentile_ms keeps its running totals with it): record into a copy."""
    out = None
    for text in texts:
        if not text:
            continue
        if out is None:
            out = histogram()
        out.add(decode(text))
    if out is None or not out.get_total_count():
        return None
    _RUNNING[out] = running_counts(out)
    return out


# The running totals of merged()'s histograms, which are read and never recorded into: a report
# reads several percentiles of each. A live histogram's are summed at every read.
_RUNNING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def running_counts(h: HdrHistogram) -> array:
    """The histogram's counts summed up to each index (8 bytes an index, as its own counts)."""
    return array("q", accumulate(h.counts[: min(h.counts_len, h.encoder.payload.counts_len)]))


def percentile_ms(h: HdrHistogram | None, p: float) -> float | None:
    """The `p`th percentile in milliseconds (None for an empty histogram): hdrh's
    get_value_at_percentile, with its walk over the counts (a Python loop, 2 ms a call, two thirds
    of the time `lab guide` took) done by accumulate, then a binary search."""
    if h is None or not h.get_total_count():
        return None
    running = _RUNNING.get(h)
    if running is None:
        running = running_counts(h)
    index = bisect.bisect_left(running, h.get_target_count_at_percentile(p))
    if index == len(running):
        return 0.0
    value = h.get_value_from_index(index)
    return (h.get_highest_equivalent_value(value) if p else h.get_lowest_equivalent_value(value)) / 1000.0


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


# Bounds of the export's histogram (locust_lab_latency_seconds) in microseconds: 100 us to 60 s,
# 1-2-5 a decade. Counted as each request is recorded: reading them off an HdrHistogram at every
# scrape took 120 ms of the generator's CPU a histogram.
EXPORT_BOUNDS_US = tuple(m * 10**e for e in range(2, 8) for m in (1, 2, 5)) + (60_000_000,)
STARTS = ("intended", "sent")


def _buckets() -> dict[str, list[int]]:
    return {k: [0] * (len(EXPORT_BOUNDS_US) + 1) for k in STARTS}


@dataclass
class Latencies:
    """A process's latencies since the window's start (or, on a worker, since its last report to
    the master), and the export's counts since it started (on a worker: since its last report)."""

    intended: HdrHistogram = field(default_factory=histogram)
    sent: HdrHistogram = field(default_factory=histogram)
    starts: int = 0  # intended starts, sent or not
    late: int = 0  # of them, sent late because the user was still busy (skipped ones included)
    missed: int = 0  # of them, never sent
    # The export's: counts by EXPORT_BOUNDS_US bucket (the last: above them), sums (us), starts.
    buckets: dict[str, list[int]] = field(default_factory=_buckets)
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STARTS, 0.0))
    totals: dict[str, int] = field(default_factory=lambda: {"all": 0, "late": 0, "missed": 0})

    def record(self, service_s: float, intended_delay_s: float = 0.0, late: bool = False, skipped=()) -> None:
        """One request: its time from the send, how far its send was after its intended start, whether
        the user was busy then, and the delays of the starts it skipped."""
        service_us = max(LOWEST_US, min(HIGHEST_US, round(service_s * 1e6)))
        values = [min(HIGHEST_US, service_us + max(0, round(intended_delay_s * 1e6)))]
        values += [min(HIGHEST_US, service_us + round(d * 1e6)) for d in skipped]
        self.sent.record_value(service_us)
        self.buckets["sent"][bisect.bisect_left(EXPORT_BOUNDS_US, service_us)] += 1
        self.sums["sent"] += service_us
        counts = self.buckets["intended"]
        for v in values:
            self.intended.record_value(v)
            counts[bisect.bisect_left(EXPORT_BOUNDS_US, v)] += 1
        self.sums["intended"] += sum(values)
        late_, missed = int(late) + len(skipped), len(skipped)
        self.starts, self.late, self.missed = (
            self.starts + len(values),
            self.late + late_,
            self.missed + missed,
        )
        t = self.totals
        t["all"], t["late"], t["missed"] = t["all"] + len(values), t["late"] + late_, t["missed"] + missed

    def window(self) -> dict:
        """The window's part, encoded (WindowStats' fields)."""
        return {
            "latency_intended": encode(self.intended) if self.intended.get_total_count() else "",
            "latency_sent": encode(self.sent) if self.sent.get_total_count() else "",
            "starts": self.starts,
            "late_starts": self.late,
            "missed_starts": self.missed,
        }

    def report(self) -> dict:
        """Worker: everything since its last report, for the master (`add`); then a fresh start."""
        out = {**self.window(), "buckets": self.buckets, "sums": self.sums, "totals": self.totals}
        self.reset()
        self.buckets, self.sums = _buckets(), dict.fromkeys(STARTS, 0.0)
        self.totals = {"all": 0, "late": 0, "missed": 0}
        return out

    def add(self, report: dict) -> None:
        """A worker's report into this master's window and export."""
        for key, ours in (("latency_intended", self.intended), ("latency_sent", self.sent)):
            if report.get(key):
                ours.add(decode(report[key]))
        self.starts += report.get("starts", 0)
        self.late += report.get("late_starts", 0)
        self.missed += report.get("missed_starts", 0)
        for k in STARTS:
            if theirs := report.get("buckets", {}).get(k):
                self.buckets[k] = [a + b for a, b in zip(self.buckets[k], theirs, strict=True)]
            self.sums[k] += report.get("sums", {}).get(k, 0.0)
        for k, v in report.get("totals", {}).items():
            self.totals[k] += v

    def cumulative(self, start: str) -> list[tuple[float, int]]:
        """The export's cumulative counts at each bound (seconds; +Inf last) from `start`."""
        out, total = [], 0
        for bound, count in zip((*EXPORT_BOUNDS_US, float("inf")), self.buckets[start], strict=True):
            total += count
            out.append((bound / 1e6, total))
        return out

    def reset(self) -> None:
        """A new window (the export's counts go on)."""
        self.intended.reset()
        self.sent.reset()
        self.starts = self.late = self.missed = 0
