"""An upload whose framing is broken never reaches the upstream as complete, and its caller hears 400.

A chunk size that is not hex, overflows or is negative, junk after it, bare LF line ends, a chunk
not ended by CRLF, a chunk extension or a trailer past the limits: Netty's decoder ends such a
body with a last part that carries its failure, which Ktor's server takes for the body's end. The
proxy fails the upstream exchange instead, answers 400 with `Connection: close` and reads nothing
after it (RFC 9112 sections 6.3 and 7.1). Framing broken in the headers (a Content-Length that is
not a number, two that differ, chunked not the last coding) is refused before anything is sent.

Every case (each engine, both lifetimes) with every core busy, the singletons idle too (how the
proxy ends the body is the same for a client made per call), each variant tried
`TRIES` times with `IN_FLIGHT` at once, after a few whole chunks and after 300 KB (the upstream
exchange then streams when the framing breaks): the fault server (ktor_lab/parts/faults.py) logs
whether the body it received ended by its own framing; that count must be 0, and no caller may
hear a 2xx. A caller that keeps its connection open hears 400 and sees the connection closed.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from conftest import machine
from ktor_lab.parts import cuts, raw_http

TRIES = 3
IN_FLIGHT = 6
SMALL = 5_000  # the good bytes before the break: one chunk, read whole before the upstream is asked
LARGE = 300_000  # three chunks of 100,000: the upstream exchange streams when the break comes


@dataclass(frozen=True)
class Variant:
    name: str
    head: bytes  # the headers after the request line
    body: bytes  # what follows the good chunks (chunked) or the whole body
    fin: bool = False  # the caller closes its side after sending (else it waits for the answer)
    chunked: bool = True


CHUNKED = b"Host: lab\r\nTransfer-Encoding: chunked\r\n"
BROKEN_BODIES = [
    Variant("not-hex", CHUNKED, b"zz\r\n"),
    Variant("not-hex-fin", CHUNKED, b"zz\r\n", fin=True),
    Variant("overflow-fin", CHUNKED, b"fffffffffffffffffff1\r\n", fin=True),
    Variant("negative-fin", CHUNKED, b"-1\r\n", fin=True),
    Variant("junk-after-size-fin", CHUNKED, b"10zz\r\n", fin=True),
    Variant("junk-after-size", CHUNKED, b"10zz\r\n" + b"y" * 16 + b"\r\n0\r\n\r\n"),
    Variant("bare-lf", CHUNKED, b"5\nhello\n0\n\n"),
    Variant("chunk-not-ended-by-crlf", CHUNKED, b"5\r\nhelloXY0\r\n\r\n"),
    Variant("extension-100kb", CHUNKED, b"5;" + b"e" * 100_000 + b"\r\nhello\r\n0\r\n\r\n"),
    Variant("trailer-past-the-limit", CHUNKED, b"0\r\nX-Trailer: " + b"t" * 20_000 + b"\r\n\r\n"),
]
BROKEN_HEADS = [
    Variant("content-length-not-a-number", b"Host: lab\r\nContent-Length: 12a\r\n", b"x" * 12, chunked=False),
    Variant(
        "two-content-lengths",
        b"Host: lab\r\nContent-Length: 5\r\nContent-Length: 6\r\n",
        b"hellox",
        chunked=False,
    ),
    Variant(
        "chunked-not-last",
        b"Host: lab\r\nTransfer-Encoding: chunked, identity\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        chunked=False,
    ),
]
VARIANTS = BROKEN_BODIES + BROKEN_HEADS
# Sent right behind a broken request on the same connection: never read as a request of its own.
PIPELINED = b"GET /ok HTTP/1.1\r\nHost: lab\r\n\r\n"


def request(variant: Variant, good: int, tag: str) -> bytes:
    head = f"PUT /upload?try={tag} HTTP/1.1\r\n".encode() + variant.head + b"\r\n"
    if not variant.chunked:
        return head + variant.body
    chunk = min(good, 100_000)
    chunks = b"".join(f"{chunk:x}\r\n".encode() + b"x" * chunk + b"\r\n" for _ in range(good // chunk))
    return head + chunks + variant.body


@dataclass
class Heard:
    status: int  # 0: the connection closed without a status
    closed: bool  # the proxy closed the connection after it
    statuses: int  # status lines in all the caller read


def send(url: str, variant: Variant, good: int, tag: str) -> Heard:
    """The broken request on a fresh connection (with a request pipelined behind it unless the
    caller closes its side), and what the caller heard before the connection closed."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        try:
            s.sendall(request(variant, good, tag) + (b"" if variant.fin else PIPELINED))
            if variant.fin:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the proxy refused and closed before all was sent
        reply = raw_http.read_reply(s, 10)
        rest, closed = read_to_close(s) if reply.status else (b"", True)
    return Heard(reply.status, closed, (reply.status != 0) + rest.count(b"HTTP/1.1 "))


def read_to_close(s: socket.socket) -> tuple[bytes, bool]:
    """What else the proxy sends, and whether it closed the connection within 2 s of silence."""
    s.settimeout(2)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except TimeoutError:
        return data, False
    except ConnectionResetError:
        pass
    return data, True


@pytest.fixture
def framing_proxy(fault_proxy):
    """The case's proxy in front of the fault server (conftest.fault_proxy, shared with
    test_cut_bodies.py and test_proxy_faults.py); each test leaves it serving."""
    return fault_proxy


@pytest.mark.parametrize("state", ["idle", "busy"])
def test_a_broken_framing_never_reaches_the_upstream_as_complete_and_is_a_400(
    framing_proxy, fault_server, state
):
    case = framing_proxy.case
    if state == "idle" and not case.startswith("singleton"):
        pytest.skip("a per-call case is tried with every core busy, where the races are")
    tries = [
        (v, good, f"framing-{case}-{state}-{v.name}-{good}-{i}")
        for v in VARIANTS
        for good in ((SMALL, LARGE) if v.chunked else (0,))
        for i in range(TRIES)
    ]
    with machine(state), ThreadPoolExecutor(IN_FLIGHT) as pool:
        heard = list(pool.map(lambda t: send(framing_proxy.url, *t), tries))

    upstream = cuts.settled_log(fault_server, f"try=framing-{case}-{state}-")
    complete = [tag for _, _, tag in tries if upstream.get(tag, {}).get("body_complete")]
    assert not complete, f"{len(complete)} of {len(tries)} reached the upstream as complete: {complete[:5]}"
    wrong = [
        (tag, h)
        for (v, _, tag), h in zip(tries, heard, strict=True)
        # 2xx never; a caller still listening hears 400 once, and the connection closes after it.
        if 200 <= h.status < 300
        or (not v.fin and (h.status, h.closed, h.statuses) != (400, True, 1))
        or (v.fin and h.status not in (0, 400))
    ]
    assert not wrong, f"{len(wrong)} of {len(tries)} heard otherwise: {wrong[:5]}"
    # The proxy serves on: a whole chunked upload passes whole.
    reply = raw_http.exchange(
        framing_proxy.url,
        b"PUT /upload HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    )
    assert (reply.status, reply.body) == (200, b'{"bytes": 5, "complete": true}'), reply


def test_an_obs_fold_is_forwarded_as_one_line(framing_proxy, fault_server):
    """RFC 9112 section 5.2: a server MUST reject an obs-fold or replace it with SP before it
    forwards the message; the proxy's decoder (Netty's) replaces it, so the upstream never sees a
    folded line to read otherwise."""
    tag = f"obs-fold-{framing_proxy.case}"
    head = f"PUT /upload?try={tag} HTTP/1.1\r\nHost: lab\r\n"
    reply = raw_http.exchange(
        framing_proxy.url, f"{head}X-Folded: one\r\n two\r\nContent-Length: 5\r\n\r\nhello".encode()
    )
    assert reply.status == 200, reply
    entry = next(e for e in fault_server.log() if e["target"].endswith(f"try={tag}"))
    assert ["X-Folded", "one two"] in entry["headers"], entry["headers"]
