"""Ktor release and JDK as dimensions without any part: the releases' list against the pom, and
what is refused before anything starts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ktor_lab import cli, versions
from ktor_lab.paths import REPO

NEWER = versions.releases()[-1]


def test_the_releases_list_and_the_pom_agree_on_the_default():
    pom = ET.parse(REPO / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    assert pom.find("m:properties/m:ktor.version", ns).text == versions.default_release().name
    assert pom.find("m:properties/m:kotlin.version", ns).text == versions.default_release().kotlin
    assert versions.default_release().engines == ("cio", "apache", "apache5", "okhttp", "java")
    assert "apache" not in NEWER.engines  # ktor-client-apache ends at 3.4.1


def test_an_engine_a_release_lacks_and_an_unknown_jdk_are_refused_before_anything_starts(capsys):
    assert cli.main(["run", "--ktor", f"3.4.0,{NEWER.name}", "--cases", "singleton-cio,per-call-apache"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"lab: Ktor {NEWER.name} does not publish the apache engine (case per-call-apache); "
        f"its engines: {', '.join(NEWER.engines)}. Drop the case or the release"
    )
    assert cli.main(["run", "--ktor", "9.9.9", "--cases", "singleton-cio"]) == 2
    assert "Ktor '9.9.9' is not in ktor-releases.tsv (known: 3.4.0" in capsys.readouterr().err
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
