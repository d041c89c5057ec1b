"""Where the repository's parts live, found from this file (no install-time copies)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(os.environ.get("LAB_REPO", Path(__file__).resolve().parents[3]))
NGINX_DIR = REPO / "nginx"
PROXY_DIR = REPO / "proxy-app"
PROXY_JAR = PROXY_DIR / "target" / "proxy-app.jar"
# `lab bench`'s reference: the simplest Ktor proxy, with the lab's client (lean-proxy/).
LEAN_PROXY_JAR = REPO / "lean-proxy" / "target" / "lean-proxy.jar"
LOCUST_DIR = REPO / "locust"
# The network between the proxy and nginx: Toxiproxy's proxies and the toxics of the lab's values.
TOXIPROXY_DIR = REPO / "toxiproxy"
