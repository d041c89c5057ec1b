"""Fixtures with real parts: nginx on loopback ports, proxy jars started per case."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import requests

from ktor_lab import versions
from ktor_lab.cases import CASES, Case
from ktor_lab.machine import process_cpu_seconds
from ktor_lab.metrics import Samples, scrape
from ktor_lab.parts import compose, cuts, faults, jfr, nginx, proxy
from ktor_lab.processes import Guardian, Service, free_port, wait_until
from lab_payload import payload  # the locustfile's own definition (pip install -e locust)

__all__ = ["payload", "scrape", "wait_until"]

# Every process this session starts, and everything those start, inherits this marker: at the
# end, any process still carrying it was left behind by a test (see pytest_sessionfinish).
SESSION_MARK = f"LAB_TEST_SESSION={uuid.uuid4().hex}"
os.environ["LAB_TEST_SESSION"] = SESSION_MARK.split("=", 1)[1]


def whole_run_counts_agree(locust_requests: int, proxy_served: float, users: int) -> bool:
    """Locust's count and the proxy's of one whole run agree within 2%, plus what was in flight at
    the stop: Locust kills its users then and never counts their last requests, which the proxy
    still completes with nginx (one a user at most; per-call TLS had 9 of 10 users' in flight)."""
    extra = proxy_served - locust_requests
    return -0.02 * locust_requests <= extra <= 0.02 * locust_requests + users


def window_counts_agree(run: dict) -> bool:
    """A window's requests as Locust and the proxy counted them (results.json's run) agree but for
    those in the gap between their edges of the window (measured, `edges_s`), and 2%."""
    sent, counted = run["locust"]["requests"], run["proxy"]["upstream_requests"]
    gap = run["locust"]["rps"] * run["window"]["edges_s"]
    return sent > 0 and abs(sent - counted) <= 0.02 * counted + gap


def marked_processes(key: str, value: str, but: set[int] = frozenset()) -> list[tuple[int, str]]:
    """(PID, command) of live processes, zombies aside, whose environment carries key=value."""
    found = []
    for p in psutil.process_iter():
        if p.pid in but:
            continue
        try:
            if p.environ().get(key) != value or p.status() == psutil.STATUS_ZOMBIE:
                continue  # not ours, or a zombie, which holds nothing
            found.append((p.pid, " ".join(p.cmdline())[:160]))
        except psutil.Error:
            continue  # ended meanwhile, or not ours to read
    return found


def session_processes() -> list[tuple[int, str]]:
    """(PID, command) of live processes carrying this session's marker, but this one and its guardian."""
    mine = {os.getpid(), *([Guardian._proc.pid] if Guardian._proc else [])}
    return marked_processes(*SESSION_MARK.split("=", 1), but=mine)


def pytest_addoption(parser):
    parser.addoption(
        "--busy-cores",
        type=int,
        default=0,
        metavar="N",
        help="run the suite while N busy loops (one process each) load the machine's cores, "
        "to check that no assertion depends on the machine's speed (make test-busy)",
    )
    parser.addoption(
        "--cut-tries",
        type=int,
        default=30,
        metavar="N",
        help="tries per case, direction and machine state in the cut-body tests (default 30; "
        "make test-cuts: 300)",
    )
    parser.addoption(
        "--whole-tries",
        type=int,
        default=5,
        metavar="N",
        help="100 MB uploads per case with every core busy, for engines whose own threads read the "
        "body (default 5; make test-cuts: 30; CIO: 3)",
    )


class BusyLoops:
    """N processes spinning at full speed for the length of the session, ended by PID at its end
    (and by the Guardian, group and all, should the session be killed); reports the cores they took."""

    def __init__(self, n: int):
        self.started = time.monotonic()
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", "while True: pass"],
                start_new_session=True,
                env={**os.environ, **Guardian.env()},
            )
            for _ in range(n)
        ]
        for p in self.procs:
            Guardian.watch(p.pid)

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self.procs:
            try:
                total += process_cpu_seconds(p.pid)
            except (OSError, IndexError, ValueError):
                pass
        return total

    def stop(self) -> str:
        used, wall = self.cpu_seconds(), time.monotonic() - self.started
        for p in self.procs:
            p.kill()
            p.wait()
            Guardian.release(p.pid)
        return (
            f"{len(self.procs)} busy loops took {used / max(wall, 1e-3):.2f} cores on average "
            f"over the session's {wall / 60:.1f} min"
        )


busy: BusyLoops | None = None
busy_report = ""


@contextmanager
def machine(state: str) -> Iterator[None]:
    """`busy`: a busy loop on every core for the length of the block; `idle`: nothing."""
    loops = BusyLoops(os.cpu_count() or 2) if state == "busy" else None
    try:
        yield
    finally:
        if loops:
            loops.stop()


def pytest_sessionstart(session):
    global busy
    n = session.config.getoption("--busy-cores")
    if n > 0:
        busy = BusyLoops(n)


def pytest_terminal_summary(terminalreporter):
    if busy_report:
        terminalreporter.write_line(busy_report)
    # Where the suite's time went, per file (setup, call and teardown): docs/testing.md's table.
    per_file: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                file = report.nodeid.split("::")[0]
                per_file[file] = per_file.get(file, 0.0) + report.duration
    if sum(per_file.values()) >= 120:
        terminalreporter.write_sep("=", "time per file (those of 6 s or more)")
        for file, seconds in sorted(per_file.items(), key=lambda item: -item[1]):
            if seconds >= 6:
                terminalreporter.write_line(f"{seconds / 60:6.1f} min  {file}")
        terminalreporter.write_line(f"{sum(per_file.values()) / 60:6.1f} min  in all")


def pytest_sessionfinish(session, exitstatus):
    """The suite leaves no process behind, even when a test failed: any survivor fails the run."""
    global busy, busy_report
    if busy is not None:
        busy_report, busy = busy.stop(), None
    # Stops in flight (a JVM's shutdown) may take a moment.
    wait_until(lambda: not session_processes(), timeout=15, interval=0.5)
    if left := session_processes():
        lines = "\n".join(f"  {pid} {cmd}" for pid, cmd in left)
        print(f"\nprocesses left behind by the test session (now ended):\n{lines}")
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)  # ours: they carry this session's marker
            except ProcessLookupError:
                pass
        session.exitstatus = 1


# The proxy runs with a heap far smaller than the 100 MB bodies it must stream.
PROXY_JAVA_OPTS = ["-Xmx128m"]


def answers(url: str, timeout: float = 1) -> bool:
    """True when `url` answers 2xx within `timeout` seconds; false on any connection error."""
    try:
        return requests.get(url, timeout=timeout).ok
    except requests.RequestException:
        return False


def sha256_of_stream(response: requests.Response) -> tuple[int, str]:
    h = hashlib.sha256()
    n = 0
    for chunk in response.iter_content(1 << 20):
        h.update(chunk)
        n += len(chunk)
    return n, h.hexdigest()


@dataclass
class Upstream:
    url: str
    status_url: str
    files: Path
    service: Service
    tls_url: str = ""  # the same locations over TLS (https://127.0.0.1:PORT), trusting nginx.CA_FILE
    run_dir: Path | None = None  # where nginx logs its new connections (nginx.connections)

    def manifest(self) -> dict:
        return json.loads((self.files / "manifest.json").read_text())


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    run = tmp_path_factory.mktemp("nginx")
    ports = nginx.NginxPorts(free_port(), free_port(), free_port())
    service = nginx.start(run, ports)
    try:
        yield Upstream(
            f"http://127.0.0.1:{ports.http}",
            f"http://127.0.0.1:{ports.status}",
            nginx.shared_files_dir(),
            service,
            f"https://127.0.0.1:{ports.tls}",
            run,
        )
    finally:
        service.stop()


@pytest.fixture(scope="session")
def fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[faults.FaultServer]:
    """The lab's fault server (ktor_lab/parts/faults.py) on a loopback port, for the whole session."""
    port = free_port()
    service = faults.start(tmp_path_factory.mktemp("faults"), port)
    try:
        yield faults.FaultServer(f"http://127.0.0.1:{port}")
    finally:
        service.stop()


def collect_garbage(pid: int) -> None:
    """A full collection in the JVM `pid` (the JDK's jcmd, as the lab's profiles use it)."""
    subprocess.run([jfr.tool("jcmd"), str(pid), "GC.run"], capture_output=True, timeout=60, check=True)


@dataclass
class Proxy:
    case: str
    url: str
    service: Service

    def metrics(self) -> Samples:
        """The proxy's /metrics, parsed."""
        return scrape(self.url)

    def open_clients(self) -> float:
        """Clients created and not yet closed, once the counts have settled (10 s at most: a
        per-call client is closed after the caller already has its answer, up to about 1 s later
        with Apache under load)."""
        expected = 1 if self.case.startswith("singleton") else 0
        wait_until(lambda: self.metric("lab_clients_open") == expected, timeout=10)
        return self.metric("lab_clients_open")

    def metric(self, name: str, /, **labels: str) -> float:
        """Sum of the proxy's samples of `name` whose labels include `labels`."""
        return self.metrics().sum(name, **labels)


@pytest.fixture(scope="session")
def start_proxy(tmp_path_factory: pytest.TempPathFactory):
    """Returns a context manager: `with start_proxy(case, upstream_url, **env) as p:`."""
    run = tmp_path_factory.mktemp("proxy")

    @contextmanager
    def _start(case_id: str, upstream_url: str, **settings: str) -> Iterator[Proxy]:
        """`case_id` as a user names it (singleton-cio, 'per-call-java jdk 25', ...)."""
        case = Case.parse(case_id)
        port = free_port()
        jar, java_bin = versions.program(case)  # its release's jar (apache: 3.4.1) and its JDK
        env = proxy.case_env(case, upstream_url, port, **settings)
        service = proxy.start(run, env, PROXY_JAVA_OPTS, jar=jar, java_bin=java_bin)
        try:
            yield Proxy(case_id, f"http://127.0.0.1:{port}", service)
        finally:
            service.stop()

    return _start


# The proxies in front of the fault server (test_proxy_faults.py, test_cut_bodies.py): one per case
# for both files, with these client timeouts and Netty's leak detector at its paranoid level.
FAULT_REQUEST_TIMEOUT_MS = 1500
FAULT_CONNECT_TIMEOUT_MS = 2000


@pytest.fixture(scope="session", params=CASES, ids=CASES)
def fault_proxy(request, fault_server, start_proxy) -> Iterator[Proxy]:
    """The case's proxy in front of the fault server, past its first exchange: through a cold JVM
    on a busy machine that once took longer than the 1.5 s request timeout (a 504 where the fault
    makes a 502), and the faults are about the exchange, not about loading classes. Every test
    leaves it serving. A buffer the proxy drops on a fault or cut path without releasing it is
    reported by the leak detector once collected: at the end the proxy collects its garbage and
    serves a few more requests, and a leak report in its log fails the case. (pytest runs all of a
    case's tests of both files together and ends its proxy when the next case's starts; the last
    case's ends with the session.)"""
    with start_proxy(
        request.param,
        fault_server.url,
        CLIENT_REQUEST_TIMEOUT_MS=str(FAULT_REQUEST_TIMEOUT_MS),
        CLIENT_CONNECT_TIMEOUT_MS=str(FAULT_CONNECT_TIMEOUT_MS),
        JAVA_TOOL_OPTIONS="-Dio.netty.leakDetection.level=paranoid",
    ) as p:
        assert wait_until(lambda: answers(f"{p.url}/ok", timeout=10), timeout=60, interval=0.5), "no /ok"
        yield p
        collect_garbage(p.service.pid)
        for _ in range(3):
            cuts.cut_download(p.url, cuts.Cut("content-length", "fin", 0.0), "after-gc")
        log = p.service.log.read_text(errors="replace")
        assert "LEAK:" not in log, f"{p.case}: " + log[log.index("LEAK:") :][:3000]


@pytest.fixture(scope="session")
def compose_engine() -> None:
    """A Docker engine with the compose plugin, and the images compose builds, built once.

    Without an engine the compose tests are skipped, with the reason; when LAB_COMPOSE_REQUIRED
    is set (CI, after the engine's setup succeeded) they fail instead. LAB_COMPOSE_SKIP (CI, when
    the setup failed) skips them with its text.
    """
    if why := os.environ.get("LAB_COMPOSE_SKIP"):
        pytest.skip(f"compose suite skipped: {why}")
    if problem := compose.engine_problem():
        if os.environ.get("LAB_COMPOSE_REQUIRED"):
            pytest.fail(f"compose suite: {problem}")
        pytest.skip(f"compose suite skipped: {problem} (../shared/standin/setup.sh . makes one)")
    if removed := compose.remove_orphans():
        print(f"\nremoved what killed runs left on the engine: {', '.join(removed)}")
    compose.Project(f"ktor-lab-test-{os.getpid()}-build", {}).build()


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def browser():
    """Debian's Chromium, headless, driven by Playwright (which downloads no browser of its own).

    Per test: Playwright's sync API keeps an event loop running in this thread while it is open,
    and the studies' own asyncio.run() would then refuse to start."""
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is missing: apt-get install chromium (the UI and report tests look at pages)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield b
        finally:
            b.close()
