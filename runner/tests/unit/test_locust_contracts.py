"""The lab's Locust (locust/) without running it: its pins, its config, and the one definition
of what /lab/stats answers (locust/lab_window.py), shared with the runner."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ktor_lab.paths import LOCUST_DIR, REPO


def test_requirements_match_the_lab_package():
    pinned = {
        line.split("==")[0]: line.strip()
        for line in (LOCUST_DIR / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    deps = tomllib.loads((REPO / "runner" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert set(pinned.values()) <= set(deps), "locust/requirements.txt and runner/pyproject.toml disagree"


def test_locust_conf_is_the_documented_default():
    conf = (LOCUST_DIR / "locust.conf").read_text()
    for line in ("scenario = static-small", "load-model = closed", "wait-min = 1", "wait-max = 2"):
        assert line in conf
    assert Path(REPO / conf.split("locustfile = ")[1].split()[0]).exists()
