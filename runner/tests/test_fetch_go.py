"""tools/fetch-go.py for real: on a machine without Go, it downloads the pinned release from the Go
module proxy, and that Go compiles and links a program (the tests build tools/compose-config)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ktor_lab.paths import REPO

FETCH_GO = REPO / "tools" / "fetch-go.py"


@pytest.mark.slow  # about 70 MB from the Go module proxy
def test_without_go_on_path_it_fetches_a_go_that_builds(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "bash"):
        os.symlink(shutil.which(tool, path="/usr/bin:/bin"), bin_dir / tool)
    target = tmp_path / "cache" / "go"
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "LAB_GO_DIR": str(target)}
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "SSL_CERT_FILE", "GOPROXY"):
        if name in os.environ:
            env[name] = os.environ[name]
    r = subprocess.run([sys.executable, str(FETCH_GO)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    go = r.stdout.strip()
    assert go == str(target / "bin" / "go")
    assert "downloading Go 1.26.8" in r.stderr

    # Asked again, it finds what it fetched and downloads nothing.
    again = subprocess.run(
        [sys.executable, str(FETCH_GO)], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and again.stdout.strip() == go and again.stderr == ""

    module = tmp_path / "hello"
    module.mkdir()
    (module / "go.mod").write_text("module hello\n\ngo 1.24\n")
    (module / "main.go").write_text(
        'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("built by the fetched Go") }\n'
    )
    build_env = {
        **env,
        "GOCACHE": str(tmp_path / "gocache"),
        "GOPATH": str(tmp_path / "gopath"),
        "GOTOOLCHAIN": "local",
    }
    subprocess.run([go, "build", "-o", "hello", "."], cwd=module, env=build_env, check=True, timeout=600)
    out = subprocess.run([str(module / "hello")], capture_output=True, text=True, timeout=30).stdout
    assert out == "built by the fetched Go\n"
