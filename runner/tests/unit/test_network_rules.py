"""The network between the proxy and nginx without any part: the values and their checks, the
toxics they make, compose's one-shot that sets them, and the API calls (against a stand-in API)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ktor_lab import network
from ktor_lab.network import Network, NetworkError
from ktor_lab.parts import compose, toxiproxy
from ktor_lab.paths import TOXIPROXY_DIR


def test_a_round_trip_is_half_each_way_the_odd_millisecond_on_the_way_there():
    toxics = {t["name"]: t for t in Network(21, 3).toxics()}
    assert toxics["lab_latency_upstream"]["attributes"] == {"latency": 11, "jitter": 2}
    assert toxics["lab_latency_downstream"]["attributes"] == {"latency": 10, "jitter": 1}
    assert {t["stream"] for t in toxics.values()} == {"upstream", "downstream"}
    one = Network(1).toxics()  # 1 ms there, nothing back: still one round trip of 1 ms
    assert [(t["stream"], t["attributes"]["latency"]) for t in one] == [("upstream", 1)]
    bandwidth = [t for t in Network(0, 0, 500).toxics() if t["type"] == "bandwidth"]
    assert [(t["stream"], t["attributes"]) for t in bandwidth] == [
        ("upstream", {"rate": 500}),
        ("downstream", {"rate": 500}),
    ]


def test_all_zero_is_no_network_at_all():
    off = Network.from_env({})
    assert off == Network() and not off.on and off.toxics() == [] and off.describe() == "none"
    assert Network(20, 2, 1000).describe() == "RTT 20 ms +-2 ms, 1,000 KB/s per connection each way"
    assert Network(0, 0, 10).on


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {"UPSTREAM_RTT_MS": "20ms"},
            "UPSTREAM_RTT_MS='20ms' is not valid; valid values: whole milliseconds",
        ),
        ({"UPSTREAM_RTT_MS": "10001"}, "UPSTREAM_RTT_MS='10001' is not valid"),
        ({"UPSTREAM_JITTER_MS": "-2"}, "UPSTREAM_JITTER_MS='-2' is not valid"),
        (
            {"UPSTREAM_BANDWIDTH_KBPS": "1.5"},
            "UPSTREAM_BANDWIDTH_KBPS='1.5' is not valid; valid values: KB/s",
        ),
        (
            {"UPSTREAM_RTT_MS": "4", "UPSTREAM_JITTER_MS": "5"},
            "UPSTREAM_JITTER_MS=5 is more than UPSTREAM_RTT_MS=4",
        ),
    ],
    ids=["unit", "too-long", "negative", "fraction", "jitter-above-rtt"],
)
def test_a_bad_value_is_one_line_naming_its_variable(env, message):
    with pytest.raises(NetworkError) as e:
        Network.from_env(env)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)  # a plan's ValueError: `lab run` prints it as one line


def test_compose_s_one_shot_stops_on_a_bad_value_before_calling_toxiproxy():
    r = subprocess.run(
        [sys.executable, str(TOXIPROXY_DIR / "lab_network.py")],
        env={"UPSTREAM_RTT_MS": "far", "TOXIPROXY_URL": "http://127.0.0.1:9"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "network: configuration error: UPSTREAM_RTT_MS='far' is not valid; valid values: " + (
        "whole milliseconds from 0 to 10000\n"
    )


class FakeToxiproxy(BaseHTTPRequestHandler):
    """Toxiproxy's API as far as the lab uses it: /reset, toxics per proxy, /version."""

    calls: list[tuple[str, str, object]] = []
    toxics: dict[str, list] = {}

    def _answer(self, body: object, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.calls.append(("POST", self.path, body))
        if self.path == "/reset":
            self.toxics.clear()
            self.send_response(204)
            self.end_headers()
            return
        proxy = self.path.split("/")[2]
        self.toxics.setdefault(proxy, []).append(body)
        self._answer(body)

    def do_GET(self):  # noqa: N802
        if self.path == "/version":
            return self._answer({"version": "2.12.0"})
        self._answer(self.toxics.get(self.path.split("/")[2], []))

    def log_message(self, *_):
        pass


@pytest.fixture
def fake_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeToxiproxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeToxiproxy.calls, FakeToxiproxy.toxics = [], {}
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_toxics_replace_whatever_was_set_on_every_proxy(fake_api):
    assert network.wait_for_api(fake_api, 5) and network.version(fake_api) == "2.12.0"
    network.apply(fake_api, Network(80))
    network.apply(fake_api, Network(20))
    assert network.proxy_names() == ["nginx", "nginx-tls"]
    after_reset = FakeToxiproxy.calls[FakeToxiproxy.calls.index(("POST", "/reset", None), 1) :]
    assert [(m, p) for m, p, _ in after_reset] == [
        ("POST", "/reset"),
        ("POST", "/proxies/nginx/toxics"),
        ("POST", "/proxies/nginx/toxics"),
        ("POST", "/proxies/nginx-tls/toxics"),
        ("POST", "/proxies/nginx-tls/toxics"),
    ]
    read = network.read(fake_api)
    assert {t["attributes"]["latency"] for t in read["nginx-tls"]} == {10}


def test_natively_each_proxy_listens_on_loopback_and_forwards_to_nginx_s_port_of_its_kind(tmp_path):
    path, ports = toxiproxy.write_config(tmp_path, {"http": 18080, "tls": 18443})
    rendered = {p["name"]: p for p in json.loads(path.read_text())}
    assert rendered["nginx"]["upstream"] == "127.0.0.1:18080"
    assert rendered["nginx-tls"]["upstream"] == "127.0.0.1:18443"
    assert rendered["nginx-tls"]["listen"] == f"127.0.0.1:{ports['nginx-tls']}"
    # The same proxies as compose's (toxiproxy/proxies.json), and the same version as its image.
    assert set(rendered) == set(network.proxy_names())
    assert toxiproxy.image_version() == compose.dotenv()["TOXIPROXY_IMAGE"].rsplit(":", 1)[1]
    assert "network" in compose.EXTRA_OVERLAYS
