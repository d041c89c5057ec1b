"""The compose stack's effective configuration, rendered without Docker.

`render` runs tools/compose-config (compose-go, the loader `docker compose` uses) on the
repository's docker-compose.yml and overlays, and returns what `docker compose config`
would: every service with its overlays merged, variables interpolated, paths resolved.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from .paths import CASES, REPO

BASE = REPO / "docker-compose.yml"
OVERLAYS = REPO / "compose"
TOOL_DIR = REPO / "tools" / "compose-config"
TOOL = TOOL_DIR / "compose-config"


class ComposeError(RuntimeError):
    """The files do not load: the message is compose-go's."""


def dotenv() -> dict[str, str]:
    """The repository's .env as compose reads it (KEY=VALUE lines; # starts a comment line)."""
    out = {}
    for line in (REPO / ".env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def overlay(name: str) -> Path:
    """compose/<name>.yml: a case (`per-call-okhttp`) or an extra (`distributed`, `headless`)."""
    return OVERLAYS / f"{name}.yml"


def case_overlays() -> dict[str, Path]:
    return {case: overlay(case) for case in CASES}


def tool() -> Path:
    """The compose-config binary, built with Go when missing or older than its sources."""
    sources = [TOOL_DIR / "main.go", TOOL_DIR / "go.mod", TOOL_DIR / "go.sum"]
    if not TOOL.exists() or TOOL.stat().st_mtime < max(s.stat().st_mtime for s in sources):
        go = shutil.which("go")
        if go is None:
            raise ComposeError("Go is needed to build tools/compose-config: install Go 1.24 or later")
        subprocess.run([go, "build", "-o", str(TOOL), "."], cwd=TOOL_DIR, check=True)
    return TOOL


def render(*overlays: str, env: dict[str, str] | None = None, inherit_env: bool = True) -> dict:
    """The effective config of docker-compose.yml plus compose/<overlay>.yml for each name, in order.

    `env` adds to (or, with `inherit_env=False`, replaces) the process environment that
    interpolation reads beside .env.
    """
    argv = [str(tool()), "-f", str(BASE)]
    for name in overlays:
        argv += ["-f", str(overlay(name))]
    base_env = dict(os.environ) if inherit_env else {"PATH": os.environ.get("PATH", "")}
    r = subprocess.run(argv, capture_output=True, text=True, env={**base_env, **(env or {})})
    if r.returncode != 0:
        raise ComposeError(r.stderr.strip())
    return json.loads(r.stdout)
