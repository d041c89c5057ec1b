"""tools/install-deps.sh, where it must not install: it names what to install in one line; and
tools/fetch-go.py, which installs nothing that does not match its pinned checksum."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ktor_lab.paths import REPO

SCRIPT = REPO / "tools" / "install-deps.sh"
FETCH_GO = REPO / "tools" / "fetch-go.py"


@pytest.fixture
def bare_path(tmp_path):
    """A PATH with a shell and Python only: every package of the lab looks missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "python3", "id", "grep", "awk", "cat"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            os.symlink(found, bin_dir / tool)
    return str(bin_dir)


def test_on_another_os_it_names_what_to_install_in_one_line(tmp_path, bare_path):
    (tmp_path / "os-release").write_text('ID=fedora\nID_LIKE="rhel centos"\n')
    r = subprocess.run(
        ["bash", str(SCRIPT), "test"],
        env={"PATH": bare_path, "OS_RELEASE": str(tmp_path / "os-release")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("install-deps: cannot install here (not Debian or Ubuntu); install: ")
    for package in ("nginx-light", "prometheus", "openjdk-17-jdk-headless", "maven", "chromium"):
        assert package in r.stderr, package


def test_it_refuses_what_it_does_not_know():
    r = subprocess.run(["bash", str(SCRIPT), "everything"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage:" in r.stderr


@pytest.fixture
def go_proxy(tmp_path):
    """A module proxy on 127.0.0.1 that serves a toolchain zip with a `bin/go` of its own, not the
    pinned release: its checksum cannot match."""
    archive = tmp_path / "served.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(
            "golang.org/toolchain@v0.0.1-go1.26.8.linux-amd64/bin/go", "#!/bin/sh\necho go version go1.26.8\n"
        )
    asked = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            body = archive.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_go_installs_nothing_whose_checksum_differs(tmp_path, bare_path, go_proxy):
    url, asked = go_proxy
    target = tmp_path / "cache" / "go"
    r = subprocess.run(
        [sys.executable, str(FETCH_GO)],
        env={"PATH": bare_path, "HOME": str(tmp_path), "LAB_GO_DIR": str(target), "LAB_GO_PROXY": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and r.stdout == "", r
    assert asked and asked[0].startswith("/golang.org/toolchain/@v/v0.0.1-go1.26.8.linux-")
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("fetch-go: ") and last.endswith(": nothing installed"), r.stderr
    assert not target.exists()
    assert list(target.parent.iterdir()) == []  # no half-unpacked folder either
