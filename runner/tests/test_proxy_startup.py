"""The proxy jar at start: bad environment values stop it with a message; the settings are printed."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
import requests

from conftest import wait_until
from ktor_lab.cases import Case
from ktor_lab.machine import java
from ktor_lab.parts import proxy
from ktor_lab.paths import PROXY_JAR
from ktor_lab.processes import free_port


def run_with(env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {"HOST": "127.0.0.1", "PORT": str(free_port()), "UPSTREAM_URL": "http://127.0.0.1:9"}
    return subprocess.run(
        [java(), "-jar", str(PROXY_JAR)],
        env={**os.environ, **base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "name,value,valid",
    [
        ("CLIENT_ENGINE", "netty", "cio, apache, apache5, okhttp, java"),
        ("CLIENT_LIFETIME", "pooled", "singleton, per-call"),
        ("UPSTREAM_URL", "ftp://nginx", "http://"),
        ("PORT", "eighty", "1 to 65535"),
        ("CLIENT_MAX_CONNECTIONS", "0", "1 to 100000"),
        ("CLIENT_CONNECT_TIMEOUT_MS", "-1", "1 to 3600000"),
        ("CLIENT_REQUEST_TIMEOUT_MS", "soon", "1 to 3600000"),
        ("ACCESS_LOG", "maybe", "on, off"),
        ("UPSTREAM_URL", "http://127.0.0.1:99999", "a port from 1 to 65535"),
        ("UPSTREAM_URL", "http://127.0.0.1:0", "a port from 1 to 65535"),
        ("CLIENT_RETRY_ON_STALE", "sometimes", "on, off, engine"),
        ("SERVER_HEADER_TIMEOUT_MS", "1", "100 to 3600000"),
        ("UPSTREAM_RTT_MS", "20ms", "whole milliseconds from 0 to 10000"),
        ("UPSTREAM_BANDWIDTH_KBPS", "lots", "KB/s from 0 (not limited)"),
        ("CLIENT_PIPELINING", "yes", "on, off"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.isupper() else None,
)
def test_bad_value_stops_the_proxy_with_a_message(name, value, valid):
    r = run_with({name: value})
    assert r.returncode == 2
    assert f"{name}='{value}' is not valid" in r.stderr
    assert valid in r.stderr


def test_effective_settings_are_printed_and_the_access_log_switches_on(tmp_path, upstream):
    port = free_port()
    service = proxy.start(
        tmp_path,
        proxy.case_env(
            Case.parse("singleton-okhttp"), upstream.url, port, ACCESS_LOG="on", CLIENT_MAX_CONNECTIONS="77"
        ),
    )
    try:
        requests.get(f"http://127.0.0.1:{port}/files/tiny.txt", timeout=5)
        # The access log line is written after the response is sent.
        wait_until(lambda: "/files/tiny.txt" in service.tail(100), timeout=5)
        log = service.tail(100)
    finally:
        service.stop()
    assert "case=singleton-okhttp" in log
    assert "dispatcher_max_requests_per_host=77" in log
    assert "pool_max_idle=77" in log
    assert "/files/tiny.txt" in log  # the access log line


def test_access_log_is_off_by_default(tmp_path, upstream):
    port = free_port()
    service = proxy.start(tmp_path, proxy.case_env(Case.parse("singleton-cio"), upstream.url, port))
    try:
        requests.get(f"http://127.0.0.1:{port}/files/tiny.txt", timeout=5)
        # Give a (wrongly) enabled access log the time it would need to write its line.
        logged = wait_until(lambda: "/files/tiny.txt" in service.tail(100), timeout=2)
    finally:
        service.stop()
    assert not logged


def test_a_busy_port_stops_the_proxy_with_one_line_naming_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = run_with({"PORT": str(busy.getsockname()[1])})
    assert r.returncode == 2
    assert "the port is in use; set PORT to a free port" in r.stderr
    assert "\tat " not in r.stderr and "Exception" not in r.stderr, r.stderr


@pytest.mark.parametrize("host", ["999.1.1.1", "203.0.113.7"], ids=["not-an-address", "not-this-machine"])
def test_a_bad_host_stops_the_proxy_with_one_line_naming_host(host):
    r = run_with({"HOST": host})
    assert r.returncode == 2
    assert "set HOST to" in r.stderr, r.stderr
    assert "\tat " not in r.stderr, r.stderr
