"""What the lab compares, typed: a case is a client lifetime and an engine, and the dimensions a
run may add (the Ktor release, the JDK, the upstream protocol, the network's round trip).

This module is the one list of engines and lifetimes (`ENGINE_TITLES`, `LIFETIME_TITLES`) and
the one place a case's text forms are parsed and written:

    Case.parse("per-call-okhttp")                        # a case of the matrix
    Case.parse("per-call-okhttp ktor 3.5.1 jdk 25")      # with dimensions, as reports name rows

`Case.proxy_env()` is the proxy's environment for the case, natively (parts/proxy.py), in
compose (the overlays compose/<lifetime>-<engine>.yml hold exactly it: a test keeps them equal)
and in reports. The scenarios are the locustfile's (`@scenario("...")` on its user classes),
read from it here.

Adding an engine: a line in ENGINE_TITLES and ENGINE_FACTS (and HTTP1_ONLY if it has no HTTP/2),
its file in proxy-app/.../engines/, its overlays;
adding a dimension: its entry in DIMENSIONS and its field of Case; its option, its place in a
plan, a run and a report, and its proxy variables everywhere follow (docs/README.md).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from . import network, versions
from .paths import LOCUST_DIR

# The engines, in the order tables list them, each with what it is (the overlays' first line).
ENGINE_TITLES = {
    "cio": "CIO (Ktor's coroutine engine)",
    "apache": "Apache (HttpAsyncClient 4)",
    "apache5": "Apache5 (HttpClient 5)",
    "okhttp": "OkHttp",
    "java": "Java (the JDK's HttpClient)",
}
# What a user should know of each engine itself, in one table: its `fact` (said next to its rows in
# reports, studies and the guide), and the short reason the guide's scorecard gives where the engine
# stands out: on a figure (by its key: `cpu`, `conns`, `tls_full`, `threads`), or for a risk (`leak`,
# `unlimited`: no limit on its connections) or a case not run (`no_h2`, `dispatcher`).
ENGINE_BEHAVIOUR = {
    "cio": {
        "fact": "speaks HTTP/1.x only (no HTTP/2; its own TLS stops at 1.2, without ALPN or session "
        "resumption) and, without pipelining, opens a dedicated connection per request even as a "
        "singleton (`Endpoint.makeDedicatedRequest`); its pipelining fails under load on 3.5.2 "
        "(KTOR-7009) and works on 3.6.1 (in-process, a connection kept for many requests), which "
        "the proxy is not built on here, so its keep-alive applies to nothing in the lab",
        "conns": "a connection per request, no pipelining",
        "tls_full": "short of the rate: a full TLS handshake per request",
        "no_h2": "no HTTP/2",
    },
    "apache": {
        "fact": "Ktor's apache engine (HttpAsyncClient 4) is deprecated since Ktor 3.4.0 in favour of "
        "apache5, and not published after 3.4.1; no HTTP/2",
        "no_h2": "no HTTP/2",
    },
    "apache5": {
        "fact": "HttpClient 5: HTTP/1.1 and HTTP/2 (over TLS it picks h2 by itself unless told otherwise)",
        "dispatcher": "its own I/O threads: a dispatcher changes nothing",
    },
    "okhttp": {
        "fact": "blocks one thread of its dispatcher per request in flight, up to its per-host limit "
        "(5 by default: the lab raises it to its connection limit)",
        "threads": "a thread per request in flight",
    },
    "java": {
        "fact": "the JDK's HttpClient: cannot limit connections in flight; HTTP/2 by default in Ktor "
        "(over cleartext an h2c upgrade; the lab asks for HTTP/1.1 unless h2 is the case); a client "
        "per call keeps its selector thread until the garbage collector finds it",
        "cpu": "Ktor's dispatcher, 4x OkHttp's",
        "unlimited": "no connection limit",
        "leak": "leaks threads",
    },
}
ENGINE_FACTS = {engine: behaviour["fact"] for engine, behaviour in ENGINE_BEHAVIOUR.items()}
# The Java packages of each engine's own code (the profiler charges a sample to the engine whose
# code is on top of it: parts/jfr.py).
ENGINE_PACKAGES = {
    "cio": ("io.ktor.client.engine.cio.",),
    "apache": ("org.apache.http.", "io.ktor.client.engine.apache."),
    "apache5": ("org.apache.hc.", "io.ktor.client.engine.apache5."),
    "okhttp": ("okhttp3.", "okio.", "io.ktor.client.engine.okhttp."),
    "java": ("jdk.internal.net.http.", "java.net.http.", "io.ktor.client.engine.java."),
}
# How long one HttpClient lives.
LIFETIME_TITLES = {
    "singleton": "one HttpClient for the whole process",
    "per-call": "a new HttpClient for every request, closed after it",
}
ENGINES = tuple(ENGINE_TITLES)
# The engines without HTTP/2: the proxy refuses CLIENT_HTTP_VERSION=2 through them at its start.
HTTP1_ONLY = ("cio", "apache")
HTTP2_ENGINES = tuple(e for e in ENGINES if e not in HTTP1_ONLY)
LIFETIMES = tuple(LIFETIME_TITLES)
# The upstream protocols a case may name, each with what it is: the proxy calls nginx over plain
# HTTP/1.1, over TLS with HTTP/1.1, or over TLS with HTTP/2 (chosen by ALPN).
PROTOCOL_TITLES = {"http": "HTTP/1.1, no TLS", "https": "HTTP/1.1 over TLS", "h2": "HTTP/2 over TLS"}
PROTOCOLS = tuple(PROTOCOL_TITLES)


@dataclass(frozen=True)
class Dimension:
    """What a case may vary beyond its lifetime and engine, declared once: the rest of the lab
    reads it from here. It makes lab run's and the studies' option (`option`, with `help`), a
    plan's values (Plan.dims[field]), a run's record (Run.dims[field], or the Run attribute the
    proxy reports it in: `reported`), a report's label and order (`title`, `show`, `order`), and the
    proxy's variables natively, in compose and in Swarm (`env`, `variables`).

    `field` is the Case field (its default: the dimension's default, left out of names); `word`
    names it in a case's name (`singleton-cio ktor 3.5.2 jdk 25`). `parse` reads a value
    (ValueError naming what is valid); `refuse` says why a case cannot take its value (None: it
    can), so a matrix skips that combination and names it; `env` is the proxy's variables for it."""

    field: str
    word: str
    option: str
    title: str
    help: str
    parse: Callable[[str], object] = str
    show: Callable[[object], str] = str
    refuse: Callable[[Case], str | None] = lambda case: None
    env: Callable[[object], dict[str, str]] = lambda value: {}
    # The proxy variables `env` may set, and their values when the dimension is at its default
    # (compose interpolates them: a project switching cases sets them back).
    variables: tuple[tuple[str, str], ...] = ()
    # How a report orders the values it shows (`show`'s text): numbers as numbers by default.
    order: Callable[[str], tuple] = lambda text: _number_key(text)
    # The Run attribute the proxy reports the value in (the release and the JDK that ran), or ""
    # when a run records the case's own value (Run.dims).
    reported: str = ""

    def value_of(self, case: Case) -> object:
        return getattr(case, self.field)

    @functools.cached_property
    def default(self) -> object:
        return next(f.default for f in dataclasses.fields(Case) if f.name == self.field)

    @property
    def dest(self) -> str:
        """The option's attribute in argparse's namespace (--max-connections: max_connections)."""
        return self.option.removeprefix("--").replace("-", "_")

    def values(self, text: str | None) -> list:
        """An option's comma-separated values, each parsed (ValueError naming the option and what
        is valid)."""
        try:
            return [self.parse(v.strip()) for v in (text or "").split(",") if v.strip()]
        except ValueError as e:
            raise ValueError(f"{self.option}: {e}") from None


def _number_key(text: str) -> tuple:
    """3.10.0 after 3.5.1, 64 before 1000: the numbers in a value compared as numbers."""
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[. ]", text or "") if p)


def _release(text: str) -> str:
    return versions.release(text).name


def _ktor_refusal(case: Case) -> str | None:
    try:
        return versions.release_of(case).proxy_refusal()
    except ValueError as e:
        return str(e)


def _protocol(text: str) -> str:
    if text not in PROTOCOLS:
        raise ValueError(f"protocol {text!r}: give one of {', '.join(PROTOCOLS)}")
    return text


def _http2_refusal(case: Case) -> str | None:
    if case.protocol == "h2" and case.engine in HTTP1_ONLY:
        return (
            f"{ENGINE_TITLES[case.engine]} speaks HTTP/1.1 only; use protocol https, or another engine "
            f"({', '.join(sorted(HTTP2_ENGINES))}) for h2"
        )
    return None


def _milliseconds(text: str) -> int:
    """A round trip: whole milliseconds (`50` or `50ms`), checked as UPSTREAM_RTT_MS is."""
    return network.value("UPSTREAM_RTT_MS", str(text).strip().removesuffix("ms"))


# The client's dispatcher (CLIENT_DISPATCHER): where the engine's coroutines and blocking calls
# run. `io`: Ktor's default, Dispatchers.IO (64 threads unless raised); `io:N`: that pool raised
# to N threads; `virtual`: a virtual thread per task (JDK 21+).
DISPATCHER_TITLES = {
    "io": "Dispatchers.IO, 64 threads (Ktor's default)",
    "io:N": "Dispatchers.IO raised to N threads (kotlinx.coroutines.io.parallelism)",
    "virtual": "a virtual thread per task (JDK 21 and later)",
}
# Engines whose I/O runs on threads of their own, which a dispatcher does not change: refused.
OWN_IO_THREADS = {
    "apache": "HttpAsyncClient 4's I/O reactor runs its own threads",
    "apache5": "HttpClient 5's I/O reactor runs its own threads",
}
VIRTUAL_THREADS_JDK = 21


def _dispatcher(text: str) -> str:
    text = text.strip()
    if text in ("io", "virtual") or (
        text.startswith("io:") and text[3:].isdigit() and 1 <= int(text[3:]) <= 4096
    ):
        return text
    raise ValueError(f"dispatcher {text!r}: give one of io, io:N (N threads, 1-4096), virtual")


def _dispatcher_refusal(case: Case) -> str | None:
    if case.dispatcher == "io":
        return None
    if case.engine in OWN_IO_THREADS:
        return f"dispatcher {case.dispatcher} changes nothing of {case.engine}: {OWN_IO_THREADS[case.engine]}"
    if case.dispatcher == "virtual":
        jdk = versions.jdk(case.java) if case.java else versions.default_jdk()
        if jdk is None or int(jdk.major) < VIRTUAL_THREADS_JDK:
            return (
                f"dispatcher virtual needs JDK {VIRTUAL_THREADS_JDK} or later (JDK "
                f"{jdk.major if jdk else '?'} here): add the JDK, e.g. jdk 25 (--java 25)"
            )
    return None


def _dispatcher_order(text: str) -> tuple:
    """io, then io:N by N, then virtual."""
    kind, _, size = text.partition(":")
    return (0 if text == "io" else 1 if kind == "io" else 2, int(size) if size.isdigit() else 0)


# The connection-pool limit (CLIENT_MAX_CONNECTIONS, proxy-app's ClientFactory): connections per
# upstream (and in all) each engine may open, and so OkHttp's and Apache5's threads in flight.
MAX_CONNECTIONS_DEFAULT = 1000
UNLIMITED_CONNECTIONS = {"java": "the JDK's HttpClient cannot limit its connections"}


def _connections(text: str) -> int:
    text = str(text).strip()
    if not text.isdigit() or not 1 <= int(text) <= 100_000:
        raise ValueError(f"max-connections {text!r}: give a whole number of connections, 1 to 100000")
    return int(text)


def _connections_refusal(case: Case) -> str | None:
    if case.max_connections != MAX_CONNECTIONS_DEFAULT and case.engine in UNLIMITED_CONNECTIONS:
        return (
            f"max-connections {case.max_connections} changes nothing of {case.engine}: "
            + (UNLIMITED_CONNECTIONS[case.engine])
        )
    return None


def _on_off(text: str) -> str:
    text = str(text).strip()
    if text not in ("off", "on"):
        raise ValueError(f"pipelining {text!r}: give off or on")
    return text


def _pipelining_refusal(case: Case) -> str | None:
    if case.pipelining == "on" and case.engine != "cio":
        return f"pipelining on is CIO's alone: {case.engine} keeps a pool of connections"
    return None


DIMENSIONS = (
    Dimension(
        "ktor", "ktor", "--ktor", "Ktor",
        "Ktor releases of ktor-releases.tsv, e.g. 3.4.0,3.5.1; a release other than the default is built "
        "into proxy-app/target/ktor-<release>/ on first use (default: the pom's)",
        parse=_release, refuse=_ktor_refusal, order=lambda v: _number_key(v), reported="ktor",
    ),
    Dimension(
        "java", "jdk", "--java", "JDK",
        "JDKs by major version (e.g. 17,25) or a JDK's folder (default: $JAVA_HOME's, else java on PATH)",
        show=lambda v: str(v).split(".")[0], reported="java_major",
    ),
    Dimension(
        "protocol", "protocol", "--protocols", "protocol",
        "between the proxy and nginx: " + ", ".join(f"{k} ({v})" for k, v in PROTOCOL_TITLES.items())
        + "; HTTP/2 needs one of " + ", ".join(HTTP2_ENGINES) + " (default: http)",
        parse=_protocol, refuse=_http2_refusal,
        env=lambda v: {} if v == "http" else {"CLIENT_HTTP_VERSION": "2" if v == "h2" else "1.1"},
        variables=(("CLIENT_HTTP_VERSION", "1.1"),),
        order=lambda v: (PROTOCOLS.index(v) if v in PROTOCOLS else len(PROTOCOLS),),
    ),
    Dimension(
        "rtt_ms", "rtt", "--rtt", "RTT",
        "round trips in ms added between the proxy and nginx, half each way, e.g. 0,1,20,80 (Toxiproxy; "
        "default: env UPSTREAM_RTT_MS for each case that names no rtt of its own; else 0, no network)",
        parse=_milliseconds, show=lambda v: f"{v} ms",
    ),
    Dimension(
        "dispatcher", "dispatcher", "--dispatcher", "dispatcher",
        "where the client's coroutines and blocking calls run: "
        + "; ".join(f"{k} ({v})" for k, v in DISPATCHER_TITLES.items())
        + " (default: io). Skipped for " + " and ".join(OWN_IO_THREADS)
        + ", whose I/O runs on threads of their own",
        parse=_dispatcher, refuse=_dispatcher_refusal,
        env=lambda v: {} if v == "io" else {"CLIENT_DISPATCHER": v},
        variables=(("CLIENT_DISPATCHER", "io"),),
        order=_dispatcher_order,
    ),
    Dimension(
        "max_connections", "connections", "--max-connections", "pool limit",
        "the client's connection-pool limit (CLIENT_MAX_CONNECTIONS), e.g. 64,1000: connections each engine "
        "may open, and so OkHttp's and Apache5's threads in flight "
        f"(default: {MAX_CONNECTIONS_DEFAULT}). Skipped for java, which cannot limit them",
        parse=_connections, refuse=_connections_refusal,
        env=lambda v: {} if v == MAX_CONNECTIONS_DEFAULT else {"CLIENT_MAX_CONNECTIONS": str(v)},
        variables=(("CLIENT_MAX_CONNECTIONS", str(MAX_CONNECTIONS_DEFAULT)),),
    ),
    Dimension(
        "pipelining", "pipelining", "--pipelining", "pipelining",
        "off or on: CIO sends requests on a connection before the answers of the earlier ones came "
        "(CLIENT_PIPELINING; default: off). Skipped for the other engines, which keep a pool instead",
        parse=_on_off, refuse=_pipelining_refusal,
        env=lambda v: {} if v == "off" else {"CLIENT_PIPELINING": "on"},
        variables=(("CLIENT_PIPELINING", "off"),),
        order=lambda v: (("off", "on").index(v) if v in ("off", "on") else 2,),
    ),
)  # fmt: skip
BY_WORD = {d.word: d for d in DIMENSIONS}
BY_FIELD = {d.field: d for d in DIMENSIONS}


@dataclass(frozen=True)
class Case:
    """One thing the lab measures. A dimension at its default ("" for ktor and java: the pom's
    release and the default java; `http`; 0 ms) is left out of the name."""

    lifetime: str
    engine: str
    ktor: str = ""  # a release of ktor-releases.tsv
    java: str = ""  # a JDK by major version or folder (versions.jdk)
    protocol: str = "http"  # between the proxy and the upstream
    rtt_ms: int = 0  # round trip added between the proxy and the upstream
    dispatcher: str = "io"  # where the client's coroutines run (DISPATCHER_TITLES)
    max_connections: int = MAX_CONNECTIONS_DEFAULT  # the connection-pool limit
    pipelining: str = "off"  # CIO's pipelining (CLIENT_PIPELINING)

    def __post_init__(self) -> None:
        if self.lifetime not in LIFETIMES or self.engine not in ENGINES:
            raise ValueError(f"unknown case {self.id!r}; valid cases: {', '.join(CASES)}")
        _protocol(self.protocol)
        if not isinstance(self.rtt_ms, int) or self.rtt_ms < 0:
            raise ValueError(f"rtt {self.rtt_ms!r}: give whole milliseconds, 0 or more")

    @classmethod
    def parse(cls, text: str) -> Case:
        """`per-call-okhttp`, optionally followed by dimensions as `word value` pairs
        (`ktor 3.5.1 jdk 25 protocol h2 rtt 50`); ValueError naming what is valid otherwise."""
        words = text.split()
        if not words:
            raise ValueError(f"unknown case {text!r}; valid cases: {', '.join(CASES)}")
        lifetime, engine = _split(words[0])
        dims: dict[str, object] = {}
        pairs = words[1:]
        if len(pairs) % 2:
            raise ValueError(f"case {text!r}: each dimension is a word and a value ({_dimension_help()})")
        for word, value in zip(pairs[::2], pairs[1::2], strict=True):
            if word not in BY_WORD:
                raise ValueError(f"case {text!r}: unknown dimension {word!r} ({_dimension_help()})")
            d = BY_WORD[word]
            # A name as reports write it is read back as is (a release a report marks "?", a JDK
            # by its major version); the other dimensions' values are parsed.
            dims[d.field] = value if d.reported else d.parse(value)
        return cls(lifetime, engine, **dims)  # type: ignore[arg-type]

    @property
    def id(self) -> str:
        """`per-call-okhttp`: the case without dimensions (its overlay's name, Locust's --lab-case)."""
        return f"{self.lifetime}-{self.engine}"

    @property
    def name(self) -> str:
        """The id, then each dimension not at its default: `per-call-okhttp ktor 3.5.1 jdk 25`."""
        return " ".join([self.id, *(f"{word} {value}" for word, value in self.dimensions().items())])

    def dimensions(self) -> dict[str, str]:
        """The dimensions not at their defaults, by the word that names them."""
        return {d.word: str(d.value_of(self)) for d in DIMENSIONS if d.value_of(self) != d.default}

    def refusal(self) -> str | None:
        """Why this case cannot run as it is (the first of its dimensions that says so), or None."""
        return next((why for d in DIMENSIONS if (why := d.refuse(self))), None)

    @property
    def base(self) -> Case:
        """The same lifetime and engine, every dimension at its default."""
        return Case(self.lifetime, self.engine)

    def title(self) -> str:
        """In words: `OkHttp (per-call: a new HttpClient for every request, closed after it)`."""
        text = f"{ENGINE_TITLES[self.engine]} ({self.lifetime}: {LIFETIME_TITLES[self.lifetime]})"
        return text + "".join(f", {word} {value}" for word, value in self.dimensions().items())

    def with_dimensions(self, **dims: object) -> Case:
        return dataclasses.replace(self, **dims)

    def proxy_env(self) -> dict[str, str]:
        """The proxy's variables that make it this case: its process environment natively, the
        overlay's `environment` in compose. The release and the JDK are not the proxy's variables
        but which build and which java run it (backends.py); of the protocol, the HTTP version is
        (the upstream's URL and CA are where the backend serves TLS: Stack.upstream_for,
        compose/https.yml)."""
        env = {"CLIENT_ENGINE": self.engine, "CLIENT_LIFETIME": self.lifetime}
        for d in DIMENSIONS:
            env.update(d.env(d.value_of(self)))
        return env

    @property
    def tls(self) -> bool:
        return self.protocol != "http"

    def __str__(self) -> str:
        return self.name


def _split(case_id: str) -> tuple[str, str]:
    for lifetime in LIFETIMES:
        engine = case_id.removeprefix(lifetime + "-")
        if engine != case_id and engine in ENGINES:
            return lifetime, engine
    raise ValueError(f"unknown case {case_id!r}; valid cases: {', '.join(CASES)}")


def _dimension_help() -> str:
    return "dimensions: " + ", ".join(f"{d.word} VALUE" for d in DIMENSIONS)


CASES = tuple(f"{lifetime}-{engine}" for lifetime in LIFETIMES for engine in ENGINES)
# Engines Ktor has deprecated and no longer publishes with its current releases (apache ends at
# 3.4.1): a case names them, `all` includes them, lab run's default leaves them out.
DEPRECATED_ENGINES = ("apache",)
# lab run's default matrix: both lifetimes of every engine Ktor still publishes. An apache row
# would run on Ktor 3.4.1 beside the others' release, so its table would compare two releases as
# well as engines, for an engine a user should not choose; its two proxies also cost a 2-core
# machine a fifth of the run.
DEFAULT_CASES = tuple(c for c in CASES if c.split("-")[-1] not in DEPRECATED_ENGINES)
ALL = tuple(Case(lifetime, engine) for lifetime in LIFETIMES for engine in ENGINES)


def case_list(text: str) -> list[Case]:
    """A comma-separated list of cases, each parsed (`all`: every case, the deprecated engines'
    too); ValueError naming the first bad one."""
    if text.strip() == "all":
        return [Case.parse(c) for c in CASES]
    return [Case.parse(c) for c in text.split(",") if c.strip()]


def engine_list(text: str) -> list[str]:
    """A comma-separated list of engines (the studies' --engines), each checked."""
    engines = [e.strip() for e in text.split(",") if e.strip()]
    if bad := [e for e in engines if e not in ENGINES]:
        raise ValueError(f"unknown engine {bad[0]!r}; engines: {', '.join(ENGINES)}")
    return engines


def all_of(what: tuple[str, ...], noun: str) -> str:
    """E.g. `all_of(CASES, "cases")`: a default's help text that follows the registry."""
    return f"all {len(what)} {noun}"


def scenarios(locustfile=LOCUST_DIR / "locustfile.py") -> tuple[str, ...]:
    """The locustfile's scenarios: the names its user classes are registered under with
    `@scenario("...")`, in its order (read, not imported: importing Locust patches the process)."""
    found = []
    for node in ast.walk(ast.parse(locustfile.read_text())):
        if isinstance(node, ast.ClassDef):
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "scenario" and d.args:
                    found.append(d.args[0].value)  # type: ignore[attr-defined]
    return tuple(found)


SCENARIOS = scenarios()
