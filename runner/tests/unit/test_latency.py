"""The intended-start schedule and the latency histograms (locust/lab_latency.py), on simulated
time: what a stall does to each figure, and that workers' reports merge to what one process sees."""

from __future__ import annotations

import random

import pytest
from lab_latency import Latencies, Schedule, decode, merged, percentile_ms


def simulate(service_s, starts: int, interval: float, latencies: Latencies, seed: int = 1) -> float:
    """One user at a fixed rate on simulated time: each request takes service_s(i) seconds."""
    s, now = Schedule(random.Random(seed)), 0.0
    for i in range(starts):
        now += s.wait(now, interval)
        latencies.record(service_s(i), now - s.intended, s.late, s.skipped)
        now += service_s(i)
    return now


def test_on_time_requests_are_timed_from_their_send_and_none_is_late():
    lat = Latencies()
    simulate(lambda i: 0.002, 1000, 0.010, lat)
    assert lat.starts == 1000 and lat.late == lat.missed == 0
    assert percentile_ms(lat.intended, 99) == percentile_ms(lat.sent, 99) == pytest.approx(2.0, rel=1e-3)


def test_a_stall_is_seen_by_every_start_it_delayed_and_by_one_send():
    """A 300 ms stall every 2 s at 10 ms intervals: from the send one request in 200 is slow, so the
    service time's p99 misses it; from the intended start 15% of starts wait for it."""
    lat = Latencies()
    end = simulate(lambda i: 0.300 if i % 171 == 0 else 0.002, 5000, 0.010, lat)
    assert percentile_ms(lat.sent, 99) == pytest.approx(2.0, rel=1e-3)
    assert percentile_ms(lat.intended, 99) > 250
    assert percentile_ms(lat.intended, 50) < 10
    # Every start the schedule had, sent or not, is in the intended histogram (the closing one's
    # delay aside): the run's length over the interval.
    assert lat.intended.get_total_count() == lat.starts == pytest.approx(end / 0.010, rel=0.01)
    assert lat.sent.get_total_count() == 5000
    assert lat.missed == lat.starts - 5000 and lat.late == lat.missed + (5000 + 170) // 171


def test_three_digits_from_microseconds_to_an_hour():
    lat = Latencies()
    for v in (0.000_123, 0.004_567, 12.345, 3600.0):
        lat.record(v)
    got = [lat.sent.get_value_at_percentile(p) for p in (1, 50, 75, 100)]
    for value, want in zip(got, (123, 4567, 12_345_000, 3_600_000_000), strict=True):
        assert abs(value - want) / want < 1e-3


def test_workers_reports_merge_to_what_one_process_sees():
    one, master = Latencies(), Latencies()
    workers = [Latencies() for _ in range(3)]
    rng = random.Random(7)
    sent = []
    for _ in range(3000):
        service, delay = rng.expovariate(300), rng.expovariate(100)
        sent.append(service)
        one.record(service, delay, delay > 0.02)
        rng.choice(workers).record(service, delay, delay > 0.02)
    for w in workers:
        master.add(w.report())
    assert master.window() == one.window()
    assert master.cumulative("intended") == one.cumulative("intended") and master.sums == one.sums
    assert master.totals == one.totals and master.totals["all"] == 3000
    assert all(w.starts == 0 and w.totals["all"] == 0 and not any(w.buckets["sent"]) for w in workers)
    master.reset()
    assert master.starts == 0 and master.cumulative("intended")[-1] == (float("inf"), 3000)
    # The export's buckets count exactly the requests at or under each bound.
    for bound_s, count in one.cumulative("sent")[:-1]:
        assert count == sum(1 for v in sent if round(v * 1e6) <= round(bound_s * 1e6)), bound_s


def test_merged_adds_encoded_windows_and_skips_empty_ones():
    a, b = Latencies(), Latencies()
    a.record(0.001)
    b.record(0.100)
    both = merged([a.window()["latency_sent"], "", None, b.window()["latency_sent"]])
    assert both.get_total_count() == 2 and percentile_ms(both, 100) == pytest.approx(100, rel=1e-3)
    assert merged(["", None]) is None
    assert decode(a.window()["latency_sent"]).get_total_count() == 1


def test_a_percentile_is_hdrh_s_own_for_live_and_decoded_histograms():
    """percentile_ms reads what hdrh's get_value_at_percentile does (its own walk over the counts),
    at every percentile a report asks for and at the ends, on a live histogram and on one decoded
    from a window's text (whose counts may stop short of the array's end)."""
    rng = random.Random(3)
    for n in (1, 7, 2000):
        lat = Latencies()
        for _ in range(n):
            lat.record(rng.lognormvariate(-6, 1.5))
        for h in (lat.sent, decode(lat.window()["latency_sent"])):
            for p in (0, 1, 50, 90, 99, 99.9, 99.99, 100):
                assert percentile_ms(h, p) == h.get_value_at_percentile(p) / 1000.0, (n, p)
        both = merged([lat.window()["latency_sent"], lat.window()["latency_intended"]])
        for p in (0, 50, 99.9, 100):
            assert percentile_ms(both, p) == both.get_value_at_percentile(p) / 1000.0, (n, p)
        lat.record(1.0)  # a live histogram read again after it changed
        assert percentile_ms(lat.sent, 100) == lat.sent.get_value_at_percentile(100) / 1000.0 >= 999
        lat.sent.reset()  # and after a reset, as many values again
        for _ in range(n + 1):
            lat.record(0.070)
        assert percentile_ms(lat.sent, 100) == lat.sent.get_value_at_percentile(100) / 1000.0 < 71
