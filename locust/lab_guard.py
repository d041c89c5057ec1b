"""Who may use the lab's Locust, and where its load may go.

A login: when a password is set (LAB_PASSWORD, or LAB_PASSWORD_FILE naming a file that holds it,
as a swarm secret does), every route of the web UI and its API asks for HTTP Basic auth, user
`lab`, with that password: the browser shows its login prompt, `lab` and curl send the header.
Only /metrics stays open: Prometheus scrapes it and the healthcheck probes it, and it is read-only
(counts, latencies, the case's label: it starts, stops and aims nothing). Without a password
(natively, compose on loopback) nothing is asked.

The load's target: a run may aim only at the lab's proxy, the host Locust was started with
(`--host`, LOCUST_HOST: compose and the stack set http://proxy:8080), or at a host the user
allowed when starting it (LAB_ALLOWED_HOSTS, comma-separated: a URL allows that scheme, host and
port; a bare `host` or `host:port` any scheme). When the UI listens on loopback only (Locust on
this machine, `lab up`, `lab run`), loopback hosts are allowed too: the load stays on the machine.
A start naming another host is refused before anything runs: in the UI and its web API (/swarm,
and /user, which can set a user class's host) as Locust answers every start it refuses (200,
success false, the message its form shows); a headless run at start (exit 2, one line); and every
user checks its host before its first request, on a worker too, whichever way the run started.

What /user may change: only what Locust's own class picker edits (host, weight, fixed_count,
tasks); any other attribute of a user class (proxy_host, default_headers, max_redirects, ...) is
refused, naming the keys. And below every setting, each user's session checks every connection
it opens, a redirect's too: to a host the guard admits, never through a forward proxy; a
connection elsewhere fails that request and sends nothing.

Who may drive the UI without a password: a page the browser loaded from the UI's own name. With no
password the UI is on loopback only (a LAB_BIND off loopback without one stops Locust at start),
and it answers only requests whose Host is a loopback name (localhost, 127.0.0.1, ::1) or a host
named in LAB_ALLOWED_HOSTS: a page on another name that rebinds its DNS to 127.0.0.1 is refused.
With a password the login is the door (a rebound page has no credentials for the UI), so any
name reaches the login. Failed logins are answered after FAILED_LOGIN_DELAY seconds, one at a time.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
import os
import sys
from dataclasses import dataclass, field
from urllib.parse import urlsplit

log = logging.getLogger("lab")

USER = "lab"
REALM = "ktor-lab"
# Routes served without the login (Prometheus' scrape and the healthcheck).
OPEN_PATHS = frozenset({"/metrics"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# What /user may set on a user class: what Locust's own class picker edits.
USER_SETTINGS = ("host", "weight", "fixed_count", "tasks")
# A password the user chooses is at least this long (the stacks make longer ones themselves).
MIN_PASSWORD = 12
# Seconds before a failed login is answered, one at a time in the process: guesses sent in
# parallel wait their turn, so they come at most one a second.
FAILED_LOGIN_DELAY = 1.0


class GuardError(ValueError):
    """A setting the guard cannot work with: the message names the variable."""


@dataclass(frozen=True)
class Origin:
    scheme: str | None  # None: any
    host: str
    port: int | None  # None: any

    def admits(self, other: Origin) -> bool:
        return (
            self.host == other.host
            and (self.scheme is None or self.scheme == other.scheme)
            and (self.port is None or self.port == other.port)
        )

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        where = f"{host}:{self.port}" if self.port is not None else host
        return f"{self.scheme}://{where}" if self.scheme else where


def origin(url: str) -> Origin | None:
    """Scheme, host and port of a URL Locust would load (None when it names no host)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return Origin(scheme, parts.hostname.lower().rstrip("."), port or DEFAULT_PORTS[scheme])


def allowance(entry: str) -> Origin:
    """One entry of LAB_ALLOWED_HOSTS: a URL (its scheme, host and port), or host[:port]."""
    entry = entry.strip()
    if "://" in entry:
        if (o := origin(entry)) is None:
            raise GuardError(f"LAB_ALLOWED_HOSTS: {entry!r} is not an http(s) URL with a host")
        return o
    try:
        parts = urlsplit(f"//{entry}")
        port = parts.port
    except ValueError:
        raise GuardError(f"LAB_ALLOWED_HOSTS: {entry!r} is not a host or host:port") from None
    if not parts.hostname or parts.path or parts.query or parts.username:
        raise GuardError(f"LAB_ALLOWED_HOSTS: {entry!r} is not a host or host:port")
    return Origin(None, parts.hostname.lower().rstrip("."), port)


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class LoadRefused(ConnectionError):
    """A connection the guard does not admit: the request fails and nothing is sent."""


@dataclass
class Guard:
    password: str | None = None
    allowed: list[Origin] = field(default_factory=list)
    loopback: bool = False  # the UI listens on loopback only: loopback targets are the machine's own
    warned: set[str] = field(default_factory=set)
    names: frozenset[str] = frozenset()  # the hosts of LAB_ALLOWED_HOSTS: names the UI answers to too

    def foreign_host(self, host_header: str | None) -> str | None:
        """Why a request with this Host must not drive a UI that has no password (a page on
        another name, DNS rebinding); None when it may. With a password, None: the login decides."""
        if self.password is not None:
            return None
        try:
            name = (urlsplit(f"//{host_header}").hostname or "").rstrip(".") if host_header else ""
        except ValueError:
            name = ""
        if name and (is_loopback(name) or name in self.names):
            return None
        shown = " ".join((host_header or "").split())[:100] or "none"
        return f"Host {shown} is not a name of this UI (loopback, or a host in LAB_ALLOWED_HOSTS)"

    def user_refusal(self, settings, classes=None) -> str | None:
        """Why /user must not apply `settings` to a user class, in one line; None when it may."""
        if not isinstance(settings, dict):
            return "a user class's settings are a JSON object"
        refused = sorted(str(k) for k in settings if k not in ("user_class_name", *USER_SETTINGS))
        if refused:
            return f"{', '.join(refused)}: /user changes only {', '.join(USER_SETTINGS)} of the lab's users"
        name = settings.get("user_class_name")
        if classes is not None and name not in classes:
            return f"user_class_name {str(name)[:80]!r} is not one of {', '.join(sorted(classes))}"
        for key in ("weight", "fixed_count"):
            value = settings.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return f"{key} must be a whole number >= 0"
        tasks = settings.get("tasks", [])
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            return "tasks must be a list of task names"
        host = settings.get("host")
        if host is not None and not isinstance(host, str):
            return "host must be a URL"
        # A blank host changes nothing: the run's host (checked at the start) overrides a class's.
        return self.refusal(host) if host else None

    def connection_refusal(self, client) -> str | None:
        """Why a user's session must not open this connection (geventhttpclient's HTTPClient)."""
        if getattr(client, "use_proxy", False):
            return "a forward proxy (proxy_host) is not the lab's: the load goes straight to the lab's proxy"
        scheme = "https" if getattr(client, "ssl", False) else "http"
        host = client.host if ":" not in client.host else f"[{client.host}]"
        return self.refusal(f"{scheme}://{host}:{client.port}")

    def refusal(self, host: str | None) -> str | None:
        """Why a run must not aim at `host`, in one line; None when it may."""
        if not host:
            return "no host: a run aims at the lab's proxy" + self._hint()
        target = origin(host)
        shown = " ".join(host.split())[:200]  # one line, whatever was sent
        if target is None:
            return f"{shown} is not an http(s) URL" + self._hint()
        if any(a.admits(target) for a in self.allowed) or (self.loopback and is_loopback(target.host)):
            return None
        return f"{shown} is not the lab's proxy nor a host it allows" + self._hint()

    def _hint(self) -> str:
        allowed = ", ".join([*(str(a) for a in self.allowed), *(["loopback"] if self.loopback else [])])
        return f" (allowed: {allowed or 'none'}; LAB_ALLOWED_HOSTS adds others when Locust starts)"

    def authorized(self, header: str | None) -> bool:
        """True when no password is set, or `header` is Basic auth of `lab` and the password."""
        if self.password is None:
            return True
        if not header or not header[:6].lower() == "basic ":
            return False
        try:
            user, _, given = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        # Both compared whatever the first gives, in constant time.
        same_user = hmac.compare_digest(user.encode(), USER.encode())
        same_password = hmac.compare_digest(given.encode(), self.password.encode())
        return same_user and same_password

    def warn_once(self, why: str) -> None:
        if why not in self.warned:
            self.warned.add(why)
            log.error("lab: refused to load: %s", why)


def read_password(env: dict[str, str]) -> str | None:
    """LAB_PASSWORD, else the content of LAB_PASSWORD_FILE (its trailing newline dropped); None
    when neither is set. GuardError when the file cannot be read or either is blank."""
    if path := env.get("LAB_PASSWORD_FILE"):
        try:
            with open(path, encoding="utf-8") as f:
                password = f.read().rstrip("\r\n")
        except OSError as e:
            raise GuardError(f"LAB_PASSWORD_FILE: cannot read {path}: {e.strerror}") from None
        name = "LAB_PASSWORD_FILE"
    elif "LAB_PASSWORD" in env and env["LAB_PASSWORD"] != "":
        password, name = env["LAB_PASSWORD"], "LAB_PASSWORD"
    else:
        return None
    if why := weakness(password):
        raise GuardError(f"{name}: {why}")
    return password


def weakness(password: str) -> str | None:
    """Why a password someone chose cannot guard a UI on a network (blank, several lines, too
    weak); None when it can. Locust and `lab swarm up` apply this one rule."""
    if not password.strip() or "\n" in password or "\r" in password:
        return "the password is blank or has several lines"
    if len(password) < MIN_PASSWORD or len(set(password)) < 4:
        return (
            f"the password is too weak: use at least {MIN_PASSWORD} characters, not one or two repeated "
            "(e.g. openssl rand -base64 18)"
        )
    return None


def make(options, env: dict[str, str] | None = None) -> Guard:
    """The guard of a Locust process started with these options and environment."""
    env = dict(os.environ if env is None else env)
    allowed = []
    if (own := origin(getattr(options, "host", None) or "")) is not None:
        allowed.append(own)
    extra = [allowance(entry) for entry in env.get("LAB_ALLOWED_HOSTS", "").replace(",", " ").split()]
    allowed += extra
    web_host = getattr(options, "web_host", "") or ""
    loopback = web_host not in ("", "*") and is_loopback(web_host)
    password = read_password(env)
    # The compose stacks publish the UI on LAB_BIND: off loopback, never without a login, whether
    # or not the bind check in nginx's entrypoint ran (docker compose up --no-deps).
    bind = env.get("LAB_BIND", "")
    if bind and not is_loopback(bind) and password is None:
        raise GuardError(
            f"LAB_BIND={bind} is not a loopback address: add -f compose/lan.yml and set LAB_PASSWORD "
            "(the UIs then ask for a login; docs/compose.md), or leave LAB_BIND at 127.0.0.1"
        )
    return Guard(password, allowed, loopback, names=frozenset(a.host for a in extra))


def check_connections(session, guard: Guard) -> None:
    """Every connection `session` (a FastHttpSession) opens, a redirect's too, is checked first:
    to a host the guard admits and never through a forward proxy, whatever a user class's
    attributes say; a refused one fails its request (LoadRefused) and sends nothing."""
    agent = session.client
    opened = agent._urlopen
    admitted: set[int] = set()  # the pool's clients already checked (it keeps one per host and port)

    def checked(request):
        client = agent.clientpool.get_client(request.url_split)
        if id(client) not in admitted:
            if why := guard.connection_refusal(client):
                guard.warn_once(why)
                raise LoadRefused(why)
            admitted.add(id(client))
        return opened(request)

    agent._urlopen = checked


def install(environment, env: dict[str, str] | None = None) -> Guard:
    """The guard for this process: refuses a headless run's host at start (exit 2, one line), and
    puts the login and the target's check in front of the web UI. Kept as environment.lab_guard."""
    try:
        guard = make(environment.parsed_options, env)
    except GuardError as e:
        sys.stderr.write(f"lab: {e}\n")
        sys.exit(2)
    environment.lab_guard = guard
    options = environment.parsed_options
    headless = getattr(options, "headless", False) or getattr(options, "autostart", False)
    if headless and (why := guard.refusal(environment.host)):
        sys.stderr.write(f"lab: refused to start: {why}\n")
        sys.exit(2)
    if environment.web_ui is not None:
        protect(environment.web_ui.app, environment, guard)
    if guard.password is not None:
        log.info("lab: the web UI asks for a login (user %s)", USER)
    return guard


def gevent_sleep(seconds: float) -> None:
    """Waits without holding Locust's other greenlets (Locust's web UI runs on gevent)."""
    import gevent

    gevent.sleep(seconds)


_refusals: list = []  # the lock refused logins take turns on (made on first use, in Locust's hub)


def slow_refusal() -> None:
    """Answers a refused login after FAILED_LOGIN_DELAY seconds, one refusal at a time."""
    import gevent.lock

    if not _refusals:
        _refusals.append(gevent.lock.Semaphore(1))
    with _refusals[0]:
        gevent_sleep(FAILED_LOGIN_DELAY)


def protect(app, environment, guard: Guard) -> None:
    """Flask hooks: the Host of a UI without a password, the login on every route but OPEN_PATHS,
    then the target of a start and what /user may change."""
    from flask import jsonify, request

    @app.before_request
    def lab_host():
        if request.path in OPEN_PATHS or not (why := guard.foreign_host(request.headers.get("Host"))):
            return None
        log.warning("lab: refused %s %s: %s", request.method, request.path, why)
        return f"refused: {why}\n", 403, {"Content-Type": "text/plain"}

    @app.before_request
    def lab_login():
        if request.path in OPEN_PATHS or guard.authorized(given := request.headers.get("Authorization")):
            return None
        if given:
            slow_refusal()
        return (
            "the lab's Locust asks for a login: user lab and the lab's password\n",
            401,
            {"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"', "Content-Type": "text/plain"},
        )

    @app.before_request
    def lab_target():
        why = None
        if request.endpoint == "locust.swarm" and "host" in request.form:
            why = guard.refusal(request.form["host"])
        elif request.endpoint == "locust.swarm":
            why = guard.refusal(environment.host)
        elif request.endpoint == "locust.update_user":
            classes = getattr(environment, "available_user_classes", None)
            why = guard.user_refusal(request.get_json(force=True, silent=True), classes)
        if why is None:
            return None
        log.warning("lab: refused a start: %s", why)
        # As Locust answers every start it refuses: 200 with success false, the message its UI shows
        # (its form shows only "An unknown error occurred." for an answer of another status).
        return jsonify({"success": False, "message": f"refused: {why}", "host": environment.host})
