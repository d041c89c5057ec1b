"""The network between the proxy and the upstream, typed: toxiproxy/lab_network.py (installed
beside this package, `pip install -e toxiproxy`; the compose stack's toxiproxy-init runs the same
file), so the variables, their checks and the toxics they make have one definition.

    Network(rtt_ms=20).toxics()        # Toxiproxy's latency toxics, 10 ms each way
    Network.from_env(os.environ)       # UPSTREAM_RTT_MS, UPSTREAM_JITTER_MS, UPSTREAM_BANDWIDTH_KBPS

A case's round trip is its `rtt_ms` (a dimension); the jitter and the bandwidth are a run's
settings (lab run --jitter, --bandwidth). docs/network.md says what this models and what not.
"""

from __future__ import annotations

from lab_network import (  # noqa: F401  (this module is their name in the runner)
    PROXIES_FILE,
    VARIABLES,
    Network,
    NetworkError,
    apply,
    proxy_names,
    read,
    value,
    version,
    wait_for_api,
)
