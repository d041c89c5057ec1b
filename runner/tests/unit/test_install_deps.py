"""tools/install-deps.sh, where it must not install: it names what to install in one line."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ktor_lab.paths import REPO

SCRIPT = REPO / "tools" / "install-deps.sh"


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
    for package in ("nginx-light", "prometheus", "openjdk-17-jdk-headless", "maven", "chromium", "Go 1.24"):
        assert package in r.stderr, package


def test_it_refuses_what_it_does_not_know():
    r = subprocess.run(["bash", str(SCRIPT), "everything"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage:" in r.stderr
