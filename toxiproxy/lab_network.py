"""The network between the proxy and nginx: Toxiproxy's toxics from three named values.

One definition for both sides. In compose the one-shot `toxiproxy-init` service runs this file
(`python /lab-network/lab_network.py`) with the values from the shell or .env; natively the runner
imports it (runner/src/ktor_lab/network.py; installed beside it by toxiproxy/pyproject.toml). Standard library only: the Locust image's
Python runs it.

    UPSTREAM_RTT_MS=20 TOXIPROXY_URL=http://127.0.0.1:8474 python toxiproxy/lab_network.py

| variable | what | default |
| --- | --- | --- |
| UPSTREAM_RTT_MS | round trip added between the proxy and nginx: half of it on the way there, half back | 0 |
| UPSTREAM_JITTER_MS | each round trip varies by up to +- this (half of it each way), at most the RTT | 0 |
| UPSTREAM_BANDWIDTH_KBPS | KB/s (1 KB = 1000 bytes) per connection, each way; 0: not limited | 0 |

Toxiproxy's latency toxic delays each chunk of data it relays; Toxiproxy counts whole
milliseconds, so an odd RTT puts the extra millisecond on the way there (1 ms: 1 there, 0 back).
Every proxy of proxies.json (nginx's plain and TLS ports) gets the same toxics. All three at 0
is no network at all: the proxy then calls nginx directly, as before the network existed.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROXIES_FILE = HERE / "proxies.json"
# Toxic names the lab owns (a reset removes every toxic first).
PREFIX = "lab_"
RTT_MAX_MS = 10_000
BANDWIDTH_MAX_KBPS = 10_000_000

# Each variable and what it accepts: the text of its error, and the docs' table.
VARIABLES = {
    "UPSTREAM_RTT_MS": f"whole milliseconds from 0 to {RTT_MAX_MS}",
    "UPSTREAM_JITTER_MS": "whole milliseconds from 0 to UPSTREAM_RTT_MS",
    "UPSTREAM_BANDWIDTH_KBPS": f"KB/s from 0 (not limited) to {BANDWIDTH_MAX_KBPS}",
}


class NetworkError(ValueError):
    """A value the network cannot take: one line naming the variable and what it accepts."""


HIGHEST = {
    "UPSTREAM_RTT_MS": RTT_MAX_MS,
    "UPSTREAM_JITTER_MS": RTT_MAX_MS,
    "UPSTREAM_BANDWIDTH_KBPS": BANDWIDTH_MAX_KBPS,
}


def value(name: str, text: object) -> int:
    """One variable's value (blank: 0); NetworkError naming it when it is not one it accepts."""
    stripped = str(text).strip()
    if not stripped:
        return 0
    if stripped.isdigit() and int(stripped) <= HIGHEST[name]:
        return int(stripped)
    raise NetworkError(f"{name}='{text}' is not valid; valid values: {VARIABLES[name]}")


@dataclass(frozen=True)
class Network:
    """What lies between the proxy and nginx. All zero: nothing (the proxy calls nginx directly)."""

    rtt_ms: int = 0
    jitter_ms: int = 0
    bandwidth_kbps: int = 0

    def __post_init__(self) -> None:
        for name, given in zip(HIGHEST, (self.rtt_ms, self.jitter_ms, self.bandwidth_kbps), strict=True):
            if not isinstance(given, int) or isinstance(given, bool) or value(name, given) != given:
                raise NetworkError(f"{name}='{given}' is not valid; valid values: {VARIABLES[name]}")
        if self.jitter_ms > self.rtt_ms:
            raise NetworkError(
                f"UPSTREAM_JITTER_MS={self.jitter_ms} is more than UPSTREAM_RTT_MS={self.rtt_ms}: each round "
                "trip varies by up to +- the jitter, which cannot exceed the round trip; lower "
                "UPSTREAM_JITTER_MS or raise UPSTREAM_RTT_MS"
            )

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Network:
        """From the variables (unset or blank: 0); NetworkError naming the first bad one."""
        return cls(*(value(name, env.get(name) or "") for name in HIGHEST))

    @property
    def on(self) -> bool:
        return bool(self.rtt_ms or self.jitter_ms or self.bandwidth_kbps)

    def env(self) -> dict[str, str]:
        return {
            "UPSTREAM_RTT_MS": str(self.rtt_ms),
            "UPSTREAM_JITTER_MS": str(self.jitter_ms),
            "UPSTREAM_BANDWIDTH_KBPS": str(self.bandwidth_kbps),
        }

    def toxics(self) -> list[dict]:
        """Toxiproxy's toxics for one proxy: latency each way (the odd millisecond on the way
        there), bandwidth each way; none for a value of 0."""
        out = []
        there, back = self.rtt_ms - self.rtt_ms // 2, self.rtt_ms // 2
        jitter_there, jitter_back = self.jitter_ms - self.jitter_ms // 2, self.jitter_ms // 2
        for stream, latency, jitter in (("upstream", there, jitter_there), ("downstream", back, jitter_back)):
            if latency or jitter:
                out.append(_toxic(f"latency_{stream}", "latency", stream, latency=latency, jitter=jitter))
        if self.bandwidth_kbps:
            for stream in ("upstream", "downstream"):
                out.append(_toxic(f"bandwidth_{stream}", "bandwidth", stream, rate=self.bandwidth_kbps))
        return out

    def describe(self) -> str:
        """`RTT 20 ms +-2 ms, 1,000 KB/s per connection each way`, or `none`."""
        if not self.on:
            return "none"
        parts = [f"RTT {self.rtt_ms} ms" + (f" +-{self.jitter_ms} ms" if self.jitter_ms else "")]
        if self.bandwidth_kbps:
            parts.append(f"{self.bandwidth_kbps:,} KB/s per connection each way")
        return ", ".join(parts)


def _toxic(name: str, kind: str, stream: str, **attributes: int) -> dict:
    return {"name": PREFIX + name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}


def proxy_names(path: Path = PROXIES_FILE) -> list[str]:
    return [p["name"] for p in json.loads(path.read_text())]


def _call(api: str, method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        api.rstrip("/") + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as r:
        text = r.read()
    return json.loads(text) if text.strip() else None


def apply(api: str, network: Network, proxies: list[str] | None = None) -> None:
    """Every toxic of Toxiproxy at `api` removed (`/reset`), then `network`'s on each proxy."""
    _call(api, "POST", "/reset")
    for proxy in proxies or proxy_names():
        for toxic in network.toxics():
            _call(api, "POST", f"/proxies/{proxy}/toxics", toxic)


def read(api: str, proxies: list[str] | None = None) -> dict[str, list[dict]]:
    """The toxics Toxiproxy has on each proxy, as it reports them."""
    return {p: _call(api, "GET", f"/proxies/{p}/toxics") for p in proxies or proxy_names()}


def version(api: str) -> str:
    """Toxiproxy's own version (`git` for a build from source without a tag)."""
    with urllib.request.urlopen(api.rstrip("/") + "/version", timeout=5) as r:
        text = r.read().decode().strip()
    try:
        return str(json.loads(text).get("version", text))
    except (ValueError, AttributeError):
        return text


def wait_for_api(api: str, seconds: float) -> bool:
    """True once Toxiproxy's API answers (bounded: `seconds`)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            version(api)
            return True
        except (OSError, urllib.error.URLError):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


def main() -> int:
    """Compose's toxiproxy-init: the toxics from the variables; exit 2 on a bad value, 1 when
    Toxiproxy does not answer."""
    try:
        network = Network.from_env(dict(os.environ))
    except NetworkError as e:
        print(f"network: configuration error: {e}", file=sys.stderr)
        return 2
    api = os.environ.get("TOXIPROXY_URL", "http://toxiproxy:8474")
    if not wait_for_api(api, 30):
        print(f"network: Toxiproxy's API does not answer at {api}", file=sys.stderr)
        return 1
    apply(api, network)
    print(f"network: {network.describe()} between the proxy and nginx ({', '.join(proxy_names())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
