"""locust/lab_guard.py without Locust: who may use the UI (the login) and where a run may aim.
Its Flask hooks run on a Flask app with Locust's endpoint names; test_locust.py runs them in a
real Locust on loopback, test_swarm_stack.py and test_compose_stack.py in the stacks."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest

import lab_guard  # locust/lab_guard.py (pip install -e locust)


def options(host="http://proxy:8080", web_host="0.0.0.0", **more):
    return SimpleNamespace(host=host, web_host=web_host, **more)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    "host",
    ["http://proxy:8080", "http://PROXY:8080/", "http://proxy:8080/files?x=1", "http://target.example:8080"],
)
def test_the_lab_s_proxy_and_the_allowed_hosts_are_allowed(host):
    guard = lab_guard.make(options(), {"LAB_ALLOWED_HOSTS": "http://target.example:8080"})
    assert guard.refusal(host) is None


@pytest.mark.parametrize(
    "host",
    [
        "http://example.com",
        "http://proxy:8081",  # another port of the proxy's host
        "https://proxy:8080",  # another scheme
        "http://proxy.evil.example:8080",
        "http://127.0.0.1:8080",  # the container itself: not the lab's on a network
        "ftp://proxy:8080",
        "proxy:8080",
        "",
        None,
    ],
)
def test_any_other_host_is_refused_in_one_line_naming_the_variable(host):
    why = lab_guard.make(options(), {}).refusal(host)
    assert why and "\n" not in why and "LAB_ALLOWED_HOSTS" in why and "http://proxy:8080" in why


def test_a_bare_host_allows_any_port_and_scheme_a_host_port_that_port():
    guard = lab_guard.make(options(), {"LAB_ALLOWED_HOSTS": "a.example, b.example:9000"})
    assert guard.refusal("https://a.example:4443") is None and guard.refusal("http://a.example") is None
    assert guard.refusal("http://b.example:9000") is None and guard.refusal("http://b.example:9001")
    with pytest.raises(lab_guard.GuardError, match="LAB_ALLOWED_HOSTS: 'x/y'"):
        lab_guard.make(options(), {"LAB_ALLOWED_HOSTS": "x/y"})


def test_loopback_targets_are_allowed_only_when_the_ui_listens_on_loopback():
    """Natively (lab up, lab run: the UI on 127.0.0.1) the proxies are on loopback ports the lab picks."""
    native = lab_guard.make(options(host="http://127.0.0.1:18090", web_host="127.0.0.1"), {})
    assert native.refusal("http://127.0.0.1:40123") is None and native.refusal("http://localhost:1") is None
    assert native.refusal("http://192.168.1.20:8080")
    for web_host in ("0.0.0.0", "", "*", "192.168.1.20"):
        guard = lab_guard.make(options(web_host=web_host), {})
        assert guard.refusal("http://127.0.0.1:40123"), web_host


def test_the_password_comes_from_the_variable_or_the_secret_s_file(tmp_path):
    secret = tmp_path / "lab-password"
    secret.write_text("from-the-secret\n")
    assert lab_guard.read_password({}) is None
    assert lab_guard.read_password({"LAB_PASSWORD": ""}) is None
    assert lab_guard.read_password({"LAB_PASSWORD": "s3cret-enough"}) == "s3cret-enough"
    assert (
        lab_guard.read_password({"LAB_PASSWORD_FILE": str(secret), "LAB_PASSWORD": "x"}) == "from-the-secret"
    )
    with pytest.raises(lab_guard.GuardError, match="LAB_PASSWORD_FILE: cannot read"):
        lab_guard.read_password({"LAB_PASSWORD_FILE": str(tmp_path / "missing")})
    secret.write_text("\n")
    with pytest.raises(lab_guard.GuardError, match="LAB_PASSWORD_FILE: the password is blank"):
        lab_guard.read_password({"LAB_PASSWORD_FILE": str(secret)})


def test_only_user_lab_with_the_password_is_authorized():
    guard = lab_guard.Guard(password="p:w")
    assert guard.authorized(basic("lab", "p:w"))
    for header in (None, "", basic("lab", "p:x"), basic("admin", "p:w"), "Basic !!!", "Bearer p:w"):
        assert not guard.authorized(header), header
    assert lab_guard.Guard(password=None).authorized(None)  # no password: nothing asked


@pytest.mark.parametrize("weak", ["short", "aaaaaaaaaaaaaaaa", "abababababababab"])
def test_a_weak_password_stops_the_start_in_one_line_naming_the_variable(weak, tmp_path):
    with pytest.raises(
        lab_guard.GuardError, match=r"^LAB_PASSWORD: the password is too weak: use at least 12"
    ):
        lab_guard.read_password({"LAB_PASSWORD": weak})
    secret = tmp_path / "secret"
    secret.write_text(weak + "\n")
    with pytest.raises(lab_guard.GuardError, match=r"^LAB_PASSWORD_FILE: the password is too weak"):
        lab_guard.read_password({"LAB_PASSWORD_FILE": str(secret)})


def test_a_ui_published_off_loopback_without_a_password_stops_at_start():
    """The compose stacks tell Locust LAB_BIND: off loopback it needs a login, whether or not
    nginx's bind check ran first (docker compose up --no-deps locust)."""
    with pytest.raises(lab_guard.GuardError, match=r"^LAB_BIND=0\.0\.0\.0 is not a loopback address"):
        lab_guard.make(options(), {"LAB_BIND": "0.0.0.0"})
    assert lab_guard.make(options(), {"LAB_BIND": "0.0.0.0", "LAB_PASSWORD": "a-long-password"}).password
    assert lab_guard.make(options(), {"LAB_BIND": "127.0.0.1"}).password is None


@pytest.mark.parametrize(
    "settings",
    [
        {"user_class_name": "U", "proxy_host": "10.9.9.9", "proxy_port": 3128},
        {"user_class_name": "U", "default_headers": {"Authorization": "x"}},
        {"user_class_name": "U", "max_redirects": 30},
        {"user_class_name": "U", "insecure": False},
        {"user_class_name": "U", "client_pool": "x"},
        {"user_class_name": "Other"},
        {"user_class_name": "U", "weight": "9"},
        {"user_class_name": "U", "fixed_count": -1},
        {"user_class_name": "U", "tasks": "tiny"},
        {"user_class_name": "U", "host": 3},
        ["not", "an", "object"],
    ],
    ids=lambda s: ",".join(s)[:40] if isinstance(s, dict) else "list",
)
def test_user_updates_change_only_what_locusts_class_picker_edits(settings):
    why = lab_guard.Guard().user_refusal(settings, {"U": object()})
    assert why and "\n" not in why
    for key in (
        set(settings) - {"user_class_name", *lab_guard.USER_SETTINGS} if isinstance(settings, dict) else ()
    ):
        assert key in why


def test_the_class_pickers_own_settings_pass():
    guard = lab_guard.make(options(), {})
    ok = {
        "user_class_name": "U",
        "host": "http://proxy:8080",
        "weight": 2,
        "fixed_count": 0,
        "tasks": ["tiny"],
    }
    assert guard.user_refusal(ok, {"U": object()}) is None
    assert guard.user_refusal({"user_class_name": "U", "host": ""}, {"U": object()}) is None


def test_a_session_opens_connections_only_to_admitted_hosts_never_through_a_forward_proxy():
    guard = lab_guard.make(options(), {})

    def client(host, port, ssl=False, use_proxy=False):
        return SimpleNamespace(host=host, port=port, ssl=ssl, use_proxy=use_proxy)

    assert guard.connection_refusal(client("proxy", 8080)) is None
    assert "forward proxy" in guard.connection_refusal(client("proxy", 8080, use_proxy=True))
    assert guard.connection_refusal(client("proxy", 8080, ssl=True))  # another scheme
    assert guard.connection_refusal(client("evil.example", 80))  # a redirect's target
    assert guard.connection_refusal(client("::1", 8080))


@pytest.mark.parametrize(
    "host,refused",
    [
        ("127.0.0.1:18089", False),
        ("localhost:8089", False),
        ("[::1]:8089", False),
        ("127.0.0.1", False),
        ("ui.example:8089", False),  # named in LAB_ALLOWED_HOSTS
        ("rebind.attacker.example:18089", True),
        ("192.168.1.20:8089", True),
        ("", True),
        (None, True),
        ("[bad", True),
    ],
)
def test_a_ui_without_a_password_answers_only_to_its_own_names(host, refused):
    guard = lab_guard.make(options(web_host="127.0.0.1"), {"LAB_ALLOWED_HOSTS": "ui.example"})
    assert bool(guard.foreign_host(host)) is refused
    # with a password, the login is the door: a rebound page has no credentials for the UI
    assert guard.foreign_host(host) is None or lab_guard.Guard("a-long-password").foreign_host(host) is None


@pytest.fixture(params=["pw"])
def app(request, monkeypatch):
    """A Flask app with the endpoints lab_guard knows by Locust's names (blueprint `locust`);
    failed logins answered at once (test_a_failed_login_is_answered_slowly sees the wait)."""
    monkeypatch.setattr(lab_guard, "gevent_sleep", lambda seconds: None)
    flask = pytest.importorskip("flask")
    app = flask.Flask("fake-locust")
    bp = flask.Blueprint("locust", "fake-locust")
    started = []

    @bp.route("/swarm", methods=["POST"])
    def swarm():
        started.append(dict(flask.request.form))
        return {"success": True, "message": "Swarming started"}

    @bp.route("/user", methods=["POST"])
    def update_user():
        started.append(flask.request.get_json(force=True))
        return {}, 201

    @bp.route("/")
    def index():
        return "ui"

    app.register_blueprint(bp)

    @app.route("/metrics")
    def metrics():
        return "locust_users 0\n"

    environment = SimpleNamespace(host="http://proxy:8080", available_user_classes={"U": object()})
    guard = lab_guard.Guard(request.param, [lab_guard.origin("http://proxy:8080")])
    lab_guard.protect(app, environment, guard)
    app.started = started
    return app


def test_every_route_but_metrics_asks_for_the_login(app):
    client = app.test_client()
    anonymous = client.get("/")
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].startswith("Basic ")
    assert client.post("/swarm", data={"host": "http://proxy:8080", "user_count": 1}).status_code == 401
    assert client.get("/", headers={"Authorization": basic("lab", "wrong")}).status_code == 401
    assert client.get("/", headers={"Authorization": basic("lab", "pw")}).text == "ui"
    assert client.get("/metrics").status_code == 200
    assert app.started == []


def test_a_start_at_another_host_is_refused_with_the_message_the_ui_shows(app):
    client = app.test_client()
    login = {"Authorization": basic("lab", "pw")}
    refused = client.post("/swarm", data={"host": "http://example.com", "user_count": 1}, headers=login)
    body = refused.get_json()
    assert refused.status_code == 200 and body["success"] is False
    assert body["message"].startswith("refused: http://example.com is not the lab's proxy")
    assert (
        client.post("/swarm", data={"host": "", "user_count": 1}, headers=login).get_json()["success"]
        is False
    )
    # /user can set a class's host: refused too; a blank one changes nothing and passes
    assert (
        client.post(
            "/user", json={"user_class_name": "U", "host": "http://example.com"}, headers=login
        ).get_json()["success"]
        is False
    )
    assert client.post("/user", json={"user_class_name": "U", "host": ""}, headers=login).status_code == 201
    assert app.started == [{"user_class_name": "U", "host": ""}]
    ok = client.post("/swarm", data={"host": "http://proxy:8080", "user_count": 1}, headers=login)
    assert ok.get_json()["success"] and app.started[-1]["host"] == "http://proxy:8080"


def test_user_with_other_attributes_is_refused_naming_them_and_applies_nothing(app):
    client = app.test_client()
    login = {"Authorization": basic("lab", "pw")}
    sneaky = {
        "user_class_name": "U",
        "proxy_host": "10.9.9.9",
        "proxy_port": 3128,
        "default_headers": {"X": "1"},
    }
    body = client.post("/user", json=sneaky, headers=login).get_json()
    assert body["success"] is False
    assert body["message"].startswith("refused: default_headers, proxy_host, proxy_port: /user changes only")
    assert app.started == []


@pytest.mark.parametrize("app", [None], indirect=True)
def test_a_rebinding_page_cannot_drive_a_ui_without_a_password(app):
    """DNS rebinding: the attacker's name resolves to 127.0.0.1, so the browser sends the
    attacker's name as Host and as Origin; the UI answers only to its own names."""
    client = app.test_client()
    rebound = {"Host": "rebind.attacker.example:18089", "Origin": "http://rebind.attacker.example:18089"}
    assert client.post("/swarm", data={"host": "http://proxy:8080"}, headers=rebound).status_code == 403
    assert (
        client.post("/user", json={"user_class_name": "U", "weight": 1}, headers=rebound).status_code == 403
    )
    assert client.get("/", headers=rebound).status_code == 403
    assert client.get("/metrics", headers={"Host": "locust:8089"}).status_code == 200  # Prometheus' scrape
    assert app.started == []
    own = {"Host": "127.0.0.1:18089"}
    assert client.post("/swarm", data={"host": "http://proxy:8080"}, headers=own).get_json()["success"]


def test_a_failed_login_is_answered_slowly(app, monkeypatch):
    waited = []
    monkeypatch.setattr(lab_guard, "gevent_sleep", waited.append)
    client = app.test_client()
    assert client.get("/", headers={"Authorization": basic("lab", "guess")}).status_code == 401
    assert waited == [lab_guard.FAILED_LOGIN_DELAY] and lab_guard.FAILED_LOGIN_DELAY >= 1
    assert client.get("/").status_code == 401  # the browser's first, credential-less request: no wait
    assert client.get("/", headers={"Authorization": basic("lab", "pw")}).status_code == 200
    assert len(waited) == 1


def test_a_headless_run_at_another_host_stops_at_start_in_one_line(capsys):
    environment = SimpleNamespace(
        parsed_options=options(host="http://example.com", headless=True),
        host="http://example.com",
        web_ui=None,
    )
    environment.parsed_options.host = None  # started with no host of its own: nothing is the lab's
    with pytest.raises(SystemExit) as stop:
        lab_guard.install(environment, {})
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("lab: refused to start: http://example.com is not the lab's proxy")
        and err.count("\n") == 1
    )


def test_native_locust_asks_for_no_login_whatever_the_shell_exports(monkeypatch, tmp_path):
    """A LAB_PASSWORD exported for a stack is not the native Locust's: lab up and lab run keep
    calling it without a login."""
    from ktor_lab.parts import loadgen

    started = []

    class Recorded:
        def __init__(self, name, argv, log, env=None):
            started.append(env)

        def wait_http(self, *_, **__):
            pass

        def stop(self):
            pass

    monkeypatch.setenv("LAB_PASSWORD", "for-the-swarm")
    monkeypatch.setattr(loadgen, "Service", Recorded)
    monkeypatch.setattr(loadgen, "wait_until", lambda *_, **__: True)
    loadgen.start(tmp_path, "locust", 1, [])
    loadgen.start(tmp_path, "locust", 1, [], workers=2)
    assert started == [loadgen.NO_LOGIN] * 4
    assert lab_guard.read_password({"LAB_PASSWORD": "", "LAB_PASSWORD_FILE": ""}) is None


def test_refused_logins_take_turns_so_parallel_guesses_come_one_a_second(monkeypatch):
    """Four refusals at once (greenlets, as Locust's web UI serves them): each waits its full
    delay after the one before, so N guesses in parallel take N delays (here 50 ms each)."""
    import time

    import gevent

    waited = []
    monkeypatch.setattr(
        lab_guard, "gevent_sleep", lambda seconds: (waited.append(seconds), gevent.sleep(0.05))
    )
    started = time.monotonic()
    gevent.joinall([gevent.spawn(lab_guard.slow_refusal) for _ in range(4)])
    assert waited == [lab_guard.FAILED_LOGIN_DELAY] * 4
    assert time.monotonic() - started >= 4 * 0.05  # in turn, not side by side
