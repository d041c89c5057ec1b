"""Every variable the proxy reads reaches its container when set in the shell: docker-compose.yml
(and the https and network overlays for theirs), rendered by tools/compose-config (compose-go,
the loader of `docker compose`), with each variable set to a value of its own."""

from __future__ import annotations

import re
import subprocess

import pytest

from ktor_lab.parts import compose
from ktor_lab.paths import REPO

PROXY_CONFIG = REPO / "proxy-app" / "src" / "main" / "kotlin" / "lab" / "proxy" / "config" / "ProxyConfig.kt"

# What the stack sets itself, whatever the shell says: the case (its overlay), where nginx is
# (compose/https.yml: over TLS, trusting the CA in the lab-tls volume), and the proxy's own
# address and port (its healthcheck and published port).
STACK = ("CLIENT_ENGINE", "CLIENT_LIFETIME", "UPSTREAM_URL", "UPSTREAM_CA_FILE", "HOST", "PORT")
# Passed from the shell by an overlay, not by the base: the HTTP and TLS versions mean something
# over TLS only, and the network's values name what Toxiproxy applies.
OVERLAY_VARIABLES = {
    "https": ("CLIENT_HTTP_VERSION", "CLIENT_TLS_VERSION"),
    "network": ("UPSTREAM_RTT_MS", "UPSTREAM_JITTER_MS", "UPSTREAM_BANDWIDTH_KBPS"),
}
# The container's own, beside ProxyConfig's: the JVM's options and the open-files limit.
CONTAINER = {"PROXY_JAVA_OPTS": "JAVA_OPTS", "PROXY_NOFILE": "PROXY_NOFILE"}


def proxy_variables() -> list[str]:
    """The names ProxyConfig.VARIABLES lists: its ALL list, each entry's declared name."""
    text = PROXY_CONFIG.read_text()
    declared = dict(re.findall(r'\bval (\w+) = \w+\(\s*"(\w+)"', text))
    listed = re.search(r"val ALL: List<Variable<\*>> = listOf\(([^)]*)\)", text)
    assert listed, "ProxyConfig.kt: no `val ALL: List<Variable<*>> = listOf(...)`"
    names = [declared[v] for v in re.findall(r"\w+", listed[1])]
    assert len(names) >= 20 and len(set(names)) == len(names), names
    return names


def value(name: str) -> str:
    return f"value-of-{name}"


@pytest.fixture(scope="module")
def render():
    """compose.merged_config with only .env and the given variables; skipped when the tool cannot be
    built (it needs Go 1.24+: the machine's, or tools/fetch-go.py's)."""
    try:
        compose.tool()
    except (compose.ComposeError, subprocess.CalledProcessError, OSError) as e:
        pytest.skip(f"tools/compose-config cannot be built here: {e}")

    def proxy_env(*overlays: str, **env: str) -> dict[str, str]:
        merged = compose.merged_config(*overlays, env=env, inherit_env=False)
        return merged["services"]["proxy"]["environment"]

    return proxy_env


def test_the_lists_here_name_only_variables_the_proxy_reads():
    names = set(proxy_variables())
    overlay_variables = {v for vs in OVERLAY_VARIABLES.values() for v in vs}
    assert set(STACK) <= names and overlay_variables <= names


def test_every_variable_set_in_the_shell_reaches_the_proxy_with_its_overlays(render):
    names = proxy_variables()
    shell = {n: value(n) for n in [*names, *CONTAINER]}
    env = render("per-call-okhttp", *OVERLAY_VARIABLES, **shell)
    missing = [n for n in names if n not in STACK and env.get(n) != value(n)]
    assert not missing, f"set in the shell, not passed to the proxy: {missing}"
    for outside, inside in CONTAINER.items():
        assert env[inside] == value(outside)
    # The stack's own stay the stack's.
    assert {n: env[n] for n in STACK} == {
        "CLIENT_ENGINE": "okhttp",
        "CLIENT_LIFETIME": "per-call",
        "UPSTREAM_URL": "https://nginx:443",
        "UPSTREAM_CA_FILE": "/lab-tls/ca.pem",
        "HOST": "0.0.0.0",
        "PORT": "8080",
    }


def test_the_base_passes_every_variable_but_the_stack_s_and_the_overlays_and_the_backend_knows_them(render):
    """What the base takes from the shell is exactly compose.PROXY_VARIABLES, which `lab run
    --backend compose --set` accepts; a variable added to ProxyConfig.kt fails here until the
    base (or an overlay, named above) passes it."""
    names = proxy_variables()
    shell = {n: value(n) for n in [*names, *CONTAINER]}
    env = render(**shell)
    passed = {n for n in names if env.get(n) == value(n)}
    overlay_variables = {v for vs in OVERLAY_VARIABLES.values() for v in vs}
    assert passed == set(names) - set(STACK) - overlay_variables
    assert not overlay_variables & set(env), "an overlay's variable is in the base"
    assert set(compose.PROXY_VARIABLES) == passed | set(CONTAINER)
    # Unset in the shell, each is the proxy's own default or .env's.
    defaults = render()
    assert {n: defaults[n] for n in STACK if n != "UPSTREAM_CA_FILE"} == {
        "CLIENT_ENGINE": "cio",
        "CLIENT_LIFETIME": "singleton",
        "UPSTREAM_URL": "http://nginx:80",
        "HOST": "0.0.0.0",
        "PORT": "8080",
    }
    assert all(defaults[n] for n in passed), defaults
