"""Crafted requests, sent as raw bytes: none may reach anything but the upstream, none may crash the proxy."""

from __future__ import annotations

import json
import re
import socket

import pytest
import requests

from ktor_lab.cases import ENGINES


@pytest.fixture(scope="module", params=ENGINES, ids=ENGINES)
def proxy(request, upstream, start_proxy):
    with start_proxy(f"singleton-{request.param}", upstream.url) as p:
        yield p


def raw(url: str, data: bytes, timeout: float = 5.0) -> tuple[int, bytes]:
    """Sends `data` on a fresh connection; returns the status code and the body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
    response = b"".join(chunks)
    assert response.startswith(b"HTTP/1.1 "), response[:200]
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def get(target: str, *headers: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers, "", ""]
    return "\r\n".join(lines).encode()


def test_absolute_form_is_sent_to_the_upstream_only(proxy):
    status, body = raw(proxy.url, get("http://evil.example:9999/echo?x=1", "X-Probe: 1"))
    assert status == 200
    seen = json.loads(body)
    assert seen["uri"] == "/echo?x=1"


@pytest.mark.parametrize("path", ["/metrics", "/health"])
def test_the_proxys_own_endpoints_are_never_forwarded_however_written(proxy, path):
    status, body = raw(proxy.url, get(f"http://upstream.example{path}"))
    assert status == 200
    assert (b"lab_proxy_info{" if path == "/metrics" else b"ok singleton-") in body


@pytest.mark.parametrize(
    "request_bytes,status",
    [
        (b"TRACE /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405),
        (b"CONNECT upstream:443 HTTP/1.1\r\nHost: upstream:443\r\nConnection: close\r\n\r\n", 405),
        (b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n", 400),
    ],
    ids=["trace", "connect", "http11-without-host"],
)
def test_requests_a_proxy_must_not_forward_are_refused(proxy, request_bytes, status):
    assert raw(proxy.url, request_bytes)[0] == status


def test_an_unknown_transfer_coding_is_refused_and_the_connection_closed(proxy):
    """Its body would otherwise be read as the next request on the connection. Chunked is not its
    last coding: RFC 9112 6.1's 400, and the connection closes."""
    smuggled = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n"
    smuggled += b"5\r\nhello\r\n0\r\n\r\nGET /status/418 HTTP/1.1\r\nHost: x\r\n\r\n"
    host, port = proxy.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(smuggled)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1  # closed after it: nothing read as a next request


def test_content_length_beside_transfer_encoding_is_refused_and_the_connection_closed(proxy, upstream):
    """RFC 9112 6.1: the server MUST close the connection after such a request; here it is refused
    (400), never forwarded, and a second request on the connection is never read."""
    nginx_before = requests.get(f"{upstream.status_url}/stub_status", timeout=5).text
    smuggled = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
    smuggled += b"5\r\nhello\r\n0\r\n\r\nGET /files/tiny.txt HTTP/1.1\r\nHost: x\r\n\r\n"
    host, port = proxy.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(smuggled)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    # Said by the lab's guard, or by Netty's own decoder first (Netty 4.2.16, Ktor 3.5.2's, refuses
    # the pair itself; 4.2.9, the apache engine's release's, leaves it to the guard).
    assert b"Content-Length" in answer.split(b"\r\n\r\n", 1)[1] and b"Transfer-Encoding" in answer, answer
    # closed after it: one status line (Netty's text itself names "HTTP/1.1 messages")
    assert len(re.findall(rb"(?:^|\r\n)HTTP/1\.1 \d{3} ", answer)) == 1, answer
    nginx_after = requests.get(f"{upstream.status_url}/stub_status", timeout=5).text
    requests_line = [line.split() for text in (nginx_before, nginx_after) for line in text.splitlines()[2:3]]
    # nginx's request count grew by the two status reads alone: nothing was forwarded
    assert int(requests_line[1][2]) - int(requests_line[0][2]) == 1, (nginx_before, nginx_after)


@pytest.mark.parametrize(
    "target",
    [
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/files/..%2f..%2fetc%2fpasswd",
        "/files/%2E%2E/%2E%2E/x",
        "/a%00b",
        "*",
    ],
)
def test_traversal_and_odd_targets_get_400(proxy, target):
    status, _ = raw(proxy.url, get(target))
    assert status == 400


def test_a_dot_segment_inside_the_root_is_resolved(proxy):
    status, body = raw(proxy.url, get("/files/../files/./tiny.txt"))
    assert (status, body) == (200, b"Success!\n")


@pytest.mark.parametrize("header", ["X-A: a\rInjected: b", "X-A: a\x00b"])
def test_control_characters_in_headers_get_400(proxy, header):
    status, _ = raw(proxy.url, get("/echo", header))
    assert status == 400


def test_garbage_and_oversized_requests_do_not_crash_the_proxy(proxy):
    for data in (
        b"\x16\x03\x01\x02\x00garbage\r\n\r\n",
        get("/" + "a" * 20000),
        get("/echo", "X-Big: " + "b" * 20000),
    ):
        try:
            status, _ = raw(proxy.url, data)
            assert 400 <= status < 500
        except (ConnectionError, AssertionError):
            pass  # closing the connection is an acceptable answer to garbage
    assert requests.get(f"{proxy.url}/files/tiny.txt", timeout=5).text == "Success!\n"
    assert proxy.service.alive()
