"""Child processes of the native stack: started with a log file, stopped with their group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """One child process in its own process group, output to `log`."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_http(self, url: str, timeout: float = 30.0) -> None:
        """Waits until `url` answers 2xx; raises with the log's tail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if 200 <= r.status < 300:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} did not answer {url} within {timeout:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
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
        self._log_file.close()
        return self.proc.returncode
