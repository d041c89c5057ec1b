"""The upstream (nginx/) as the native runner renders it, against a real nginx on loopback."""

from __future__ import annotations

import hashlib
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import payload, sha256_of_stream
from ktor_lab.parts import nginx
from ktor_lab.processes import free_port

SIZES = {"1k.bin": 1024, "100k.bin": 102400, "1m.bin": 1 << 20, "15m.bin": 15 << 20, "100m.bin": 100 << 20}


@pytest.mark.parametrize("name,size", SIZES.items(), ids=SIZES)
def test_static_file_size_and_checksum(upstream, name, size):
    digest = hashlib.sha256(payload(size)).hexdigest()
    assert upstream.manifest()[name] == {"bytes": size, "sha256": digest}
    with requests.get(f"{upstream.url}/files/{name}", stream=True, timeout=30) as r:
        assert r.status_code == 200
        assert sha256_of_stream(r) == (size, digest)


def test_tiny_page_is_the_earlier_labs_success(upstream):
    for path in ("/", "/files/tiny.txt"):
        r = requests.get(f"{upstream.url}{path}", timeout=5)
        assert (r.status_code, r.text) == (200, "Success!\n")


@pytest.mark.parametrize("ms", [200, 1000])
def test_delay_takes_the_asked_time(upstream, ms):
    t0 = time.monotonic()
    r = requests.get(f"{upstream.url}/delay", params={"ms": ms}, timeout=10)
    elapsed = time.monotonic() - t0
    assert r.status_code == 200
    assert ms / 1000 * 0.9 <= elapsed <= ms / 1000 * 1.1 + 0.05


def test_delay_default_is_2s_and_bad_values_are_refused(upstream):
    t0 = time.monotonic()
    assert requests.get(f"{upstream.url}/delay", timeout=10).text == "delayed 2000 ms\n"
    assert 1.8 <= time.monotonic() - t0 <= 2.25
    assert requests.get(f"{upstream.url}/delay?ms=abc", timeout=5).status_code == 400
    assert requests.get(f"{upstream.url}/delay?ms=-5", timeout=5).status_code == 400


@pytest.mark.slow
def test_500_concurrent_delays_are_not_serialized(upstream):
    def one(_):
        t0 = time.monotonic()
        r = requests.get(f"{upstream.url}/delay?ms=2000", timeout=20)
        return r.status_code, time.monotonic() - t0

    t0 = time.monotonic()
    with ThreadPoolExecutor(500) as pool:
        results = list(pool.map(one, range(500)))
    wall = time.monotonic() - t0
    assert all(status == 200 for status, _ in results)
    assert min(e for _, e in results) >= 1.8
    # Serialized, 500 x 2 s would overlap by 1 (2 lanes: 2); a machine too busy to start 500
    # threads at once still has most of them waiting on nginx together. A relation, not a speed.
    in_flight = sum(e for _, e in results) / wall
    assert in_flight >= 100, f"500 x 2 s delays took {wall:.1f} s: {in_flight:.0f} in flight on average"


@pytest.mark.parametrize("size", [0, 1, 15 << 20, 100 << 20], ids=["0B", "1B", "15MB", "100MB"])
def test_upload_sink_answers_count_and_digest(upstream, size):
    body = payload(size)
    r = requests.put(f"{upstream.url}/upload", data=body, timeout=60)
    assert r.status_code == 200
    assert r.json() == {"bytes": size, "sha256": hashlib.sha256(body).hexdigest()}


def test_upload_sink_takes_chunked_bodies_and_post(upstream):
    body = payload(2_000_003)
    r = requests.post(f"{upstream.url}/upload", data=iter([body[:1000], body[1000:]]), timeout=30)
    assert r.json() == {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    assert requests.get(f"{upstream.url}/upload", timeout=5).status_code == 405


def test_20_concurrent_uploads_keep_apart_and_leave_no_files(upstream):
    bodies = [payload(1_000_000 + i * 7919)[::-1] for i in range(20)]  # all different

    def one(body: bytes) -> bool:
        r = requests.put(f"{upstream.url}/upload", data=body, timeout=60)
        return r.json() == {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}

    with ThreadPoolExecutor(20) as pool:
        assert all(pool.map(one, bodies))
    body_dir = upstream.files.parent / "tmp" / "body"
    assert [p for p in body_dir.rglob("*") if p.is_file()] == []


def stub_status(upstream) -> dict[str, int]:
    text = requests.get(f"{upstream.status_url}/stub_status", timeout=5).text
    accepts, handled, reqs = map(int, re.search(r"\n\s*(\d+) (\d+) (\d+)", text).groups())
    return {
        "accepts": accepts,
        "handled": handled,
        "requests": reqs,
        "active": int(re.search(r"Active connections: (\d+)", text).group(1)),
    }


def test_stub_status_counts_move(upstream):
    before = stub_status(upstream)
    with requests.Session() as s:
        for _ in range(10):
            s.get(f"{upstream.url}/files/1k.bin", timeout=5)
    after = stub_status(upstream)
    assert after["requests"] - before["requests"] >= 11  # 10 + this scrape
    assert after["accepts"] > before["accepts"]


def test_stub_status_is_off_the_load_listener(upstream):
    assert requests.get(f"{upstream.url}/stub_status", timeout=5).status_code == 404


def test_rendered_config_passes_nginx_t(tmp_path):
    conf = nginx.write_conf(tmp_path, nginx.NginxPorts(free_port(), free_port()))
    nginx.check(conf)  # raises with nginx's words if refused
    text = (tmp_path / "conf.d" / "default.conf").read_text()
    assert "${" not in text
    assert "(?<code>" in text  # nginx's own syntax is left alone
