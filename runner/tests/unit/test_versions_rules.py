"""Ktor release and JDK as dimensions without any part: the releases' list against the pom, and
what is refused before anything starts."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET

import pytest

from ktor_lab import cli, versions
from ktor_lab.cases import Case
from ktor_lab.parts import compose
from ktor_lab.paths import REPO

NEWER = versions.releases()[0]  # the default, the newest with the proxy: it has no apache engine
OLDER = versions.release("3.4.0")


def test_the_releases_list_and_the_pom_agree_on_the_default():
    """./pom.xml builds the list's first release (its Kotlin, its properties) and .mvn/maven.config holds
    its -Dno.<engine> flags, so that a plain `mvn package` builds what the runner calls the default."""
    pom = ET.parse(REPO / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    default = versions.default_release()
    assert pom.find("m:properties/m:ktor.version", ns).text == default.name
    assert pom.find("m:properties/m:kotlin.version", ns).text == default.kotlin
    for name, value in default.properties:
        assert pom.find(f"m:properties/m:{name}", ns).text == value, name
    # Every release sets the same properties (a build of one must not inherit another's).
    assert {tuple(n for n, _ in r.properties) for r in versions.releases()} == {
        tuple(n for n, _ in default.properties)
    }
    lacking = {f for f in default.maven_flags() if f.startswith("-Dno.") and f.endswith("=true")}
    assert set((REPO / ".mvn" / "maven.config").read_text().split()) == lacking
    assert "apache" not in default.engines  # ktor-client-apache ends at 3.4.1


@pytest.mark.parametrize("release", versions.releases(), ids=lambda r: r.name)
def test_the_proxy_image_builds_a_release_with_the_runner_s_flags(release):
    """proxy-app/Dockerfile reads its Maven flags from proxy-app/maven-flags.awk: the same as the
    runner's for every release with the proxy (engines it lacks, properties), in any order; a
    clients-only release is refused with its reason, as the runner refuses it."""
    r = subprocess.run(
        ["awk", "-v", f"r={release.name}", "-f", "proxy-app/maven-flags.awk", "ktor-releases.tsv"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    if not release.builds_proxy:
        assert r.returncode == 1 and f"KTOR_VERSION={release.name} builds the clients only" in r.stderr
        assert "builds the clients only here" in release.proxy_refusal()
        return
    assert r.returncode == 0 and set(r.stdout.split()) == set(release.maven_flags())
    bad = subprocess.run(
        ["awk", "-v", "r=9.9.9", "-f", "proxy-app/maven-flags.awk", "ktor-releases.tsv"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert (
        bad.returncode == 1
        and f"KTOR_VERSION=9.9.9 is not in ktor-releases.tsv (known: {NEWER.name} " in bad.stderr
    )


def test_an_engine_the_default_lacks_runs_on_its_last_release_by_itself():
    """apache: not in the default release, so a case of it without a release of its own runs on
    the newest release that publishes it (3.4.1), and says so; named releases are kept, or refused."""
    apache = Case.parse("singleton-apache")
    last = versions.last_release("apache")
    assert last.name == "3.4.1" and versions.release_of(apache) == last
    assert versions.note(apache) == "apache: Ktor 3.4.1, its last release; deprecated"
    assert versions.release_of(Case.parse("singleton-apache ktor 3.4.0")) == OLDER
    assert (
        versions.release_of(Case.parse("singleton-okhttp")) == NEWER
        and versions.note(Case.parse("singleton-okhttp")) is None
    )
    with pytest.raises(ValueError) as e:
        versions.release_of(Case.parse(f"per-call-apache ktor {NEWER.name}"))
    assert str(e.value) == (
        f"Ktor {NEWER.name} does not publish the apache engine (case per-call-apache ktor {NEWER.name}); "
        "releases with it: 3.4.0, 3.4.1. Drop the release, or name one of those"
    )
    with pytest.raises(ValueError, match="releases with it: 3.4.0, 3.5.1, 3.5.2, 3.6.1"):
        versions.release_of(Case.parse("singleton-java ktor 3.4.1"))
    # What the proxy's apache engine says of its release (lab_proxy_info) is this list's last.
    kotlin = next((REPO / "proxy-app" / "src" / "engines" / "apache").rglob("ApacheSetup.kt")).read_text()
    assert f'const val LAST_RELEASE = "{last.name}"' in kotlin
    # And compose builds its overlays' image on the same release.
    assert compose.dotenv()[compose.release_variable("apache")] == last.name
    assert compose.dotenv()["KTOR_VERSION"] == NEWER.name


def test_an_engine_a_release_lacks_is_skipped_by_name_and_refused_where_a_case_names_it(capsys):
    argv = ["run", "--ktor", f"3.4.0,{NEWER.name}", "--cases", "singleton-cio,per-call-apache", "--dry-run"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert (
        f"lab run: skips per-call-apache ktor {NEWER.name}: Ktor {NEWER.name} does not publish the apache "
        f"engine (case per-call-apache ktor {NEWER.name})" in out
    )
    assert f"per-call-apache ktor 3.4.0, singleton-cio ktor {NEWER.name}" in out  # the others run
    assert cli.main(["run", "--cases", f"per-call-apache ktor {NEWER.name}", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(
            f"lab: case 'per-call-apache ktor {NEWER.name}': Ktor {NEWER.name} does not publish the "
            "apache engine"
        )
        and err.count("\n") == 0
    )


def test_an_unknown_release_or_jdk_is_refused_before_anything_starts(capsys):
    assert cli.main(["run", "--ktor", "9.9.9", "--cases", "singleton-cio"]) == 2
    assert f"Ktor '9.9.9' is not in ktor-releases.tsv (known: {NEWER.name}" in capsys.readouterr().err
    assert cli.main(["run", "--java", "8", "--cases", "singleton-cio"]) == 2
    err = capsys.readouterr().err
    assert "--java 8: no JDK 8 on this machine (found: 17" in err and err.count("\n") == 1
    assert cli.main(["up", "per-call-apache", "--ktor", NEWER.name]) == 2
    assert "does not publish the apache engine" in capsys.readouterr().err
    assert cli.main(["run", "--backend", "compose", "--java", "25", "--cases", "singleton-cio"]) == 2
    assert "PROXY_RUN_IMAGE" in capsys.readouterr().err


def test_a_jar_is_stale_when_a_source_of_it_is_newer_but_not_when_a_test_of_it_is(tmp_path, monkeypatch):
    """lab run rebuilds a jar older than its sources (the default release's too): a run must never
    measure yesterday's proxy. Its tests are not in the jar, so editing one must not cost a build."""
    import os

    monkeypatch.setattr(versions, "REPO", tmp_path)
    main = tmp_path / "proxy-app" / "src" / "main" / "kotlin" / "Proxy.kt"
    test = tmp_path / "proxy-app" / "src" / "test" / "kotlin" / "ProxyTest.kt"
    jar = versions.jar("proxy-app", versions.default_release())
    for path in (main, test, jar, tmp_path / "pom.xml", tmp_path / "proxy-app" / "pom.xml"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    built = versions.RELEASES_FILE.stat().st_mtime + 100  # after every source, the releases list's too
    os.utime(jar, (built, built))
    for path in (main, test, tmp_path / "pom.xml", tmp_path / "proxy-app" / "pom.xml"):
        os.utime(path, (built - 50, built - 50))
    assert not versions.stale("proxy-app", versions.default_release())
    os.utime(test, (built + 10, built + 10))
    assert not versions.stale("proxy-app", versions.default_release())
    os.utime(main, (built + 10, built + 10))
    assert versions.stale("proxy-app", versions.default_release())
    jar.unlink()
    assert versions.stale("proxy-app", versions.default_release())


def test_a_clients_only_release_is_refused_for_the_proxy_with_where_it_runs(capsys):
    """Ktor 3.6.1 builds the clients only here (no ktor-bom, no ktor-server-netty served): a case
    on it is refused in one line naming the study that runs it, and it is never the release an
    engine falls back to, nor one `lab study versions` runs the proxy on."""
    clients = [r for r in versions.releases() if not r.builds_proxy]
    assert [r.name for r in clients] == ["3.6.1"] and "-Dlab.modules=clients" in clients[0].maven_flags()
    assert cli.main(["run", "--cases", "singleton-okhttp ktor 3.6.1", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Ktor 3.6.1 builds the clients only here" in err and "lab study engines --ktor 3.6.1" in err
    assert err.count("\n") == 0
    with pytest.raises(ValueError, match="builds the clients only"):
        versions.proxy_release_of(Case.parse("singleton-cio ktor 3.6.1"))
    assert versions.release_of(Case.parse("singleton-cio ktor 3.6.1")).name == "3.6.1"  # the engines study's
    assert all(versions.last_release(e).builds_proxy for e in versions.all_engines())
