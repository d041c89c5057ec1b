"""`lab study distance`: what the distance to the upstream does to each engine and lifetime.

On loopback a new connection costs nothing, so a per-call client and CIO without pipelining look
cheap. This study puts a network between the proxy and nginx (Toxiproxy: an added round trip of
0, 20 and 80 ms, an availability zone and the internet) and runs every case at each distance at one
fixed rate, with enough users that a slow case shows as latency and errors, not as a lower offered
rate; beside it, CIO with pipelining on. Each change of distance is tested over the JVMs
per case, and at each distance the first screen weighs per call against singleton per engine.

Toxiproxy's TCP handshake is local: a new connection's own round trip is added as a model (new
connections per request x RTT, the `connect RTT` figure, docs/network.md); TLS handshakes cross the
network and are measured (`--protocols http,https`).
"""

from __future__ import annotations

from .plans import Part, PlanStudy

EACH = ("--rtt", "0,20,80", "--loads", "rate/100/200")

STUDY = PlanStudy(
    name="distance",
    title="Distance: what the round trip to the upstream does to each engine and lifetime",
    help="every case at 0, 20 and 80 ms to the upstream: latency, threads, connections, CPU",
    question="What does the distance to the upstream do to each engine and lifetime? Every case at 0, 20 "
    "and 80 ms of round trip (Toxiproxy), at 100 requests a second with up to 200 in flight; each change "
    "of distance is tested over the JVMs and given with its interval. The guide's rows at 20 and 80 ms "
    "([guide.md](../guide.md)) are runs of their own at 200 requests a second: where the two pages read "
    "an engine differently, the load differs, and only one run's rows compare.",
    parts=(
        Part(
            "cases",
            "every case at each distance, and CIO with pipelining on",
            (*EACH, "--pipelining", "off,on"),
        ),
    ),
    compares=("rtt_ms", "protocol", "pipelining"),
    figures=("p50", "p99", "errors", "cpu_no_jit", "threads", "conns", "connect_rtt"),
    screens=True,
)
