"""`lab study dispatchers`: threads, revisited. Does a virtual thread per task (Loom), or a larger IO
pool, remove the thread cost of the engines that block one per request, at what CPU and latency?

Two `lab run`s of CIO, OkHttp and Java, both lifetimes, on JDK 25 with the client's dispatcher
`io` (Dispatchers.IO, 64 threads), `virtual` and `io:256` (`--java 17,25` adds JDK 17, where
virtual threads are skipped):
- `slow`, the threads study's question: 100 requests in flight at once, each answered by nginx
  after 2 s (the `slow` scenario, 100 users that never wait);
- `distance`, the distance study's far rows: 100 requests a second to an upstream 80 ms away.
A dispatcher a case cannot take (virtual threads before JDK 21; Apache's and Apache5's own I/O
reactors) is skipped by name. Threads (live, active unparked, carriers), pinned virtual threads,
CPU per request, latency and heap are compared per change of dispatcher or JDK.
"""

from __future__ import annotations

from .plans import Part, PlanStudy

CASES = "singleton-cio,singleton-okhttp,singleton-java,per-call-cio,per-call-okhttp,per-call-java"
EACH = ("--cases", CASES, "--dispatcher", "io,virtual,io:256", "--java", "25")

STUDY = PlanStudy(
    name="dispatchers",
    title="Threads, revisited: virtual threads and a larger IO pool per engine",
    help="threads, revisited: platform threads, virtual threads and a larger IO pool per engine",
    question="Does a virtual thread per task, or a larger IO pool, take away the threads the engines "
    "that block one per request hold, and at what CPU and latency? CIO, OkHttp and Java on JDK 25 "
    "with each dispatcher, with 100 slow requests in flight and at a fixed rate 80 ms from the upstream.",
    parts=(
        Part(
            "slow",
            "100 requests in flight, each answered after 2 s",
            (*EACH, "--scenarios", "slow", "--loads", "closed/100/0"),
        ),
        Part(
            "distance",
            "100 requests a second to an upstream 80 ms away",
            (*EACH, "--rtt", "80", "--loads", "rate/100/200"),
        ),
    ),  # fmt: skip
    compares=("dispatcher", "java"),
    figures=("rps", "p99", "cpu_no_jit", "threads", "unparked", "carriers", "pinned", "heap"),
)
