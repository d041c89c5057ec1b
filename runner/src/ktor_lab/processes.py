"""Child processes of the lab: started with a log file, stopped with their group, never orphaned.

Each child runs in a process group of its own, so `stop()` ends it and everything it started
(nginx's workers, say). A guardian process, started with the first child, holds the list of
groups still running; when this process dies, however it dies (SIGKILL included), the guardian
sees its pipe close and ends those groups: TERM, then KILL after 5 s. A group is ended only
while its leader is the process that was started (same PID and start time), so a reused PID is
never touched.

A child also carries the guardian's token in its environment (`STARTED_BY`), set before it is
started: a death between a child's start and the guardian hearing of it (Popen waits for the
child's exec) would otherwise leave that child behind, and under load it did, in most tries.
At its end the guardian also ends every live process carrying its token, looking again for a
second so that a child still on its way to exec is found once it carries it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil

from ktor_lab.errors import LabError

T = TypeVar("T")

# The variable that names the guardian a child was started under (its token).
STARTED_BY = "KTOR_LAB_STARTED_BY"

# Run by the guardian (argv: STARTED_BY and its token): reads "+PGID START" and "-PGID" lines;
# at EOF ends what is left, and every process carrying its token. START is the leader's start
# time (psutil's create_time), so a reused PID is never taken for it.
GUARDIAN = r"""
import os, signal, sys, time
import psutil

variable, token = sys.argv[1], sys.argv[2]
groups = {}
def start_time(pid):
    try:
        return repr(psutil.Process(pid).create_time())
    except psutil.Error:
        return None
def carrying_token():
    found = set()
    for p in psutil.process_iter():
        try:
            if p.environ().get(variable) == token and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
        except psutil.Error:
            continue
    return found
def signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
def signal_one(pid, sig):
    # A group's leader with its group (nginx's workers), anything else by its PID.
    try:
        if os.getpgid(pid) == pid:
            signal_group(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass
for line in sys.stdin:
    sign, rest = line[0], line[1:].split()
    if sign == "+":
        groups[int(rest[0])] = rest[1]
    elif sign == "-":
        groups.pop(int(rest[0]), None)
live = {g for g, t in groups.items() if start_time(g) == t}
for g in live:
    signal_group(g, signal.SIGTERM)
# TERM for 5 s, looking for the token all along (at least 1 s), then KILL what is left.
ended, started = set(live), time.monotonic()
while time.monotonic() - started < 5.0:
    live = {g for g in live if start_time(g) == groups[g]}
    marked = carrying_token()
    for pid in marked - ended:
        signal_one(pid, signal.SIGTERM)
    ended |= marked
    if not live and not marked and time.monotonic() - started >= 1.0:
        break
    time.sleep(0.1)
for g in live:
    signal_group(g, signal.SIGKILL)
for pid in carrying_token():
    signal_one(pid, signal.SIGKILL)
"""


class Guardian:
    """The watcher of this process's children (one per process, started on first use)."""

    _lock = threading.Lock()
    _proc: subprocess.Popen | None = None
    _owner: int | None = None
    _token: str = ""

    @classmethod
    def _pipe(cls):
        with cls._lock:
            if cls._proc is None or cls._owner != os.getpid() or cls._proc.poll() is not None:
                cls._token = uuid.uuid4().hex
                # Not a carrier of the token of a lab that started this one: that lab's guardian
                # would end this guardian before it ended this lab's children.
                env = {k: v for k, v in os.environ.items() if k != STARTED_BY}
                cls._proc = subprocess.Popen(
                    [sys.executable, "-c", GUARDIAN, STARTED_BY, cls._token],
                    stdin=subprocess.PIPE,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # a Ctrl-C to the terminal's group must not end it first
                    text=True,
                )
                cls._owner = os.getpid()
            return cls._proc.stdin

    @classmethod
    def env(cls) -> dict[str, str]:
        """What a child's environment carries so that the guardian ends it even if it never hears
        of it; given before the child is started (it starts the guardian if need be)."""
        cls._pipe()
        return {STARTED_BY: cls._token}

    @classmethod
    def watch(cls, pgid: int) -> None:
        started = start_time(pgid)
        if started is not None:
            cls._send(f"+{pgid} {started}\n")

    @classmethod
    def release(cls, pgid: int) -> None:
        cls._send(f"-{pgid}\n")

    @classmethod
    def _send(cls, line: str) -> None:
        try:
            pipe = cls._pipe()
            pipe.write(line)
            pipe.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the guardian is gone: stop() still ends the group


def start_time(pid: int) -> str | None:
    """The process's start time (psutil's create_time, as text), or None when it is gone."""
    try:
        return repr(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def group_members(pgid: int) -> list[int]:
    """Processes in group `pgid` other than its leader."""
    members = []
    for p in psutil.process_iter():
        try:
            if p.pid != pgid and os.getpgid(p.pid) == pgid:
                members.append(p.pid)
        except (ProcessLookupError, PermissionError):
            continue  # ended meanwhile
    return members


def wait_until(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.2) -> T:
    """Calls `condition()` until it returns something true or `timeout` seconds pass; returns its
    last value (false when time ran out). Every poll of the lab and its tests goes through here."""
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(interval)
    return value


_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, and never one this process was given before: the
    kernel may hand out a port again as soon as it is released, so two calls in a row could name
    the same port (a proxy then forwarding to itself, found in CI)."""
    with _handed_out_lock:
        for _ in range(1000):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise LabError("no free TCP port left on 127.0.0.1 that this run has not used already")


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already listens on host:port (or it cannot be bound). Connections of
    an earlier run still in TIME_WAIT do not count: the parts bind with SO_REUSEADDR, and so
    does this check."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


class Service:
    """One child process in its own process group, output to `log`, watched by the Guardian."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(log, "ab")  # noqa: SIM115 - closed in stop()
        # Where this process's lines begin: the log is appended to (a case run again, same port).
        self.log_start = self._log_file.tell()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {}), **Guardian.env()},
            start_new_session=True,
        )
        Guardian.watch(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_http(self, url: str, timeout: float = 30.0) -> None:
        """Waits until `url` answers 2xx; raises with the log's tail if the process dies or time runs out."""

        def answered_or_exited() -> bool:
            if not self.alive():
                return True
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    return 200 <= r.status < 300
            except OSError:
                return False

        answered = wait_until(answered_or_exited, timeout, interval=0.1)
        if not self.alive():
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
        if not answered:
            raise TimeoutError(f"{self.name} did not answer {url} within {timeout:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def own_log(self) -> str:
        """What this process has written to its log so far, not the lines of an earlier one."""
        if not self._log_file.closed:
            self._log_file.flush()
        try:
            with open(self.log, "rb") as f:
                f.seek(self.log_start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM to the group, SIGKILL after `timeout`; returns the exit code."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        else:
            # The leader is gone; what it started may not be (nginx's workers, say). Its members
            # by PID: the group's ID could by now lead a group that is not ours.
            for pid in group_members(self.proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        Guardian.release(self.proc.pid)
        self._log_file.close()
        return self.proc.returncode


@contextlib.contextmanager
def busy_cores(n: int, run_dir: Path) -> Iterator[list[Service]]:
    """`n` busy loops (one process each, at full speed) for the length of the block: the machine
    as busy as a shared CI box; ended by group like every Service, and by the Guardian if this dies."""
    loops = [
        Service(f"busy-{i}", [sys.executable, "-c", "while True: pass"], run_dir / f"busy-{i}.log")
        for i in range(n)
    ]
    try:
        yield loops
    finally:
        for loop in loops:
            loop.stop(timeout=2)


def local_url(port: int, path: str = "") -> str:
    """http://127.0.0.1:PORT[path]: where every part of the native lab answers."""
    return f"http://127.0.0.1:{port}{path}"
