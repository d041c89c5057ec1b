"""The compose stack on a network address: compose/lan.yml, reached from another "host".

The test makes a network namespace joined to this machine by a veth pair: the machine's side,
10.78.0.1, is the address the stack binds its UIs to (LAB_BIND), as a user binds a LAN address;
the namespace's side, 10.78.0.2, is a client on that network. From there, Locust, Prometheus' gate
refuse a request without the login and serve one with it, Locust refuses a start aimed at another
host, and the proxy and nginx are not there (they stay on this machine's loopback). Without the
overlay, the same LAB_BIND stops the stack at start, and started with --no-deps its UIs and
Toxiproxy's API are still not on the network. Grafana has no stand-in here: its part is the
rendered config (test_compose.py). The namespace, the veth pair and the project are removed after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from conftest import answers, wait_until
from ktor_lab.cases import Case
from ktor_lab.parts import compose
from ktor_lab.processes import free_port, local_url

pytestmark = pytest.mark.compose

SUBNET = "10.78.0"
NAMESPACE = f"klab-lan{os.getpid() % 100000}"
LINK = f"klan{os.getpid() % 100000}"
PASSWORD = f"lan-login-{os.getpid()}"
CASE = Case.parse("singleton-cio")
SERVICES = ("nginx", "nginx-exporter", "proxy", "locust", "prometheus", "prometheus-gate")


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def problem() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    if f"{SUBNET}." in run("ip", "-4", "addr").stdout:
        return f"{SUBNET}.0/24 is in use on this machine"
    return None


@dataclass
class Network:
    """This machine's address on the test's network, and a client in the namespace."""

    address: str
    client: str

    def get(
        self,
        url: str,
        method: str = "GET",
        auth: bool = False,
        data: dict | None = None,
        body: dict | None = None,
    ) -> dict:
        """One request from the namespace: its status and body (JSON when it is), or the error."""
        script = textwrap.dedent(
            f"""
            import json, requests
            try:
                r = requests.request({method!r}, {url!r}, data={data!r}, json={body!r}, timeout=10,
                                     auth={("lab", PASSWORD) if auth else None!r})
                try:
                    body = r.json()
                except ValueError:
                    body = r.text
                print(json.dumps({{"status": r.status_code, "body": body,
                                  "seconds": r.elapsed.total_seconds(),
                                  "challenge": r.headers.get("WWW-Authenticate", "")}}))
            except requests.ConnectionError as e:
                print(json.dumps({{"status": None, "error": type(e).__name__}}))
            """
        )
        r = run("nsenter", f"--net=/run/netns/{NAMESPACE}", sys.executable, "-c", script)
        return json.loads(r.stdout)


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    if why := problem():
        if os.environ.get("LAB_COMPOSE_REQUIRED"):
            pytest.fail(f"a network namespace cannot be made here: {why}")
        pytest.skip(f"a network namespace cannot be made here: {why}")
    run("ip", "netns", "add", NAMESPACE)
    try:
        run("ip", "link", "add", LINK, "type", "veth", "peer", "name", "eth0", "netns", NAMESPACE)
        run("ip", "addr", "add", f"{SUBNET}.1/24", "dev", LINK)
        run("ip", "link", "set", LINK, "up")
        for argv in (
            ("addr", "add", f"{SUBNET}.2/24", "dev", "eth0"),
            ("link", "set", "eth0", "up"),
            ("link", "set", "lo", "up"),
        ):
            run("ip", "-n", NAMESPACE, *argv)
        yield Network(f"{SUBNET}.1", f"{SUBNET}.2")
    finally:
        run("ip", "link", "del", LINK, check=False)  # its peer goes with it
        run("ip", "netns", "del", NAMESPACE, check=False)
        assert LINK not in run("ip", "link").stdout and NAMESPACE not in run("ip", "netns", "list").stdout


def project(name: str, **env: str) -> compose.Project:
    ports = {s: free_port() for s in ("proxy", "nginx", "locust", "prometheus")}
    return compose.Project(f"ktor-lab-test-{os.getpid()}-{name}", ports, env=env)


def test_a_bind_off_loopback_without_logins_stops_the_stack_in_one_line(compose_engine, network):
    lab = project("bind", LAB_BIND=network.address)
    try:
        r = lab.compose(CASE, "up", "-d", "--wait", "--wait-timeout", "60", *SERVICES[:-1], check=False,
                        capture_output=True, text=True)  # fmt: skip
        assert r.returncode != 0, r.stdout + r.stderr
        logs = lab.compose(CASE, "logs", "nginx", capture_output=True, text=True).stdout
        assert f"lab: LAB_BIND={network.address} is not a loopback address: add -f compose/lan.yml" in logs
        running = lab.compose(CASE, "ps", "-q", "--status", "running", capture_output=True, text=True)
        assert not running.stdout.split(), "a part of the stack started"
    finally:
        lab.down()
        assert not compose.wait_gone(lab), f"left behind: {lab.leftovers()}"


def test_no_ui_nor_toxiproxys_api_is_reachable_off_loopback_without_the_login_however_started(
    compose_engine, network
):
    """As an attacker would try it: the UIs started with --no-deps (nginx's bind check never runs)
    and LAB_BIND on the network address, and Toxiproxy's API with LAB_PROXY_BIND there too. From
    the network nothing answers: the base publishes the UIs on 127.0.0.1 whatever LAB_BIND says,
    Locust refuses to start (its own check, one line), and Toxiproxy's API stays on loopback."""
    ports = {s: free_port() for s in ("locust", "prometheus", "toxiproxy")}
    env = {"LAB_BIND": network.address, "LAB_PROXY_BIND": network.address}
    lab = compose.Project(f"ktor-lab-test-{os.getpid()}-nodeps", ports, env=env)
    try:
        lab.compose(CASE, "up", "-d", "--no-deps", "locust", "prometheus", "toxiproxy", extras=("network",),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        for service in ("prometheus", "toxiproxy"):
            path = "/-/ready" if service == "prometheus" else "/proxies"
            here = local_url(ports[service], path)
            assert wait_until(lambda u=here: answers(u), timeout=60), service
            there = network.get(f"http://{network.address}:{ports[service]}{path}")
            assert there["status"] is None, (service, there)
        logs = ""
        for _ in range(60):
            logs = lab.compose(CASE, "logs", "locust", capture_output=True, text=True).stdout
            if "is not a loopback address" in logs:
                break
            time.sleep(1)
        assert f"lab: LAB_BIND={network.address} is not a loopback address: add -f compose/lan.yml" in logs
        assert network.get(f"http://{network.address}:{ports['locust']}/")["status"] is None
    finally:
        lab.compose(CASE, "down", "--volumes", "--remove-orphans", "--timeout", "10", extras=("network",),
                    check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        assert not compose.wait_gone(lab), f"left behind: {lab.leftovers()}"


def test_without_a_password_the_lan_stack_does_not_start_and_names_it(compose_engine, network):
    lab = project("nopw", LAB_BIND=network.address)
    lab.env.pop("LAB_PASSWORD", None)
    try:
        r = lab.compose(CASE, "up", "-d", "--no-deps", "locust", extras=("lan",), check=False,
                        capture_output=True, text=True)  # fmt: skip
        assert r.returncode != 0 and '"LAB_PASSWORD"' in r.stderr, r.stdout + r.stderr
        assert network.get(f"http://{network.address}:{lab.ports['locust']}/")["status"] is None
    finally:
        lab.compose(CASE, "down", "--volumes", "--remove-orphans", "--timeout", "10", extras=("lan",),
                    check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        assert not compose.wait_gone(lab), f"left behind: {lab.leftovers()}"


def test_on_a_network_address_every_ui_asks_for_the_login(compose_engine, network):
    lab = project("lan", LAB_BIND=network.address, LAB_PASSWORD=PASSWORD)
    try:
        lab.compose(CASE, "up", "-d", "--wait", "--wait-timeout", "240", *SERVICES, extras=("lan",),
                    stdout=subprocess.DEVNULL)  # fmt: skip
        locust = f"http://{network.address}:{lab.ports['locust']}"
        prometheus = f"http://{network.address}:{lab.ports['prometheus']}"
        start = {"user_count": "2", "spawn_rate": "2", "host": "http://proxy:8080", "wait_min": "0.5"}

        # Locust: nothing without the login but /metrics; a start at another host refused in words
        anonymous = network.get(f"{locust}/swarm", "POST", data=start)
        assert anonymous["status"] == 401 and anonymous["challenge"].startswith("Basic "), anonymous
        assert network.get(f"{locust}/")["status"] == 401
        assert network.get(f"{locust}/metrics")["status"] == 200
        assert network.get(f"{locust}/", auth=True)["status"] == 200
        refused = network.get(
            f"{locust}/swarm", "POST", auth=True, data={**start, "host": "http://example.com"}
        )
        assert refused["body"]["success"] is False, refused
        assert "http://example.com is not the lab's proxy" in refused["body"]["message"]
        assert network.get(f"{locust}/lab/stats", auth=True)["body"]["state"] == "ready"
        # /user with the login still cannot aim the load elsewhere: a forward proxy is refused, named
        sneaky = {"user_class_name": "StaticSmallUser", "proxy_host": network.client, "proxy_port": 3128}
        refused = network.get(f"{locust}/user", "POST", auth=True, body=sneaky)
        assert refused["body"]["success"] is False and "proxy_host, proxy_port" in refused["body"]["message"]
        # with the login, a run at the lab's proxy starts (and is stopped at once)
        assert network.get(f"{locust}/swarm", "POST", auth=True, data=start)["body"]["success"] is True
        assert network.get(f"{locust}/stop", "POST", auth=True)["status"] == 200

        # Prometheus: its gate asks for the login, answering a refusal after a second (auth_delay: a
        # password is guessed slowly); Prometheus' own port is published nowhere
        query = f"{prometheus}/api/v1/query?query=up"
        anonymous = network.get(query)
        assert anonymous["status"] == 401 and anonymous["challenge"].startswith("Basic "), anonymous
        wrong = network.get(query.replace("http://", f"http://lab:wrong-{PASSWORD}@"))
        assert wrong["status"] == 401 and wrong["seconds"] >= 1.0, wrong
        answered = network.get(query, auth=True)
        assert answered["status"] == 200 and answered["body"]["status"] == "success", answered
        ports = lab.compose(CASE, "port", "prometheus", "9090", extras=("lan",), check=False,
                            capture_output=True, text=True)  # fmt: skip
        assert ports.stdout.strip() in ("", ":0"), ports.stdout  # ":0": compose's word for none

        # the password reached the UIs as a file: no container's environment, nor the stack's
        # config, shows it
        for service in ("locust", "prometheus-gate"):
            [container] = lab.compose(CASE, "ps", "-q", service, extras=("lan",), capture_output=True,
                                      text=True).stdout.split()  # fmt: skip
            inspected = subprocess.run(["docker", "inspect", container], capture_output=True, text=True,
                                       env=lab.env, check=True).stdout  # fmt: skip
            assert PASSWORD not in inspected and "/run/secrets/lab-password" in inspected, service
        config = lab.compose(CASE, "config", extras=("lan",), capture_output=True, text=True).stdout
        assert PASSWORD not in config and "lab-password" in config

        # the proxy and nginx: on this machine's loopback, not on the network
        for service in ("proxy", "nginx"):
            there = network.get(f"http://{network.address}:{lab.ports[service]}/files/tiny.txt")
            assert there["status"] is None, (service, there)
            assert (
                requests.get(f"{local_url(lab.ports[service])}/files/tiny.txt", timeout=5).text
                == "Success!\n"
            )
    finally:
        lab.compose(CASE, "down", "--volumes", "--remove-orphans", "--timeout", "10", extras=("lan",),
                    check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        assert not compose.wait_gone(lab), f"left behind: {lab.leftovers()}"
