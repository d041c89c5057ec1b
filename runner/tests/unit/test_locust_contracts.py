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


def test_locust_conf_is_lab_run_s_default_load_whose_rate_is_capacity():
    """The compose UI opens with locust.conf's values: the load lab run warms every proxy at
    (closed/50/0), which the lab's own rule (verdict.judge) calls the engine's capacity, not the
    load model's."""
    from ktor_lab import verdict
    from ktor_lab.commands.run import add_parser
    from ktor_lab.plan import parse_load
    from ktor_lab.results import LocustFigures, Run, Warmup

    conf = (LOCUST_DIR / "locust.conf").read_text()
    values = dict(
        (k.strip(), v.strip())
        for k, _, v in (ln.partition("=") for ln in conf.splitlines())
        if _ and k[0] != "#"
    )
    assert Path(REPO / values["locustfile"]).exists() and values["scenario"] == "static-small"
    load = parse_load(f"{values['load-model']}/{values['users']}/{values['wait-min']}-{values['wait-max']}")
    import argparse

    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    assert load == parse_load(sub.choices["run"].get_default("warm_first"))  # lab run's warm-up load
    run = Run("singleton-cio", "cio", "singleton", "static-small", load, 1, warmup=Warmup(settled=True))
    run.locust = LocustFigures(rps=2000.0, avg_ms=20.0, requests=20000, cpu_peak_percent={"local": 60})
    assert verdict.judge(run).capacity and "load-model" not in verdict.judge(run).flags
