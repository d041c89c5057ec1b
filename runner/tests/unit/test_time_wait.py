"""The window's sockets in TIME_WAIT: read from the kernel's table at its edges, so that what other
proxies on the host closed to the same port is not counted (they share the host's table)."""

import os
import socket
import time

from ktor_lab import machine
from ktor_lab.measure import upstream_port
from ktor_lab.metrics import Samples


def close_from_this_side(server: socket.socket, times: int = 1, local_port: int = 0) -> int:
    """`times` connections to `server`, each closed by the dialling side first, then by the server:
    the side that closed first keeps the socket in TIME_WAIT (60 s on Linux). Returns the last
    one's local port."""
    for _ in range(times):
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        c.bind(("127.0.0.1", local_port))
        c.connect(server.getsockname())
        accepted, _ = server.accept()
        port = c.getsockname()[1]
        c.close()
        accepted.close()
    return port


def in_time_wait(port: int) -> dict[str, float]:
    found = machine.sockets_in_time_wait(os.getpid(), port)
    assert found is not None
    return found


def test_the_sockets_closed_between_two_reads_are_the_new_ones_and_only_to_that_port():
    with socket.create_server(("127.0.0.1", 0)) as upstream, socket.create_server(("127.0.0.1", 0)) as other:
        port = upstream.getsockname()[1]
        close_from_this_side(upstream, 3)  # before the window: someone else's, still in TIME_WAIT
        before = in_time_wait(port)
        assert len(before) >= 3
        close_from_this_side(upstream, 5)  # in the window
        close_from_this_side(other, 4)  # to another port: not the upstream's
        after = in_time_wait(port)
        assert machine.new_in_time_wait(before, after) == 5, (before, after)
        assert all(key.endswith(f":{port:04X}") for key in after)
        # each expires within the kernel's 60 s
        assert all(0 < expires - time.monotonic() <= 60 for expires in after.values())


def test_a_tuple_the_kernel_reused_for_a_new_connection_counts_again_when_that_one_closes():
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        port = upstream.getsockname()[1]
        local = close_from_this_side(upstream)
        before = in_time_wait(port)
        # Linux lets a new connection take a tuple in TIME_WAIT a second after its last packet
        time.sleep(1.2)
        assert close_from_this_side(upstream, local_port=local) == local
        after = in_time_wait(port)
        assert set(after) == set(before)  # the same addresses...
        assert machine.new_in_time_wait(before, after) == 1  # ...but a new socket in TIME_WAIT


def test_a_process_that_is_gone_gives_none_not_zero():
    assert machine.sockets_in_time_wait(2**22 + 1, 80) is None


def test_the_port_the_proxy_dials_comes_from_its_upstream_setting():
    def info(upstream: str) -> Samples:
        return Samples(f'lab_proxy_info{{case="singleton-cio",upstream="{upstream}"}} 1.0\n')

    assert upstream_port(info("http://127.0.0.1:48365")) == 48365
    assert upstream_port(info("https://nginx")) == 443
    assert upstream_port(info("http://nginx")) == 80
    assert upstream_port(Samples("lab_proxy_info 1.0\n")) is None
