"""A client as careful as a proxy's caller should be: a request's raw bytes on a fresh
connection, and the reply read by its framing (whole only when its Content-Length or last chunk
says so). The proxy's fault tests and `lab study faults` read the proxy's answers with it."""

from __future__ import annotations

import socket
from dataclasses import dataclass


@dataclass
class Reply:
    status: int  # 0: no status line at all
    body: bytes
    whole: bool  # the body ended by its own framing (all of Content-Length, or the last chunk)
    closed: bool  # the proxy closed the connection after it


def read_reply(sock: socket.socket, timeout: float = 10.0, probe: bool = False) -> Reply:
    """One response, as a careful client reads it: whole only when its framing says so (all of its
    Content-Length, or the last chunk); a body that ends with the connection is never whole.
    `probe`: wait up to 0.5 s to see whether the peer closes the connection after a whole reply."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return Reply(0, data, False, True)
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {
            k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
        }
        if "content-length" in headers:
            length = int(headers["content-length"])
            while len(rest) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    return Reply(status, rest, False, True)
                rest += chunk
            return Reply(status, rest[:length], True, probe and probe_closed(sock))
        if "chunked" in headers.get("transfer-encoding", ""):
            body = b""
            while True:
                while b"\r\n" not in rest:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return Reply(status, body, False, True)
                    rest += chunk
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                while len(rest) < size + 2:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return Reply(status, body, False, True)
                    rest += chunk
                if size == 0:
                    return Reply(status, body, True, probe and probe_closed(sock))
                body += rest[:size]
                rest = rest[size + 2 :]
        while chunk := sock.recv(65536):  # read to the close: no framing to end it
            rest += chunk
        return Reply(status, rest, False, True)
    except (ConnectionResetError, TimeoutError):
        return Reply(0, data, False, True)


def probe_closed(sock: socket.socket) -> bool:
    """True when the peer has closed (an EOF is waiting) shortly after a response."""
    sock.settimeout(0.5)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def exchange(url: str, request: bytes, timeout: float = 10.0, probe: bool = False) -> Reply:
    """`request` on a fresh connection to `url` (http://host:port), and the reply to it."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request)
        return read_reply(s, timeout, probe)


def get(path: str, *headers: str) -> bytes:
    """A GET request's bytes."""
    return "\r\n".join([f"GET {path} HTTP/1.1", "Host: lab", *headers, "", ""]).encode()
