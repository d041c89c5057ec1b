"""Reading figures: a process's Prometheus text (`/metrics`) and a Prometheus server's queries.

One parser for every `/metrics` the lab reads (the proxy's, Locust's export, the exporter's),
and one client for Prometheus' query API.
"""

from __future__ import annotations

import math
from datetime import datetime

import requests
from prometheus_client.parser import text_string_to_metric_families


class Samples:
    """The samples of one scrape."""

    def __init__(self, text: str):
        self.samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def matching(self, name: str, /, **labels: str) -> list:
        return [
            s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def sum(self, name: str, /, **labels: str) -> float:
        """Sum of the samples called `name` whose labels include `labels` (0 when none)."""
        return sum(s.value for s in self.matching(name, **labels))

    def get(self, name: str, /, **labels: str) -> float | None:
        """Like `sum`, but None when no sample matches."""
        found = self.matching(name, **labels)
        return sum(s.value for s in found) if found else None

    def labels(self, name: str) -> dict[str, str]:
        """The labels of the first sample called `name` (an info metric's settings); {} when none."""
        return next((dict(s.labels) for s in self.samples if s.name == name), {})

    def label_values(self, name: str, label: str) -> set[str]:
        return {s.labels[label] for s in self.samples if s.name == name and label in s.labels}

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """The samples called `name`, by the value of their `label` (e.g. Locust's CPU per node)."""
        return {s.labels[label]: s.value for s in self.samples if s.name == name and label in s.labels}


def scrape(base_url: str, timeout: float = 30) -> Samples:
    """`base_url`/metrics, parsed."""
    return Samples(requests.get(f"{base_url}/metrics", timeout=timeout).text)


def query(
    prometheus_url: str, expr: str, at: float | None = None, auth: tuple[str, str] | None = None
) -> list[dict]:
    """An instant query's result vector (at `at`, else now); RuntimeError naming the query if refused.
    `auth`: (user, password) for a Prometheus behind a login (the swarm stack's gate)."""
    params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
    r = requests.get(f"{prometheus_url}/api/v1/query", params=params, timeout=10, auth=auth)
    if r.status_code == 401:
        raise RuntimeError(f"Prometheus at {prometheus_url} asks for a login ({expr!r})")
    body = r.json()
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {expr!r}: {body.get('error')}")
    return body["data"]["result"]


def scalar(
    prometheus_url: str, expr: str, at: float | None = None, auth: tuple[str, str] | None = None
) -> float | None:
    """The first value of a query's result; None when empty or not a finite number."""
    result = query(prometheus_url, expr, at, auth)
    if not result:
        return None
    v = float(result[0]["value"][1])
    return v if math.isfinite(v) else None


def scraped_since(
    prometheus_url: str, instance: str, since: float, auth: tuple[str, str] | None = None
) -> bool:
    """True once Prometheus has scraped `instance` (host:port) successfully after `since` (seconds
    since the epoch): a target it was just told of is in its view."""
    try:
        r = requests.get(f"{prometheus_url}/api/v1/targets", params={"state": "active"}, timeout=5, auth=auth)
        r.raise_for_status()
        targets = r.json()["data"]["activeTargets"]
    except (requests.RequestException, ValueError, KeyError):
        return False
    for t in targets:
        if t.get("labels", {}).get("instance") == instance and t.get("health") == "up":
            last = datetime.fromisoformat(t["lastScrape"].replace("Z", "+00:00"))
            if last.timestamp() > since:
                return True
    return False


def buckets(samples: Samples, name: str, /, **labels: str) -> dict[float, float]:
    """A histogram's cumulative counts by upper bound (`le`), summed over its other labels."""
    out: dict[float, float] = {}
    for s in samples.matching(f"{name}_bucket", **labels):
        le = float(s.labels["le"])
        out[le] = out.get(le, 0.0) + s.value
    return out


def delta(before: dict[float, float], after: dict[float, float]) -> dict[float, float]:
    """The observations between two scrapes of one histogram, bucket by bucket."""
    return {le: count - before.get(le, 0.0) for le, count in after.items()}


def own_counts(cumulative: dict[float, float]) -> dict[str, float]:
    """A histogram as results.json keeps it: each bucket that holds an observation, by its upper bound
    (`repr`: "0.005", "inf"), with its own count, and the bound below it (0 where that bucket is
    empty), so that `quantile` of `cumulative_of` it is the histogram's, and summing two such is
    merging their histograms."""
    bounds = sorted(cumulative)
    out: dict[str, float] = {}
    below = 0.0
    for i, le in enumerate(bounds):
        if (n := cumulative[le] - below) > 0:
            if i:
                out.setdefault(repr(bounds[i - 1]), 0.0)
            out[repr(le)] = n
        below = cumulative[le]
    return out


def cumulative_of(*histograms: dict[str, float]) -> dict[float, float]:
    """`own_counts` histograms summed (one JVM's windows merged), as cumulative counts by bound."""
    own: dict[float, float] = {}
    for h in histograms:
        for le, n in h.items():
            own[float(le)] = own.get(float(le), 0.0) + n
    out, total = {}, 0.0
    for le in sorted(own):
        total += own[le]
        out[le] = total
    return out


def quantile(histogram: dict[float, float], q: float) -> float | None:
    """Prometheus' histogram_quantile: the bucket holding the q-th observation, linearly within
    it; None without observations. A quantile in the +Inf bucket is the highest finite bound."""
    bounds = sorted(histogram)
    if not bounds or histogram[bounds[-1]] <= 0:
        return None
    rank = q * histogram[bounds[-1]]
    lower_bound, lower_count = 0.0, 0.0
    for le in bounds:
        count = histogram[le]
        if count >= rank:
            if math.isinf(le):
                return lower_bound
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return bounds[-1]
