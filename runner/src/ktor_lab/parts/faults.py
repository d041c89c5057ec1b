"""A small upstream that misbehaves on purpose: the proxy's fault tests and `lab study faults`.

`python -m ktor_lab.parts.faults --port N` (127.0.0.1 only). Every request it receives is logged
(method, target, headers, the body's bytes and whether it ended properly) and answered as its
path says:

  /ok                   200 "ok\\n", Content-Length, keep-alive
  /hang                 reads the request, never answers
  /hang-after-headers   200 with Content-Length: SIZE, then nothing
  /truncate-fixed       200 with Content-Length: SIZE, SENT bytes, then closes
  /truncate-chunked     200 chunked, SENT bytes in chunks of 16 KiB, then closes before the
                        last chunk: where a chunk's size line would start, or with `cut=mid`
                        in the middle of a chunk (its size line says one byte more than follows)
  /reset-mid-body       200 with Content-Length: SIZE, SENT bytes, then resets (RST)
  /trickle              200 with Content-Length: SIZE, sent in PARTS parts one GAP seconds after
                        another (`?size=100000&parts=8&gap=0.5`): a slow body that keeps moving

  The three truncations take `pause=S` (seconds between the last bytes and the close; default 0,
  0.05 for reset-mid-body) and `close=rst` (reset instead of FIN).
  /stale                200 "ok\\n" keep-alive; the next request on that connection is read and
                        the connection closed without an answer (an idle close as the client
                        reuses it)
  /extra                200 with Content-Length: 6 "extra\\n", then a whole second response
                        nobody asked for ("smuggled\\n")
  /upload               reads the body as framed; 200 {"bytes": N, "complete": true|false}
  /_log                 the log as JSON (not logged itself); POST /_log/clear empties it
  /_down?seconds=N      answers, then stops listening and drops every connection for N seconds
                        (the upstream refused), then listens again

SIZE and SENT come from the query (`?size=1048576&sent=65536`; default 1000 and half of SIZE).
A body is `complete` when its framing ended it: all of its Content-Length, or the last chunk.
Any other query field (`try=7`) is only logged, so a test can find its own requests.

A careful client of it is `raw_http` (a reply read by its framing); the cuts both ways that the
cut-body tests and `lab study faults` try through a proxy are `cuts`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import sys
from pathlib import Path

import requests

from ..processes import Service, local_url

FAULTS = (
    "ok",
    "hang",
    "hang-after-headers",
    "truncate-fixed",
    "truncate-chunked",
    "reset-mid-body",
    "stale",
    "extra",
    "trickle",
    "upload",
)


def sizes_query(target: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in target.partition("?")[2].split("&") if "=" in kv)


def sizes(target: str) -> tuple[int, int]:
    """SIZE and SENT from the query string."""
    query = sizes_query(target)
    size = int(query.get("size", 1000))
    return size, min(size, int(query.get("sent", size // 2)))


class Log:
    def __init__(self) -> None:
        self.entries: list[dict] = []

    def add(self, **entry) -> dict:
        self.entries.append(entry)
        return entry


async def read_head(reader: asyncio.StreamReader) -> tuple[str, str, list[tuple[str, str]]] | None:
    """Request line and headers; None when the connection ends first."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
    return parts[0], parts[1], headers  # type: ignore[return-value]


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> tuple[int, bool]:
    """The body as framed: (bytes received, whether its framing ended it)."""
    received = 0
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers expected
                    return received, True
                chunk = await reader.readexactly(size)
                received += len(chunk)
                await reader.readexactly(2)
        length = int(headers.get("content-length", "0") or 0)
        while received < length:
            data = await reader.read(min(65536, length - received))
            if not data:
                return received, False
            received += len(data)
        return received, True
    except (asyncio.IncompleteReadError, ValueError, ConnectionError) as e:
        partial = getattr(e, "partial", b"")
        return received + len(partial or b""), False


def response(status: str, body: bytes, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nContent-Type: text/plain\r\n{extra}\r\n"
    return head.encode() + body


def reset(writer: asyncio.StreamWriter) -> None:
    """Closes with RST instead of FIN (SO_LINGER 0)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def end_cut(writer: asyncio.StreamWriter, target: str, pause: float = 0.0, rst: bool = False) -> None:
    """Sends what was written, waits the query's `pause` (seconds), then closes: FIN, or RST with
    `close=rst` in the query."""
    query = sizes_query(target)
    await writer.drain()
    await asyncio.sleep(float(query.get("pause", pause)))
    if rst or query.get("close") == "rst":
        reset(writer)


class App:
    """The listener, its open connections and the log."""

    def __init__(self, port: int):
        self.port = port
        self.log = Log()
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        self.server = await asyncio.start_server(
            self.handle, "127.0.0.1", self.port, limit=1 << 20, backlog=1024, reuse_address=True
        )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            await serve_connection(self, reader, writer)
        finally:
            self.writers.discard(writer)

    async def down(self, seconds: float) -> None:
        """Refuses connections for `seconds`: the listener closed, every connection dropped."""
        assert self.server is not None
        self.server.close()
        for w in list(self.writers):
            w.transport.abort()
        await asyncio.sleep(seconds)
        await self.open()


async def serve_connection(app: App, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    log = app.log
    drop_next = False
    try:
        while True:
            request = await read_head(reader)
            if request is None:
                return
            method, target, header_list = request
            headers = {k.lower(): v for k, v in header_list}
            path = target.split("?")[0]
            if path == "/_down":
                writer.write(response("200 OK", b"down\n"))
                await writer.drain()
                asyncio.get_running_loop().create_task(app.down(float(sizes_query(target).get("seconds", 1))))
                continue
            if path == "/_log" or path == "/_log/clear":
                if path == "/_log/clear":
                    log.entries.clear()
                body = json.dumps(log.entries).encode()
                writer.write(response("200 OK", body, "Content-Type: application/json\r\n"))
                await writer.drain()
                continue
            received, complete = await read_body(reader, headers)
            fault = path.strip("/")
            size, sent = sizes(target)
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nContent-Type: text/plain\r\n\r\n".encode()
            log.add(
                method=method,
                target=target,
                headers=header_list,
                body_bytes=received,
                body_complete=complete,
                fault=fault if not drop_next else "dropped",
            )
            if drop_next:
                return  # read, and closed without an answer
            if not complete:
                return
            if fault == "hang":
                await asyncio.sleep(3600)
            elif fault == "hang-after-headers":
                writer.write(head)
                await writer.drain()
                await asyncio.sleep(3600)
            elif fault == "truncate-fixed":
                writer.write(head + b"x" * sent)
                await end_cut(writer, target)
                return
            elif fault == "truncate-chunked":
                writer.write(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
                )
                mid = sizes_query(target).get("cut") == "mid"
                for start in range(0, sent, 16384):
                    n = min(16384, sent - start)
                    if mid and start + n == sent:
                        writer.write(f"{n + 1:x}\r\n".encode() + b"x" * n)
                    else:
                        writer.write(f"{n:x}\r\n".encode() + b"x" * n + b"\r\n")
                await end_cut(writer, target)
                return
            elif fault == "reset-mid-body":
                writer.write(head + b"x" * sent)
                await end_cut(writer, target, pause=0.05, rst=True)
                return
            elif fault == "trickle":
                query = sizes_query(target)
                parts, gap = int(query.get("parts", 8)), float(query.get("gap", 0.5))
                writer.write(head)
                for i in range(parts):
                    n = size // parts + (size % parts if i == parts - 1 else 0)
                    writer.write(b"x" * n)
                    await writer.drain()
                    if i < parts - 1:
                        await asyncio.sleep(gap)
            elif fault == "stale":
                writer.write(response("200 OK", b"ok\n"))
                await writer.drain()
                drop_next = True
            elif fault == "extra":
                writer.write(response("200 OK", b"extra\n") + response("200 OK", b"smuggled\n"))
                await writer.drain()
            elif fault == "upload":
                body = json.dumps({"bytes": received, "complete": complete}).encode()
                writer.write(response("200 OK", body, "Content-Type: application/json\r\n"))
                await writer.drain()
            else:
                writer.write(
                    response(
                        "200 OK" if fault == "ok" else "404 Not Found", b"ok\n" if fault == "ok" else b""
                    )
                )
                await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        return
    finally:
        if not writer.transport.is_closing():
            writer.close()


def start(run_dir: Path, port: int) -> Service:
    """The fault server as a process of its own on 127.0.0.1:`port`; waits until it answers."""
    service = Service(
        "faults",
        [sys.executable, "-m", "ktor_lab.parts.faults", "--port", str(port)],
        run_dir / f"faults-{port}.log",
    )
    service.wait_http(local_url(port, "/_log"), timeout=15)
    return service


class FaultServer:
    """A running fault server: its URL and its log of received requests."""

    def __init__(self, url: str):
        self.url = url

    def log(self) -> list[dict]:
        return requests.get(f"{self.url}/_log", timeout=5).json()

    def clear(self) -> None:
        requests.post(f"{self.url}/_log/clear", timeout=5).raise_for_status()

    def sent_again(self, tag: str) -> dict[str, int]:
        """The tries tagged `tag` that reached this server more than once, with their counts."""
        seen: dict[str, int] = {}
        for entry in self.log():
            query = sizes_query(entry["target"])
            if query.get("try", "").startswith(f"{tag}-"):
                seen[query["try"]] = seen.get(query["try"], 0) + 1
        return {t: n for t, n in seen.items() if n > 1}

    def down(self, seconds: float) -> None:
        """Refused for `seconds` from now (listener closed, connections dropped), then back."""
        requests.get(f"{self.url}/_down?seconds={seconds}", timeout=5).raise_for_status()


async def main_async(port: int) -> None:
    app = App(port)
    await app.open()
    print(f"faults: listening on 127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ktor_lab.parts.faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    args = p.parse_args(argv)
    try:
        asyncio.run(main_async(args.port))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
