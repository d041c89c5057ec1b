"""Where the repository's parts live, found from this file (no install-time copies)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(os.environ.get("LAB_REPO", Path(__file__).resolve().parents[3]))
NGINX_DIR = REPO / "nginx"
PROXY_DIR = REPO / "proxy-app"
PROXY_JAR = PROXY_DIR / "target" / "proxy-app.jar"
# Each Maven module (its artifactId) -> its folder in the repository, as ./pom.xml's <modules> and
# Maven's -pl name it: the benchmark-only modules stand together in bench/, apart from the lab's
# running parts.
BENCH_DIR = REPO / "bench"
MODULE_FOLDERS = {
    "proxy-app": "proxy-app",
    "plain-client": "bench/plain-client",
    "engine-bench": "bench/engine-bench",
    "lean-proxy": "bench/lean-proxy",
    "io-bench": "bench/io-bench",
}
# `lab bench`'s reference: the simplest Ktor proxy, with the lab's client (bench/lean-proxy/).
LEAN_PROXY_JAR = REPO / MODULE_FOLDERS["lean-proxy"] / "target" / "lean-proxy.jar"
LOCUST_DIR = REPO / "locust"
# The network between the proxy and nginx: Toxiproxy's proxies and the toxics of the lab's values.
TOXIPROXY_DIR = REPO / "toxiproxy"
