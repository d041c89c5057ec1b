"""Cut bodies, both ways: what the proxy must never pass on as complete. An upload the caller
cuts, a download the fault server (`faults`) cuts, at every cut point, close and pause; the
cut-body tests and `lab study faults` try them through a proxy many times and tally what passed."""

from __future__ import annotations

import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..processes import wait_until
from .raw_http import Reply, exchange, get, read_reply

if TYPE_CHECKING:
    from .faults import FaultServer

CUT_POINTS = ("mid-chunk", "chunk-boundary", "content-length")
CLOSES = ("fin", "rst")
PAUSES = (0.0, 0.1, 0.5)
UPLOAD_CHUNK = 100_000
UPLOAD_CHUNKS = 5  # a whole upload: 500,000 bytes
DOWNLOAD_SIZE = 1 << 20  # above the 64 KiB the proxy reads whole: the cut comes after the answer started
DOWNLOAD_SENT = 300_000
# Tries in flight at once by default: their pauses overlap (the 0.5 s ones set a series' length),
# and the proxy meets each cut while it serves the others, as it would under load.
IN_FLIGHT = 6


@dataclass(frozen=True)
class Cut:
    """One way to cut a body: where it stops, how the connection ends, and the pause before."""

    where: str  # one of CUT_POINTS
    close: str  # one of CLOSES
    pause: float  # seconds between the last bytes and the close

    def __str__(self) -> str:
        return f"{self.where}/{self.close}/{self.pause:g}s"


def cuts(n: int, keep=lambda cut: True) -> list[Cut]:
    """`n` cuts cycling through every cut point x close x pause that `keep` keeps, so 18 tries cover
    them all once."""
    every = [cut for p in PAUSES for w in CUT_POINTS for c in CLOSES if keep(cut := Cut(w, c, p))]
    return [every[i % len(every)] for i in range(n)]


def engine_sees(engine: str, cut: Cut) -> bool:
    """Whether `engine` can tell this cut of a download from a whole body, so the proxy can.
    CIO cannot when the body stops where the next chunk's size line would start (Ktor's
    decodeChunked, 3.4.0 and 3.5.1, takes the end of its input there for the body's end); a RST
    after a chunk cut mid-way can land there too, as the bytes in flight before it are lost."""
    blind = cut.where == "chunk-boundary" or (cut.where, cut.close) == ("mid-chunk", "rst")
    return not (engine == "cio" and blind)


def _close(sock: socket.socket, cut: Cut, timeout: float) -> int | None:
    """Ends the caller's side as `cut` says; after a FIN, waits for what the proxy sends back.
    Returns the status the caller got (0: the connection closed without one), None after a RST."""
    time.sleep(cut.pause)
    if cut.close == "rst":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        return None
    try:
        sock.shutdown(socket.SHUT_WR)
        return read_reply(sock, timeout).status
    except OSError:
        return 0
    finally:
        sock.close()


def cut_upload(url: str, cut: Cut, tag: str, timeout: float = 10.0) -> int | None:
    """A PUT to the fault server's /upload through `url` whose body the caller cuts: chunked and
    cut in a chunk or where the next chunk would start, or with a Content-Length of 500,000 and
    450,000 sent. Returns what the caller got (see _close); the fault server logs what arrived
    under `try=tag`."""
    host, port = url.removeprefix("http://").split(":")
    chunk = b"x" * UPLOAD_CHUNK
    target = f"/upload?try={tag}"
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    try:
        if cut.where == "content-length":
            total = UPLOAD_CHUNK * UPLOAD_CHUNKS
            sock.sendall(f"PUT {target} HTTP/1.1\r\nHost: lab\r\nContent-Length: {total}\r\n\r\n".encode())
            for _ in range(UPLOAD_CHUNKS - 1):
                sock.sendall(chunk)
            sock.sendall(chunk[: UPLOAD_CHUNK // 2])
        else:
            sock.sendall(f"PUT {target} HTTP/1.1\r\nHost: lab\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
            whole = UPLOAD_CHUNKS if cut.where == "chunk-boundary" else UPLOAD_CHUNKS - 1
            for _ in range(whole):
                sock.sendall(f"{UPLOAD_CHUNK:x}\r\n".encode() + chunk + b"\r\n")
            if cut.where == "mid-chunk":
                sock.sendall(f"{UPLOAD_CHUNK:x}\r\n".encode() + chunk[: UPLOAD_CHUNK // 2])
    except OSError:
        pass  # the proxy may close first (a refusal): nothing more can be sent
    return _close(sock, cut, timeout)


def cut_download_path(cut: Cut, tag: str) -> str:
    """The fault server's path for a body the upstream cuts as `cut` says."""
    query = f"size={DOWNLOAD_SIZE}&sent={DOWNLOAD_SENT}&pause={cut.pause:g}&close={cut.close}&try={tag}"
    if cut.where == "content-length":
        return f"/truncate-fixed?{query}"
    return f"/truncate-chunked?{query}" + ("&cut=mid" if cut.where == "mid-chunk" else "")


def cut_download(url: str, cut: Cut, tag: str, timeout: float = 10.0) -> Reply:
    """A GET of a 1 MiB body that the upstream cuts after 300,000 bytes, through `url`."""
    return exchange(url, get(cut_download_path(cut, tag)), timeout)


@dataclass
class CutTally:
    """What came of a series of cut tries: each passed as complete is a broken promise."""

    tries: int = 0
    passed: list[str] = field(default_factory=list)  # "<cut>: <bytes> bytes" for each passed as complete
    answers: dict[str, int] = field(default_factory=dict)  # what the callers got: "502", "closed", ...

    def answer(self, what: str) -> None:
        self.answers[what] = self.answers.get(what, 0) + 1

    def __str__(self) -> str:
        got = ", ".join(f"{k} x{v}" for k, v in sorted(self.answers.items()))
        return f"{len(self.passed)} of {self.tries} passed as complete; callers got {got}"


def _each(cut_list: list[Cut], tag: str, try_one, in_flight: int) -> list:
    """`try_one(cut, tag-i)` for every cut, `in_flight` at once; the results in the cuts' order."""
    with ThreadPoolExecutor(max(1, in_flight)) as pool:
        return list(pool.map(lambda ic: try_one(ic[1], f"{tag}-{ic[0]}"), enumerate(cut_list)))


def try_cut_downloads(url: str, cut_list: list[Cut], tag: str, in_flight: int = IN_FLIGHT) -> CutTally:
    """Each cut as a download through `url`, `in_flight` at once: a 200 whose framing says whole is
    passed as complete."""
    tally = CutTally()
    replies = _each(cut_list, tag, lambda cut, t: cut_download(url, cut, t), in_flight)
    for cut, reply in zip(cut_list, replies, strict=True):
        tally.tries += 1
        tally.answer(str(reply.status) + (" whole" if reply.whole else " cut") if reply.status else "closed")
        if reply.status == 200 and reply.whole:
            tally.passed.append(f"{cut}: {len(reply.body)} bytes")
    return tally


def try_cut_uploads(
    url: str,
    server: FaultServer,
    cut_list: list[Cut],
    tag: str,
    settle: float = 10.0,
    in_flight: int = IN_FLIGHT,
) -> CutTally:
    """Each cut as an upload through `url` to `server`, `in_flight` at once; an upload the server
    logged as complete is passed as complete. Waits (`settle` s at most) until every try the server
    logged has stayed put for a second: an exchange the proxy aborted late is logged late."""
    tally = CutTally()
    for status in _each(cut_list, tag, lambda cut, t: cut_upload(url, cut, t), in_flight):
        tally.tries += 1
        tally.answer("reset by the caller" if status is None else str(status) if status else "closed")

    by_try = settled_log(server, f"try={tag}-", settle)
    for i, cut in enumerate(cut_list):
        entry = by_try.get(f"{tag}-{i}")
        if entry and entry["body_complete"]:
            tally.passed.append(f"{cut}: {entry['body_bytes']} bytes")
    return tally


def settled_log(server: FaultServer, marker: str, settle: float = 10.0) -> dict[str, dict]:
    """The fault server's entries whose target holds `marker`, by their `try=` value, once their
    count has stayed put for a second (`settle` s at most): an exchange the proxy aborted late is
    logged late."""

    def mine() -> dict[str, dict]:
        return {e["target"].split("try=", 1)[1]: e for e in server.log() if marker in e["target"]}

    seen: list[int] = []

    def settled() -> bool:  # the same count five times running: a second with nothing new
        seen.append(len(mine()))
        return len(seen) >= 5 and len(set(seen[-5:])) == 1

    wait_until(settled, timeout=settle, interval=0.25)
    return mine()
