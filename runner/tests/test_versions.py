"""Ktor release and JDK as dimensions: the releases' list, refusals before anything starts, the
builds of both releases (unit tests included), `lab run --ktor --java`'s plan, and `lab study
versions` at a tiny size (a real matrix of releases and JDKs)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ktor_lab import cli, run_report, versions
from ktor_lab.paths import REPO
from ktor_lab.plan import parse_load
from ktor_lab.results import Results

LAB = str(Path(sys.executable).with_name("lab"))
NEWER = versions.default_release()  # the newest
# Built on request: it has apache, and no java engine. The older release of the runs here too (the
# suite has built its proxy for the apache case already).
OTHER = versions.release("3.4.1")


def test_jdks_are_found_by_major_version_and_by_folder(tmp_path):
    for jdk in versions.jdks():
        assert versions.jdk(jdk.major).major == jdk.major
        assert versions.jdk(str(jdk.home)).version == jdk.version
        out = subprocess.run([jdk.java, "-version"], capture_output=True, text=True).stderr
        assert f'"{jdk.version}' in out
    with pytest.raises(ValueError, match="not a JDK folder"):
        versions.jdk(str(tmp_path))


@pytest.mark.slow
def test_another_release_builds_with_its_unit_tests_and_its_jar_refuses_what_it_lacks(tmp_path):
    """The Maven build of a release other than the default, unit tests included (they check the
    build holds exactly the engines the release publishes), in a folder of its own."""
    build = f"target/ktor-{OTHER.name}-test"
    args = OTHER.maven_flags()
    try:
        r = subprocess.run(
            ["mvn", "-B", "-ntp", "-q", "-pl", "proxy-app", "package", *args, f"-Dlab.build.dir={build}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        reports = list((REPO / "proxy-app" / build / "surefire-reports").glob("TEST-*.xml"))
        ran = sum(int(ET.parse(p).getroot().get("tests")) for p in reports)
        failed = sum(int(ET.parse(p).getroot().get(k)) for p in reports for k in ("failures", "errors"))
        assert ran > 50 and failed == 0, (ran, failed)
        jar = REPO / "proxy-app" / build / "proxy-app.jar"
        r = subprocess.run(
            ["java", "-jar", str(jar)],
            env={"CLIENT_ENGINE": "java", "PORT": "1", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2
        assert r.stderr.strip() == (
            f"proxy: configuration error: CLIENT_ENGINE='java' is not in this build: Ktor {OTHER.name} "
            f"does not publish the java engine; use one of {', '.join(OTHER.engines)}, or a build of a "
            "release that has it (see ktor-releases.tsv)"
        )
    finally:
        shutil.rmtree(REPO / "proxy-app" / build, ignore_errors=True)


def test_lab_run_with_two_releases_and_two_jdks_plans_every_combination():
    """`lab run --ktor A,B --java X,Y` as a user types it: a proxy per combination. (A real matrix of
    releases and JDKs runs in the study below, on the same machinery.)"""
    java = list(dict.fromkeys(j.major for j in versions.jdks()))[:2]
    if len(java) < 2:
        # Debian's apt gives one JDK (17); CI's machines also have Temurin 25 in /usr/lib/jvm.
        pytest.skip(f"needs two JDKs of different versions in /usr/lib/jvm; found {java or 'none'}")
    r = subprocess.run(
        [
            LAB,
            "run",
            "--ktor",
            f"{OTHER.name},{NEWER.name}",
            "--java",
            ",".join(java),
            "--cases",
            "per-call-cio",
        ]
        + ["--loads", "rate/20", "--windows", "1", "--forks", "1", "--aa", "none", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    proxies = ", ".join(f"per-call-cio ktor {k} jdk {j}" for k in (OTHER.name, NEWER.name) for j in java)
    assert f"dry run; 4 proxies: {proxies}" in r.stdout + r.stderr


@pytest.mark.slow
def test_study_versions_tiny_tests_a_ktor_upgrade_on_the_runs_of_both_releases(tmp_path):
    """The study's `ktor` part, with the user's releases over its own (the `jdk` part's plan:
    test_plan_studies.py): both releases measured in one interleaved lab run, each proxy on the
    release it says it runs, and the upgrade's line on the study's page."""
    out = tmp_path / "study"
    argv = ["study", "versions", "--parts", "ktor", "--cases", "singleton-okhttp", "--loads", "rate/20"]
    argv += ["--ktor", f"{OTHER.name},{NEWER.name}", "--forks", "1", "--windows", "2", "--warmup", "0"]
    argv += ["--duration", "2", "--settle", "0", "--warm-first", "none", "--spare", "0", "--out", str(out)]
    assert cli.main(argv) == 0
    data = json.loads((out / "ktor" / "results.json").read_text())
    runs = data["runs"]
    assert sorted({(r["ktor"], r["java"].split(".")[0]) for r in runs}) == sorted(
        (k, "17") for k in (OTHER.name, NEWER.name)
    )
    for run in runs:  # each proxy says itself which release it ran on
        assert run["proxy"]["settings"]["ktor_version"] == run["ktor"] and run["locust"]["failures"] == 0
    (group,) = run_report.groups(Results.from_json(data))
    assert [(c.dimension, c.same) for c in run_report.changes(group)] == [("Ktor", "JDK 17")]
    page = (out / "report.md").read_text()
    heading = parse_load("rate/20").describe()
    assert f"ktor, static-small, {heading}, Ktor {OTHER.name} -> {NEWER.name}: of 1 case, " in page
    assert f"| singleton-okhttp | JDK 17 | Ktor {OTHER.name} -> {NEWER.name} |" in page
