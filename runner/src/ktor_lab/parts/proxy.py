"""The proxy natively: the built jar, started with one case's environment on loopback."""

from __future__ import annotations

import os
from pathlib import Path

from ..cases import Case
from ..machine import java
from ..paths import PROXY_JAR
from ..processes import Service, local_url


def case_env(case: Case, upstream_url: str, port: int, **settings: str) -> dict[str, str]:
    """The proxy's environment for `case` (Case.proxy_env) on loopback; `settings` adds or
    overrides variables (e.g. ACCESS_LOG)."""
    return {
        **case.proxy_env(),
        "UPSTREAM_URL": upstream_url,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        **settings,
    }


def start(
    run_dir: Path,
    env: dict[str, str],
    java_opts: list[str] | None = None,
    jar: Path = PROXY_JAR,
    wait: bool = True,
    java_bin: str | None = None,
) -> Service:
    """Starts `java [java_opts] -jar proxy-app.jar` with `env`; waits for /health unless `wait` is false."""
    if not jar.exists():
        raise FileNotFoundError(f"{jar} is missing: build it with 'make build'")
    opts = java_opts if java_opts is not None else os.environ.get("JAVA_OPTS", "").split()
    kind = "proxy" if jar.name == PROXY_JAR.name else jar.stem
    if env.get("LEAN_BODY"):
        kind += "-" + env["LEAN_BODY"]  # the minimal proxy's two forms side by side in one run folder
    name = f"{kind}-{env.get('CLIENT_LIFETIME', 'singleton')}-{env.get('CLIENT_ENGINE', 'cio')}"
    service = Service(
        name, [java_bin or java(), *opts, "-jar", str(jar)], run_dir / f"{name}-{env['PORT']}.log", env=env
    )
    if wait:
        service.wait_http(local_url(int(env["PORT"]), "/health"), timeout=60)
    return service
