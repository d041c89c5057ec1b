"""`lab study protocols`: what TLS and HTTP/2 to the upstream change, per engine and lifetime.

One `lab run`: every case over plain HTTP/1.1, HTTP/1.1 over TLS and HTTP/2 over TLS (h2 where the
engine speaks it: not CIO, not Apache 4) at one fixed rate, so CPU per request, threads and
latency compare at equal work. Each row carries the new upstream connections and full TLS
handshakes per 1,000 requests, from nginx's side. Large uploads over TLS and h2 are the streaming
study's (`lab study streaming --protocols http,https,h2`).
"""

from __future__ import annotations

from .plans import Part, PlanStudy

STUDY = PlanStudy(
    name="protocols",
    title="Protocols: TLS and HTTP/2 between the proxy and the upstream",
    help="every case over http, https and h2 at one fixed rate: CPU, latency, threads, handshakes",
    question="What do TLS and HTTP/2 between the proxy and nginx cost each engine and lifetime, at "
    "equal work? Every case over http, https and h2 at the same fixed rate; each change of protocol "
    "is tested over the JVMs and given with its interval.",
    parts=(
        Part(
            "rate",
            "every case over each protocol at 200 requests a second",
            ("--protocols", "http,https,h2", "--loads", "rate/200/40"),
        ),
    ),
    compares=("protocol",),
    figures=("p50", "p99", "cpu_no_jit", "threads", "heap", "conns", "tls_full"),
    notes=(
        "Large uploads and downloads over TLS and h2 (the upload study's 15 MB): "
        "`lab study streaming --protocols http,https,h2`.",
    ),
)
