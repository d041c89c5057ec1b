"""TLS and HTTP/2 between the proxy and nginx, with real nginx (TLS 1.2 and 1.3, h2 by ALPN) and
the lab CA made at its first start: each engine speaks what it is asked through its own knobs,
trusts nothing but the lab CA, refuses at start what it cannot do, and says what was negotiated.
nginx's own log of new connections is the witness."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import time

import pytest
import requests

from conftest import sha256_of_stream
from ktor_lab import versions
from ktor_lab.cases import ENGINES, HTTP1_ONLY, Case
from ktor_lab.machine import java
from ktor_lab.parts import nginx
from ktor_lab.processes import free_port


def tls_env(upstream, version: str = "1.1", **more: str) -> dict[str, str]:
    return {
        "UPSTREAM_CA_FILE": str(nginx.CA_FILE),
        "CLIENT_HTTP_VERSION": version,
        **more,
    }


def negotiated(proxy) -> tuple[str, str, str]:
    info = proxy.metrics().labels("lab_proxy_info")
    return info["scheme"], info["negotiated_http_version"], info["negotiated_tls_version"]


def logged_since(upstream, since: float) -> list[nginx.Connection]:
    """nginx's new connections since `since`, once its log buffer (1 s) is written."""
    time.sleep(1.2)
    return nginx.connections(upstream.run_dir, since)


@pytest.mark.parametrize("engine", [e for e in ENGINES if e not in HTTP1_ONLY])  # those that speak h2
def test_http2_over_tls_13_through_each_engine_that_speaks_it(engine, upstream, start_proxy):
    since = time.time()
    with start_proxy(f"singleton-{engine}", upstream.tls_url, **tls_env(upstream, "2")) as p:
        for _ in range(5):
            assert requests.get(f"{p.url}/files/tiny.txt", timeout=10).text == "Success!\n"
        want = upstream.manifest()["1m.bin"]
        with requests.get(f"{p.url}/files/1m.bin", stream=True, timeout=30) as r:
            assert sha256_of_stream(r) == (want["bytes"], want["sha256"])
        sink = requests.put(f"{p.url}/upload", data=b"x" * 300_000, timeout=30).json()
        assert sink["bytes"] == 300_000
        assert negotiated(p) == ("https", "HTTP/2.0", "TLSv1.3")
        assert p.metric("lab_upstream_requests_seconds_count", protocol="HTTP/2.0") >= 7
        assert p.metric("lab_upstream_requests_seconds_count", protocol="HTTP/1.1") == 0
        assert p.metric("lab_upstream_tls_handshakes_total", tls_version="TLSv1.3", alpn="h2") >= 1
    conns = logged_since(upstream, since)
    assert conns and {(c.scheme, c.protocol, c.tls_version) for c in conns} == {
        ("https", "HTTP/2.0", "TLSv1.3")
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_https_11_through_every_engine_with_the_tls_it_can(engine, upstream, start_proxy):
    since = time.time()
    with start_proxy(f"singleton-{engine}", upstream.tls_url, **tls_env(upstream)) as p:
        for _ in range(5):
            assert requests.get(f"{p.url}/files/tiny.txt", timeout=10).text == "Success!\n"
        tls = "TLSv1.2" if engine == "cio" else "TLSv1.3"  # CIO's own TLS stops at 1.2
        assert negotiated(p) == ("https", "HTTP/1.1", tls)
    conns = logged_since(upstream, since)
    assert {(c.protocol, c.tls_version) for c in conns} == {("HTTP/1.1", tls)}
    # CIO opens a connection per request (no pipelining), each a full handshake (it never resumes)
    if engine == "cio":
        assert len(conns) >= 5 and not any(c.resumed for c in conns)
    else:
        assert len(conns) == 1  # one pooled connection


def test_per_call_clients_share_one_tls_context_and_resume_sessions(upstream, start_proxy):
    since = time.time()
    with start_proxy("per-call-okhttp", upstream.tls_url, **tls_env(upstream)) as p:
        for _ in range(10):
            assert requests.get(f"{p.url}/files/tiny.txt", timeout=10).status_code == 200
        full = p.metric("lab_upstream_tls_handshakes_total")
    conns = logged_since(upstream, since)
    assert len(conns) == 10  # a connection per client
    resumed = [c for c in conns if c.resumed]
    # the client's count of full handshakes and nginx's agree
    assert len(conns) - len(resumed) == full, (len(conns), len(resumed), full)
    assert resumed, "no per-call client resumed a session"


def test_a_tls_version_is_asked_through_the_engine(upstream, start_proxy):
    since = time.time()
    with start_proxy(
        "singleton-okhttp", upstream.tls_url, **tls_env(upstream, CLIENT_TLS_VERSION="1.2")
    ) as p:
        assert requests.get(f"{p.url}/files/tiny.txt", timeout=10).status_code == 200
        assert negotiated(p)[2] == "TLSv1.2"
    assert {c.tls_version for c in logged_since(upstream, since)} == {"TLSv1.2"}


def test_a_certificate_from_another_ca_is_never_trusted(upstream, start_proxy, tmp_path):
    """The proxy trusts the CA it is given alone: with another CA, the handshake fails (502)."""
    other = tmp_path / "other"
    subprocess.run(
        ["sh", str(nginx.TLS_SCRIPT)],
        env={**os.environ, "LAB_TLS_DIR": str(other)},
        check=True,
        capture_output=True,
    )
    env = tls_env(upstream)
    env["UPSTREAM_CA_FILE"] = str(other / "ca.pem")
    with start_proxy("singleton-okhttp", upstream.tls_url, **env) as p:
        r = requests.get(f"{p.url}/files/tiny.txt", timeout=10)
        assert r.status_code == 502, r.text


def start_failure(env: dict[str, str]) -> str:
    """The proxy's exit and its stderr for `env` (it must stop at start), run from the jar of the
    release its engine runs on (the apache engine's last, 3.4.1)."""
    engine = env.get("CLIENT_ENGINE", "cio")
    jar, _ = versions.program(Case("singleton", engine))
    r = subprocess.run(
        [java(), "-jar", str(jar)],
        env={**os.environ, "HOST": "127.0.0.1", "PORT": str(free_port()), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr[-1000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("proxy:")]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize(
    "engine,variable,value,limit",
    [
        ("cio", "CLIENT_HTTP_VERSION", "2", "speaks HTTP/1.1 only"),
        ("apache", "CLIENT_HTTP_VERSION", "2", "has no HTTP/2"),
        ("cio", "CLIENT_TLS_VERSION", "1.3", "TLS 1.2 at most"),
    ],
    ids=["cio-h2", "apache-h2", "cio-tls13"],
)
def test_an_engine_refuses_at_start_what_it_cannot_do_in_one_line(upstream, engine, variable, value, limit):
    env = {"CLIENT_ENGINE": engine, "UPSTREAM_URL": upstream.tls_url, "UPSTREAM_CA_FILE": str(nginx.CA_FILE)}
    line = start_failure({**env, variable: value})
    assert f"{variable}={value} is not possible with CLIENT_ENGINE={engine}" in line and limit in line, line


@pytest.mark.parametrize(
    "env,names",
    [
        ({"UPSTREAM_URL": "https://127.0.0.1:9"}, "UPSTREAM_CA_FILE"),
        ({"CLIENT_HTTP_VERSION": "2"}, "CLIENT_HTTP_VERSION=2 needs an https"),
        (
            {"UPSTREAM_URL": "https://127.0.0.1:9", "UPSTREAM_CA_FILE": "/etc/hostname"},
            "holds no PEM certificate",
        ),
    ],
    ids=["https-without-ca", "h2-over-http", "ca-not-pem"],
)
def test_bad_tls_settings_stop_the_proxy_with_one_line_naming_the_variable(env, names):
    assert names in start_failure(env)


def test_the_upstream_offers_h2_and_tls_13_itself(upstream):
    """The witness is honest: nginx's TLS port offers h2 by ALPN over TLS 1.3, with the lab's
    certificate (checked against the lab CA for 127.0.0.1), and HTTP/1.1 to a client without ALPN."""
    host, port = upstream.tls_url.removeprefix("https://").split(":")
    for alpn, chosen in ((["h2", "http/1.1"], "h2"), (None, None)):
        context = ssl.create_default_context(cafile=str(nginx.CA_FILE))
        if alpn:
            context.set_alpn_protocols(alpn)
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                assert tls.version() == "TLSv1.3"
                assert tls.selected_alpn_protocol() == chosen
