"""Where the repository's parts live, found from this file (no install-time copies)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(os.environ.get("LAB_REPO", Path(__file__).resolve().parents[3]))
NGINX_DIR = REPO / "nginx"
PROXY_DIR = REPO / "proxy-app"
PROXY_JAR = PROXY_DIR / "target" / "proxy-app.jar"
LOCUST_DIR = REPO / "locust"

ENGINES = ("cio", "apache", "apache5", "okhttp", "java")
LIFETIMES = ("singleton", "per-call")
CASES = tuple(f"{lifetime}-{engine}" for lifetime in LIFETIMES for engine in ENGINES)
# The locustfile's --scenario values (a test keeps them equal).
SCENARIOS = ("static-small", "static-large", "upload", "slow", "mix")


def split_case(case: str) -> tuple[str, str]:
    """`per-call-okhttp` -> (`per-call`, `okhttp`); ValueError naming the valid cases otherwise."""
    for lifetime in LIFETIMES:
        engine = case.removeprefix(lifetime + "-")
        if engine != case and engine in ENGINES:
            return lifetime, engine
    raise ValueError(f"unknown case {case!r}; valid cases: {', '.join(CASES)}")
