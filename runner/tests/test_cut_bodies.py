"""The proxy's first promise, where its races live: a cut body never passes on as complete.

For every case, both ways, at every cut point (inside a chunk, where the next chunk would start,
inside a Content-Length body), closed by FIN or RST after a pause of 0, 0.1 or 0.5 s, idle and
with every core busy: the count passed as complete must be 0. `--cut-tries N` tries per case,
direction and machine state (30 here and in CI, 300 in `make test-cuts`), `cuts.IN_FLIGHT` at once:
their pauses overlap, and each cut meets a proxy that serves other callers meanwhile.

- Up: the caller cuts its PUT; the fault server logs whether the body it got ended by its own
  framing (the last chunk, all of its Content-Length). The caller gets no 2xx.
- Down: the fault server cuts a 1 MiB answer after 300,000 bytes; the caller's reply must not be a
  200 whose framing says whole, and the proxy must not send the request again once the answer
  began. CIO's own defect (it ends a chunked body that stops where the
  next chunk would start as if complete: docs/proxy.md) is held apart: the proxy cannot see it
  (cuts.engine_sees).

Netty's leak detector runs at its paranoid level in every proxy here; at the end of each case the
proxy collects its garbage (jcmd GC.run) and serves a few more requests, so that a buffer dropped
without release on a cut path is reported, and the test fails on it.
"""

from __future__ import annotations

import pytest

from conftest import machine
from ktor_lab.parts import cuts, raw_http


@pytest.fixture(scope="session")
def cut_tries(request) -> int:
    return request.config.getoption("--cut-tries")


@pytest.fixture
def cut_proxy(fault_proxy):
    """The case's proxy in front of the fault server (conftest.fault_proxy, shared with
    test_proxy_faults.py), with Netty's leak detector on."""
    return fault_proxy


@pytest.mark.parametrize("state", ["idle", "busy"])
def test_a_cut_upload_never_reaches_the_upstream_as_complete(cut_proxy, fault_server, cut_tries, state):
    tag = f"up-{cut_proxy.case}-{state}"
    with machine(state):
        tally = cuts.try_cut_uploads(cut_proxy.url, fault_server, cuts.cuts(cut_tries), tag)
    assert not tally.passed, f"{tally}: {tally.passed}"
    assert not [a for a in tally.answers if a.startswith("2")], str(tally)
    # The proxy serves on: a whole upload passes whole.
    reply = raw_http.exchange(
        cut_proxy.url, b"PUT /upload HTTP/1.1\r\nHost: lab\r\nContent-Length: 5\r\n\r\nhello"
    )
    assert (reply.status, reply.body) == (200, b'{"bytes": 5, "complete": true}'), reply


@pytest.mark.parametrize("state", ["idle", "busy"])
def test_a_cut_download_never_reaches_the_caller_as_whole(cut_proxy, fault_server, cut_tries, state):
    engine = cut_proxy.case.rsplit("-", 1)[1]
    cut_list = cuts.cuts(cut_tries, lambda cut: cuts.engine_sees(engine, cut))
    tag = f"down-{cut_proxy.case}-{state}"
    with machine(state):
        tally = cuts.try_cut_downloads(cut_proxy.url, cut_list, tag)
    assert not tally.passed, f"{tally}: {tally.passed}"
    # A request sent again once the answer had begun leaves the caller's download stalled until a
    # timeout (HttpClient 5 did so after a reset, docs/proxy.md): each try reaches the upstream once.
    again = fault_server.sent_again(tag)
    assert not again, f"sent again after the answer began: {again}"
    if engine == "cio":
        # Ktor's decodeChunked (ktor-http-cio 3.4.0 and 3.5.1) ends its loop when the input ends where
        # the next chunk's size line would start: CIO ends the body as if complete. When this fails,
        # Ktor fixed it: hold CIO to every cut point above.
        reply = cuts.cut_download(cut_proxy.url, cuts.Cut("chunk-boundary", "fin", 0.0), "cio-defect")
        assert (reply.status, reply.whole, len(reply.body)) == (200, True, cuts.DOWNLOAD_SENT), reply
    reply = raw_http.exchange(cut_proxy.url, raw_http.get("/ok"))
    assert (reply.status, reply.body) == (200, b"ok\n"), reply
