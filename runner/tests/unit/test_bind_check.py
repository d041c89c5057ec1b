"""nginx/docker-entrypoint.d/05-lab-bind.sh, the compose stack's bind check, run by sh as the nginx
image runs it: a LAB_BIND off loopback stops the stack unless compose/lan.yml set LAB_LOGINS=on."""

from __future__ import annotations

import subprocess

import pytest

from ktor_lab.paths import REPO

HOOK = REPO / "nginx" / "docker-entrypoint.d" / "05-lab-bind.sh"


def check(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(HOOK)], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True
    )


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.2", "::1", "localhost", None])
def test_loopback_passes(bind):
    r = check(**({"LAB_BIND": bind} if bind else {}))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.168.1.20", "::"])
def test_any_other_address_stops_in_one_line_naming_the_overlay(bind):
    r = check(LAB_BIND=bind, LAB_LOGINS="off")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"lab: LAB_BIND={bind} is not a loopback address: add -f compose/lan.yml")
    assert "LAB_PASSWORD" in r.stderr
    assert check(LAB_BIND=bind, LAB_LOGINS="on").returncode == 0
