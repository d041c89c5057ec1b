"""The JVM modules and where they live: ./pom.xml's <modules>, each module's own pom.xml, the
runner's MODULE_FOLDERS and the Makefile name the same folders (the benchmark-only ones in bench/)."""

from __future__ import annotations

import re

from ktor_lab import versions
from ktor_lab.paths import BENCH_DIR, MODULE_FOLDERS, REPO

BENCH_ONLY = {"plain-client", "engine-bench", "lean-proxy", "io-bench"}


def test_the_root_pom_lists_exactly_the_runner_s_module_folders():
    pom = (REPO / "pom.xml").read_text()
    assert sorted(re.findall(r"<module>([\w/.-]+)</module>", pom)) == sorted(MODULE_FOLDERS.values())


def test_each_module_is_named_as_the_runner_names_it_and_finds_its_parent():
    for module in MODULE_FOLDERS:
        folder = versions.module_dir(module)
        pom = (folder / "pom.xml").read_text()
        parent = re.search(r"<relativePath>([^<]+)</relativePath>", pom)[1]
        assert (folder / parent).resolve() == (REPO / "pom.xml").resolve(), module
        own = re.sub(r"<parent>.*?</parent>", "", pom, flags=re.S)
        assert re.search(r"<artifactId>([\w-]+)</artifactId>", own)[1] == module


def test_the_benchmark_only_modules_stand_together_in_bench():
    assert {m for m in MODULE_FOLDERS if versions.module_dir(m).parent == BENCH_DIR} == BENCH_ONLY
    assert {p.name for p in BENCH_DIR.iterdir() if p.is_dir()} == BENCH_ONLY


def test_the_makefile_builds_the_jars_the_runner_runs():
    makefile = (REPO / "Makefile").read_text()
    for module in versions.JARS:
        jar = versions.jar(module, versions.default_release()).relative_to(REPO).as_posix()
        assert re.search(rf"^\w+_JAR := {re.escape(jar)}$", makefile, re.M), jar
        assert f"-pl {MODULE_FOLDERS[module]} " in makefile, module
