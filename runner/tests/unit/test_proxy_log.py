"""A run flags the exceptions its proxy logged with a stack trace (measure.proxy_log, the
`proxy-exceptions` flag), from this proxy's own lines of its log, and keeps the count in results.json."""

from __future__ import annotations

from ktor_lab import measure, processes, verdict
from ktor_lab.results import Load, Plan, Results, Run
from ktor_lab.warmup import Warmup

# As the proxy logged it (Apache5, HttpClient 5 closed from another thread: docs/proxy.md), between
# lines that are not exceptions: the start-up line and the proxy's own note of an upstream failure.
LOG = """\
15:01:58.101 INFO  lab.proxy - engine apache5, lifetime per-call
15:02:01.512 WARN  lab.proxy.upstream - upstream failed: java.net.SocketException: Connection reset
15:02:04.962 ERROR o.a.h.c.http.impl.async - null
java.util.ConcurrentModificationException: null
\tat java.base/java.util.HashMap$HashIterator.nextNode(HashMap.java:1597)
\tat org.apache.hc.core5.reactor.SingleCoreIOReactor.processEvents(SingleCoreIOReactor.java:172)
15:02:04.971 ERROR o.a.h.c.http.impl.async - null
java.util.ConcurrentModificationException: null
\tat java.base/java.util.HashMap$HashIterator.nextNode(HashMap.java:1597)
15:02:05.003 WARN  io.netty.channel.DefaultChannelPipeline - An exceptionCaught() event was fired
java.io.IOException: Broken pipe
\tat java.base/sun.nio.ch.SocketDispatcher.write0(Native Method)
Caused by: java.lang.IllegalStateException: closed
\tat lab.proxy.Forwarder.forward(Forwarder.kt:80)
\t... 12 common frames omitted
Exception in thread "lab-watchdog" java.lang.OutOfMemoryError: Java heap space
\tat lab.proxy.Watchdog$Watch.run(Watchdog.kt:70)
"""


def a_run() -> Run:
    return Run(
        "per-call-apache5", "apache5", "per-call", "static-small", Load("closed", 50), 1, Warmup(20, True)
    )


def test_exceptions_with_a_stack_trace_are_counted_by_class_and_the_first_is_quoted():
    found = measure.proxy_log(LOG)
    assert found.exceptions == 4  # a "Caused by" belongs to the one before; a one-line note is no trace
    assert found.kinds == {
        "java.util.ConcurrentModificationException": 2,
        "java.io.IOException": 1,
        "java.lang.OutOfMemoryError": 1,
    }
    assert found.first == (
        "15:02:04.962 ERROR o.a.h.c.http.impl.async - null / java.util.ConcurrentModificationException: null"
    )
    assert measure.proxy_log("15:01:58.101 INFO  lab.proxy - started\n").exceptions == 0
    assert measure.proxy_log(None) is None  # the log could not be read: no figure, no flag


def test_a_proxy_that_logged_an_exception_is_flagged_without_losing_its_capacity():
    run = a_run()
    assert verdict.judge(run).flags == []  # no count (an older results.json): no flag
    run.proxy_log = measure.proxy_log("15:01:58.101 INFO  lab.proxy - started\n")
    assert verdict.judge(run).flags == []
    run.proxy_log = measure.proxy_log(LOG)
    v = verdict.judge(run)
    assert v.flags == ["proxy-exceptions"] and v.capacity
    assert "proxy-exceptions" not in verdict.RATE_FLAGS
    assert v.reasons == [
        "the proxy logged 4 exception(s) with a stack trace (ConcurrentModificationException x2, "
        "IOException x1, OutOfMemoryError x1); first: 15:02:04.962 ERROR o.a.h.c.http.impl.async - null"
        " / java.util.ConcurrentModificationException: null"
    ]


def test_the_count_is_kept_in_results_json():
    run = a_run()
    run.proxy_log = measure.proxy_log(LOG)
    plan = Plan(["per-call-apache5"], ["static-small"], [Load("closed", 50)])
    data = Results(plan, backend={}, environment={}, started="now", runs=[run]).to_json()
    back = Results.from_json(data).runs[0]
    assert back.proxy_log == run.proxy_log
    del data["runs"][0]["proxy_log"]  # a results.json of before the count
    assert Results.from_json(data).runs[0].proxy_log is None


def test_a_proxy_reads_only_its_own_lines_of_a_log_an_earlier_one_wrote_to(tmp_path):
    """The same case on the same port appends to the same log: each proxy's lines begin where the
    file ended when it started (Service.log_start)."""
    log = tmp_path / "proxy-per-call-apache5-18090.log"
    log.write_text(LOG)  # the previous proxy's
    service = object.__new__(processes.Service)  # a real Service starts a process (not in this tier)
    service.log = log
    service._log_file = open(log, "ab")  # noqa: SIM115 - as Service.__init__ opens it
    service.log_start = service._log_file.tell()
    try:
        service._log_file.write(b"15:03:00.000 INFO  lab.proxy - engine apache5\n")
        assert service.own_log() == "15:03:00.000 INFO  lab.proxy - engine apache5\n"
        assert measure.proxy_log(service.own_log()).exceptions == 0
    finally:
        service._log_file.close()
