"""The network between the proxy and the upstream, typed: toxiproxy/lab_network.py, loaded by its
path (the compose stack's toxiproxy-init runs the same file), so the variables, their checks and
the toxics they make have one definition.

    Network(rtt_ms=20).toxics()        # Toxiproxy's latency toxics, 10 ms each way
    Network.from_env(os.environ)       # UPSTREAM_RTT_MS, UPSTREAM_JITTER_MS, UPSTREAM_BANDWIDTH_KBPS

A case's round trip is its `rtt_ms` (a dimension); the jitter and the bandwidth are a run's
settings (lab run --jitter, --bandwidth). docs/network.md says what this models and what not.
"""

from __future__ import annotations

import importlib.util
import sys

from .paths import TOXIPROXY_DIR


def _load():
    if "lab_network" not in sys.modules:
        spec = importlib.util.spec_from_file_location("lab_network", TOXIPROXY_DIR / "lab_network.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["lab_network"] = module  # before running it: its dataclass looks itself up
        spec.loader.exec_module(module)
    return sys.modules["lab_network"]


_module = _load()
Network = _module.Network
NetworkError = _module.NetworkError
VARIABLES: dict[str, str] = _module.VARIABLES
value = _module.value
apply = _module.apply
read = _module.read
version = _module.version
wait_for_api = _module.wait_for_api
proxy_names = _module.proxy_names
PROXIES_FILE = _module.PROXIES_FILE
