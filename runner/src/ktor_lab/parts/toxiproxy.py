"""Toxiproxy natively: the network between the proxy and nginx, on loopback.

The server is built once from its Go module, at the version of the compose stack's image
(.env's TOXIPROXY_IMAGE), into .cache/toxiproxy-<version>/ (never committed). It runs with
toxiproxy/proxies.json rendered for loopback: each proxy listens on a free port of 127.0.0.1 and
forwards to nginx's port of the same kind (plain or TLS). The toxics come from the lab's values
(network.Network, toxiproxy/lab_network.py), set and read back through Toxiproxy's API.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..network import PROXIES_FILE, Network, apply, read, version, wait_for_api
from ..paths import REPO
from ..processes import Service, free_port, local_url
from . import compose
from .compose import dotenv

MODULE = "github.com/Shopify/toxiproxy/v2"
# nginx's ports in compose, as proxies.json names them: what each native proxy forwards to.
NGINX_PORTS = {"80": "http", "443": "tls"}


def image_version() -> str:
    """The version of .env's TOXIPROXY_IMAGE (ghcr.io/shopify/toxiproxy:2.12.0 -> 2.12.0)."""
    return dotenv()["TOXIPROXY_IMAGE"].rsplit(":", 1)[1]


def binary_dir() -> Path:
    return REPO / ".cache" / f"toxiproxy-{image_version()}"


def binary() -> Path:
    """The server (`go install`'s name for cmd/server), built on first use; RuntimeError saying
    what to install when Go is missing."""
    target = binary_dir() / "server"
    if target.exists():
        return target
    go = compose.go()
    if go is None:
        raise RuntimeError(MISSING)
    binary_dir().mkdir(parents=True, exist_ok=True)
    with open(binary_dir().parent / ".toxiproxy-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            print(
                f"lab: building Toxiproxy {image_version()} from {MODULE} into {binary_dir()} (once)",
                flush=True,
            )
            subprocess.run(
                [go, "install", f"{MODULE}/cmd/server@v{image_version()}"],
                check=True,
                env={**os.environ, "GOBIN": str(binary_dir()), "CGO_ENABLED": "0"},
                stdout=sys.stderr,
            )
    return target


MISSING = (
    "Toxiproxy is not built and no Go 1.24+ could be had (none on PATH, and the lab's pinned release "
    f"could not be downloaded): install Go 1.24 or later (the lab builds Toxiproxy from {MODULE} into "
    ".cache/ on first use)"
)


def missing_reason() -> str | None:
    """Why Toxiproxy cannot run here (None: built, or Go can build it)."""
    if (binary_dir() / "server").exists() or compose.go():
        return None
    return MISSING


def write_config(run_dir: Path, nginx_ports: dict[str, int]) -> tuple[Path, dict[str, int]]:
    """proxies.json for loopback (`nginx_ports`: `http` and `tls` to nginx's ports): the file and
    each proxy's listening port by name."""
    proxies, listening = [], {}
    for p in json.loads(PROXIES_FILE.read_text()):
        kind = NGINX_PORTS[p["upstream"].rsplit(":", 1)[1]]
        listening[p["name"]] = free_port()
        proxies.append(
            {
                **p,
                "listen": f"127.0.0.1:{listening[p['name']]}",
                "upstream": f"127.0.0.1:{nginx_ports[kind]}",
            }
        )
    path = run_dir / "toxiproxy.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(proxies, indent=2) + "\n")
    return path, listening


@dataclass
class Toxiproxy:
    """A running Toxiproxy: its API, each proxy's port, and the network it has now."""

    api: str
    ports: dict[str, int]
    service: Service
    network: Network = Network()

    def set(self, network: Network) -> dict[str, list[dict]]:
        """Its toxics made `network`'s; returns them as Toxiproxy reports them."""
        apply(self.api, network, list(self.ports))
        self.network = network
        return read(self.api, list(self.ports))

    def version(self) -> str:
        return version(self.api)

    def url(self, name: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.ports[name]}"


def start(run_dir: Path, nginx_ports: dict[str, int]) -> Toxiproxy:
    """The server with the lab's proxies on loopback (no toxics yet), once its API answers."""
    config, listening = write_config(run_dir, nginx_ports)
    api_port = free_port()
    service = Service(
        "toxiproxy",
        [str(binary()), "-host", "127.0.0.1", "-port", str(api_port), "-config", str(config)],
        run_dir / "toxiproxy.log",
        # One log line per accepted connection at info: a per-call client makes hundreds a second.
        env={"LOG_LEVEL": "warn"},
    )
    api = local_url(api_port)
    if not wait_for_api(api, 15) or not service.alive():
        service.stop()
        raise RuntimeError(f"toxiproxy did not answer {api}/version within 15 s:\n{service.tail()}")
    return Toxiproxy(api, listening, service)
