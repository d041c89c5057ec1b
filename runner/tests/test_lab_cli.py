"""The `lab` command as a user runs it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from conftest import answers, marked_processes, wait_until
from ktor_lab.processes import free_port


def children_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    return alive


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_lab_up_serves_and_a_signal_leaves_nothing_behind(tmp_path: Path, sig):
    nginx_port, status_port, proxy_port = free_port(), free_port(), free_port()
    locust_port, prom_port, exporter_port = free_port(), free_port(), free_port()
    lab = Path(sys.executable).with_name("lab")
    proc = subprocess.Popen(
        [
            str(lab),
            "up",
            "per-call-cio",
            "--nginx-port",
            str(nginx_port),
            "--nginx-status-port",
            str(status_port),
            "--proxy-port",
            str(proxy_port),
            "--locust-port",
            str(locust_port),
            "--prometheus-port",
            str(prom_port),
            "--exporter-port",
            str(exporter_port),
            "--java-opts=-Xmx128m",
            "--run-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # As a shell's background job: SIGINT ignored on entry, which `lab up` must override.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        proxy = f"http://127.0.0.1:{proxy_port}"
        locust = f"http://127.0.0.1:{locust_port}"
        # The shared parts come up first, then the case's proxy (as in lab run's backend).
        up = lambda: answers(f"{locust}/metrics") and answers(f"{proxy}/health")  # noqa: E731
        wait_until(lambda: proc.poll() is not None or up(), timeout=90)
        assert proc.poll() is None, proc.communicate()[0]
        assert up(), "lab up did not come up"
        # A cold proxy on a busy machine can take seconds for its first forwarded request.
        assert requests.get(f"{proxy}/files/tiny.txt", timeout=60).text == "Success!\n"
        assert answers(f"http://127.0.0.1:{prom_port}/-/ready")
        assert answers(f"http://127.0.0.1:{exporter_port}/metrics")
        assert "Locust" in requests.get(locust, timeout=5).text
        pids = [
            int(p)
            for p in subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True
            ).stdout.split()
        ]
        assert len(pids) == 6  # nginx master, the exporter, the proxy's JVM, Prometheus, Locust; the guardian
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "lab: stopped" in out
    assert wait_until(lambda: not children_alive(pids), timeout=10), children_alive(pids)
    for port in (status_port, proxy_port, locust_port, prom_port, exporter_port):
        assert not answers(f"http://127.0.0.1:{port}/"), port


def test_a_sigkilled_lab_up_takes_its_whole_stack_with_it(tmp_path: Path):
    """SIGKILL leaves lab up no chance to clean up: its guardian ends every part it started."""
    ports = {
        name: free_port() for name in ("nginx", "nginx-status", "proxy", "locust", "prometheus", "exporter")
    }
    lab = Path(sys.executable).with_name("lab")
    argv = [str(lab), "up", "singleton-cio", "--java-opts=-Xmx128m", "--run-dir", str(tmp_path)]
    for name, port in ports.items():
        argv += [f"--{name}-port", str(port)]
    mark = uuid.uuid4().hex  # on lab up and all it starts, whenever it starts it
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "LAB_TEST_TRY": mark},
    )
    try:
        locust = f"http://127.0.0.1:{ports['locust']}"
        wait_until(lambda: proc.poll() is not None or answers(f"{locust}/metrics"), timeout=90)
        assert proc.poll() is None, proc.communicate()[0]
        children = [
            int(p)
            for p in subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True
            ).stdout.split()
        ]
        assert len(children) >= 5, children  # the parts, and the guardian
        groups = [os.getpgid(pid) for pid in children]
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_until(lambda: not children_alive(children), timeout=20), children_alive(children)
    # nginx's workers are in its group, not children of lab up.
    assert wait_until(lambda: not any(group_alive(g) for g in groups), timeout=10)
    # The proxy, started after the shared parts, may have been starting as lab up was killed.
    assert wait_until(lambda: not marked_processes("LAB_TEST_TRY", mark), timeout=15), marked_processes(
        "LAB_TEST_TRY", mark
    )
    for port in ports.values():
        assert not answers(f"http://127.0.0.1:{port}/"), port


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_lab_up_names_the_valid_cases_for_a_bad_one():
    lab = Path(sys.executable).with_name("lab")
    r = subprocess.run([str(lab), "up", "singleton-netty"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "unknown case 'singleton-netty'; valid cases: singleton-cio" in r.stderr


def test_a_busy_port_is_named_with_its_option_before_anything_starts(tmp_path: Path):
    lab = Path(sys.executable).with_name("lab")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run(
            [str(lab), "up", "singleton-cio", "--proxy-port", str(port), "--run-dir", str(tmp_path / "run")],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"lab: cannot start: port {port} (the proxy) is in use: free it, or choose another with --proxy-port"
    )
    assert not (tmp_path / "run").exists()  # nothing was started, nothing written


def test_a_second_start_writes_little_once_the_static_files_exist(tmp_path: Path):
    """The 117 MB of static files are generated once per checkout, not per start."""
    from ktor_lab.parts import nginx
    from ktor_lab.processes import free_port as fp

    first, second = tmp_path / "a", tmp_path / "b"
    for run in (first, second):
        nginx.start(run, nginx.NginxPorts(fp(), fp())).stop()
    size = sum(f.stat().st_size for f in second.rglob("*") if f.is_file())
    assert size < 5 << 20, size
    assert (nginx.shared_files_dir() / "100m.bin").stat().st_size == 100 << 20


def test_a_port_left_in_time_wait_by_an_earlier_run_is_free_and_a_listener_is_not():
    import socket

    from ktor_lab.processes import port_in_use

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    assert port_in_use(port)  # listening
    accepted.close()  # the server's side closes first: its port stays in TIME_WAIT
    client.close()
    server.close()
    assert not port_in_use(port), "a TIME_WAIT connection of an earlier run is not a listener"


@pytest.mark.parametrize(
    "argv",
    [
        ["study", "replay", "--cases", "singleton-cio", "--loads", "rate/250", "--warmup", "10", "--out"],
        ["bench", "--cases", "singleton-cio", "--duration", "5", "--run-dir"],
        ["verify", "--run-dir"],
    ],
    ids=["study", "bench", "verify"],
)
def test_a_command_started_in_the_background_stops_on_sigint_and_leaves_nothing(tmp_path: Path, argv):
    """A study, a benchmark or a check started as a shell's background job (`lab study ... &`)
    inherits SIGINT as ignored; `kill -INT` (or Ctrl-C after `fg`) must still stop it, with its
    parts. (SIGKILL and SIGTERM: the guardian of processes.py ends the parts in any case.)"""
    lab = Path(sys.executable).with_name("lab")
    proc = subprocess.Popen(
        [str(lab), *argv, str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )

    def children() -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    try:
        # nginx, then Prometheus or a proxy: parts of its own are up.
        assert wait_until(lambda: proc.poll() is not None or len(children()) >= 2, timeout=90)
        assert proc.poll() is None, proc.communicate()[0]
        pids = children()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out  # interrupted, not a finished command
    assert wait_until(lambda: not children_alive(pids), timeout=15), children_alive(pids)
