"""`lab bench`'s summary of its rounds, from rounds made here."""

from __future__ import annotations

import pytest

from ktor_lab.cases import Case


def test_rounds_give_medians_and_the_ratio_to_the_minimal_proxy_within_each_round():
    from ktor_lab.commands.bench import summarize

    def run(n, target, rps, cpu):
        return dict(
            round=n, target=target, rps=rps, p50_us=1000, p99_us=5000, requests=rps * 10, errors=0,
            warmup_s=30, warmup_settled=True, cpu_ms_per_request=cpu,
        )  # fmt: skip

    rounds = []
    # The machine drifts between rounds (round 2 is 50% dearer for everything): the ratio within
    # a round stays 1.10, the ratio of the medians would not.
    for n, drift in ((1, 1.0), (2, 1.5), (3, 1.0)):
        rounds += [
            run(n, "nginx proxy_pass", 40000, None),
            run(n, "singleton-cio", 2000, 0.66 * drift),
            run(n, "lean cio", 2100, 0.60 * drift),
            run(n, "lean streamed cio", 2050, 0.55 * drift),
        ]
    third = next(r for r in rounds if (r["round"], r["target"]) == (3, "singleton-cio"))
    third["cpu_ms_per_request"] = 0.72  # round 3: 1.20 against lean
    rows = {r["target"]: r for r in summarize(rounds, [Case.parse("singleton-cio")])}
    cio = rows["singleton-cio"]
    assert cio["rounds"] == 3 and cio["requests"] == 60000 and cio["rps"] == 2000
    assert cio["cpu_to_lean_rounds"] == [1.1, 1.1, 1.2]
    assert cio["cpu_to_lean"] == pytest.approx(1.1)
    assert cio["cpu_ms_per_request"] == pytest.approx(0.72)  # median of 0.66, 0.99, 0.72
    assert cio["cpu_to_lean_streamed_rounds"] == [1.2, 1.2, 1.309]
    assert cio["cpu_to_lean_streamed"] == pytest.approx(1.2)
    assert rows["lean cio"]["cpu_to_lean"] is None and rows["nginx proxy_pass"]["ratio_to_proxy_pass"] == 1.0
    assert rows["lean streamed cio"]["cpu_to_lean_streamed"] is None
