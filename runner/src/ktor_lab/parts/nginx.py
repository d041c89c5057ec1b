"""The upstream natively: the same nginx files the official image uses, rendered for loopback.

`nginx/nginx.conf` is used as is in Docker; here only its lines marked "native:" are
rewritten (pid and include paths into the run folder). `nginx/templates/*.template` are
rendered like the image's envsubst does: only the named variables are replaced. The lab CA and
the server's certificate are made once per checkout by the image's own script (`.cache/lab-tls/`,
never committed); every run's nginx serves the same locations over TLS on its `tls` port, and logs
each new connection to `connections.log` in its run folder ([connections]).
"""

from __future__ import annotations

import fcntl
import getpass
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import NGINX_DIR, REPO
from ..processes import Service, free_port, local_url

FILES_SCRIPT = NGINX_DIR / "docker-entrypoint.d" / "40-lab-files.sh"
TLS_SCRIPT = NGINX_DIR / "docker-entrypoint.d" / "30-lab-tls.sh"
TLS_DIR = REPO / ".cache" / "lab-tls"
CA_FILE = TLS_DIR / "ca.pem"

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

# (line as it stands in nginx/nginx.conf, its native form); a missing line is an error,
# so the main file and this renderer cannot drift apart silently. Workers run as the
# user running the lab, so they can read files in its private run folders.
NATIVE_LINES = (
    ("user nginx;", "user {user};" if os.geteuid() == 0 else "# user: not root, workers run as {user}"),
    ("pid /tmp/nginx-lab.pid;", "pid {run}/nginx.pid;"),
    ("include /etc/nginx/conf.d/*.conf;", "include {run}/conf.d/*.conf;"),
)


@dataclass(frozen=True)
class NginxPorts:
    http: int
    status: int
    tls: int = field(default_factory=free_port)


def render_template(text: str, values: dict[str, str]) -> str:
    """`${NAME}` and `$NAME` for the given names only, like the image's envsubst filter."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return values[name] if name in values else m.group(0)

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, text)


def write_conf(run_dir: Path, ports: NginxPorts, files_dir: Path | None = None) -> Path:
    """Writes nginx.conf and conf.d/ into `run_dir`; returns the main config's path."""
    run_dir = run_dir.resolve()
    conf_d = run_dir / "conf.d"
    conf_d.mkdir(parents=True, exist_ok=True)
    main = (NGINX_DIR / "nginx.conf").read_text()
    for docker_line, native_line in NATIVE_LINES:
        if docker_line not in main:
            raise ValueError(f"nginx/nginx.conf no longer contains {docker_line!r}; update NATIVE_LINES")
        main = main.replace(docker_line, native_line.format(run=run_dir, user=getpass.getuser()))
    (run_dir / "nginx.conf").write_text(main)
    values = env(run_dir, ports, files_dir)
    for sub in ("body", "proxy"):  # upload bodies while they are hashed
        (Path(values["LAB_TMP_DIR"]) / sub).mkdir(parents=True, exist_ok=True)
    for template in sorted((NGINX_DIR / "templates").glob("*.template")):
        (conf_d / template.name.removesuffix(".template")).write_text(
            render_template(template.read_text(), values)
        )
    return run_dir / "nginx.conf"


def shared_files_dir() -> Path:
    """Where the static files (117 MB) live natively: generated once per checkout and per content
    version (the files script's hash), then shared by every run."""
    version = hashlib.sha256(FILES_SCRIPT.read_bytes()).hexdigest()[:12]
    return REPO / ".cache" / f"lab-files-{version}"


def env(run_dir: Path, ports: NginxPorts, files_dir: Path | None = None) -> dict[str, str]:
    """The variables the templates and the files script take, for this run folder."""
    return {
        "NGINX_PORT": f"127.0.0.1:{ports.http}",
        "NGINX_TLS_PORT": f"127.0.0.1:{ports.tls}",
        "NGINX_STATUS_PORT": f"127.0.0.1:{ports.status}",
        "LAB_FILES_DIR": str((files_dir or shared_files_dir()).resolve()),
        "LAB_TMP_DIR": str((run_dir / "tmp").resolve()),
        "LAB_NJS_DIR": str((NGINX_DIR / "njs").resolve()),
        "LAB_TLS_DIR": str(TLS_DIR.resolve()),
        "LAB_LOG_DIR": str(run_dir.resolve()),
        "LAB_WORKER_USER": getpass.getuser(),
    }


def make_tls() -> Path:
    """The lab CA and the server's certificate, made by the image's own script once per checkout
    (under a lock); returns the CA file the proxy trusts (UPSTREAM_CA_FILE)."""
    TLS_DIR.mkdir(parents=True, exist_ok=True)
    with open(TLS_DIR.parent / ".lab-tls.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            ["sh", str(TLS_SCRIPT)],
            check=True,
            env={**os.environ, "LAB_TLS_DIR": str(TLS_DIR)},
            stdout=subprocess.DEVNULL,
        )
    return CA_FILE


@dataclass(frozen=True)
class Connection:
    """One line of connections.log: a new connection to the upstream, at its first request."""

    at: float  # seconds since the epoch
    scheme: str  # http or https
    protocol: str  # HTTP/1.1 or HTTP/2.0
    tls_version: str  # TLSv1.2, TLSv1.3, or "" for http
    resumed: bool  # a TLS session resumed (no full handshake)


def connections(run_dir: Path, since: float = 0.0, until: float = float("inf")) -> list[Connection]:
    """The new connections nginx logged in `run_dir` between `since` and `until` (nginx writes its
    log buffer within a second: read after the window plus that)."""
    log = run_dir / "connections.log"
    return parse_connections(log.read_text() if log.exists() else "", since, until)


def parse_connections(text: str, since: float = 0.0, until: float = float("inf")) -> list[Connection]:
    """connections.log's lines (log_format lab_connection) between `since` and `until`."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        at = float(parts[0])
        if since <= at <= until:
            tls = parts[4] if parts[4] != "-" else ""
            out.append(Connection(at, parts[2], parts[3], tls, parts[5] == "r"))
    return out


def generate_files(run_dir: Path, ports: NginxPorts, files_dir: Path | None = None) -> None:
    """Runs the image's own start-up script for the static files, with native folders, unless
    they are there already (its manifest is written last). One at a time, under a lock."""
    values = env(run_dir, ports, files_dir)
    target = Path(values["LAB_FILES_DIR"])
    target.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "manifest.json").exists():
            return
        subprocess.run(["sh", str(FILES_SCRIPT)], check=True, env=values, stdout=subprocess.DEVNULL)


def check(conf: Path) -> None:
    """`nginx -t` on the rendered config; raises with nginx's words if it refuses."""
    r = subprocess.run([NGINX, "-t", "-c", str(conf)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nginx -t refused {conf}:\n{r.stderr}")


def start(run_dir: Path, ports: NginxPorts, files_dir: Path | None = None) -> Service:
    """Renders, generates the files, checks and starts nginx in the foreground; waits until it answers."""
    conf = write_conf(run_dir, ports, files_dir)
    generate_files(run_dir, ports, files_dir)
    make_tls()
    check(conf)
    service = Service("nginx", [NGINX, "-c", str(conf), "-g", "daemon off;"], run_dir / "nginx.log")
    service.wait_http(local_url(ports.status, "/health"), timeout=15)
    return service


def start_proxy_pass(run_dir: Path, upstream_port: int, port: int) -> Service:
    """nginx `proxy_pass` to the nginx on `upstream_port` (nginx/bench/proxy-pass.conf.template),
    listening on `port`: the reference `lab bench` measures the proxy against."""
    run_dir = run_dir.resolve()
    (run_dir / "tmp" / "proxy-pass").mkdir(parents=True, exist_ok=True)
    conf = run_dir / "proxy-pass.conf"
    template = (NGINX_DIR / "bench" / "proxy-pass.conf.template").read_text()
    conf.write_text(
        render_template(
            template, {"RUN_DIR": str(run_dir), "UPSTREAM_PORT": str(upstream_port), "PORT": str(port)}
        )
    )
    check(conf)
    service = Service(
        "nginx-proxy-pass", [NGINX, "-c", str(conf), "-g", "daemon off;"], run_dir / "proxy-pass.log"
    )
    try:
        service.wait_http(local_url(port, "/files/manifest.json"), timeout=15)
    except BaseException:
        service.stop()
        raise
    return service
