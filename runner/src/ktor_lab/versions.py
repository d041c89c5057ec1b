"""Ktor releases and JDKs as choices: which release publishes which engine, the jars built for a
release (one folder per release), and the JDKs on this machine by name or path.

The releases are read from ktor-releases.tsv (the repository's one list: Maven, the proxy's image
and this module read it); the first is the one ./pom.xml builds by default, into target/.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .paths import MODULE_FOLDERS, REPO

RELEASES_FILE = REPO / "ktor-releases.tsv"
JVM_DIRS = (Path("/usr/lib/jvm"),)
# Module -> its runnable jar's name (io-bench's is JMH's benchmarks.jar); its folder: module_dir.
JARS = {
    "proxy-app": "proxy-app.jar",
    "lean-proxy": "lean-proxy.jar",
    "engine-bench": "engine-bench.jar",
    "io-bench": "benchmarks.jar",
}


class CaseLike(Protocol):
    """What this module reads of a case (cases.Case), without importing it: cases.py reads this
    module for a case's release (its Ktor dimension's checks)."""

    engine: str
    ktor: str
    java: str

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class Release:
    name: str
    kotlin: str
    engines: tuple[str, ...]
    # The Maven properties its build sets (ktor-releases.tsv: netty.version, ktor.micrometer.version).
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def builds_proxy(self) -> bool:
        """False for a release that builds the clients only here (`lab.modules=clients`: its ktor-bom
        and ktor-server-netty are not served): no proxy, no compose image; the engines and io studies."""
        return dict(self.properties).get("lab.modules", "all") != "clients"

    def proxy_refusal(self) -> str | None:
        """Why the proxy cannot be built on this release, or None."""
        if self.builds_proxy:
            return None
        return (
            f"Ktor {self.name} builds the clients only here (its ktor-bom and ktor-server-netty are not "
            "served), so there is no proxy on it: measure its engines in-process with "
            f"`lab study engines --ktor {self.name}`, or name a release with the proxy "
            f"({', '.join(r.name for r in releases() if r.builds_proxy)})"
        )

    def maven_args(self, default: bool) -> list[str]:
        """What `mvn` needs to build this release (nothing for the default one, built into target/
        with ./pom.xml's and .mvn/maven.config's values)."""
        if default:
            return []
        return [*self.maven_flags(), f"-Dlab.build.dir=target/ktor-{self.name}"]

    def maven_flags(self) -> list[str]:
        """The release, its Kotlin, `-Dno.<engine>=true` for each engine it does not publish (`=false`
        for the others, over .mvn/maven.config's), and its properties: pom.xml's properties and profiles."""
        return [
            f"-Dktor.version={self.name}",
            f"-Dkotlin.version={self.kotlin}",
            *(f"-Dno.{e}={'false' if e in self.engines else 'true'}" for e in all_engines()),
            *(f"-D{name}={value}" for name, value in self.properties),
        ]


def releases(path: Path = RELEASES_FILE) -> list[Release]:
    """The list's releases, parsed once a version of the file (a case check reads it every window)."""
    stat = path.stat()
    return list(_parsed(path, stat.st_mtime_ns, stat.st_size))


@functools.cache
def _parsed(path: Path, _mtime_ns: int, _size: int) -> tuple[Release, ...]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, kotlin, engines, properties = line.split()
            pairs = tuple(tuple(p.split("=", 1)) for p in properties.split(","))
            out.append(Release(name, kotlin, tuple(engines.split(",")), pairs))  # type: ignore[arg-type]
    return tuple(out)


def all_engines() -> list[str]:
    """Every engine some release of the list publishes, in the order the list first names them."""
    return list(dict.fromkeys(e for r in releases() for e in r.engines))


def default_release() -> Release:
    return releases()[0]


def release(name: str) -> Release:
    """The release named `name`; ValueError naming the known ones otherwise."""
    known = releases()
    for r in known:
        if r.name == name.strip():
            return r
    raise ValueError(
        f"Ktor {name.strip()!r} is not in ktor-releases.tsv (known: {', '.join(r.name for r in known)}); "
        "add a line with the Kotlin it is built with and the engines it publishes"
    )


def version_key(name: str) -> tuple:
    """3.10.0 after 3.5.2: a release's numbers compared as numbers."""
    return tuple(int(p) if p.isdigit() else 0 for p in name.split("."))


def publishing(engine: str) -> list[Release]:
    """The releases of ktor-releases.tsv that publish `engine`, oldest first."""
    return sorted((r for r in releases() if engine in r.engines), key=lambda r: version_key(r.name))


def last_release(engine: str) -> Release | None:
    """The newest release with the proxy that publishes `engine` (apache: 3.4.1), None for none."""
    return ([r for r in publishing(engine) if r.builds_proxy] or [None])[-1]


def release_of(case: CaseLike, default: Release | None = None) -> Release:
    """The release `case` runs on: the one it names; else `default` (the list's first unless given:
    compose's KTOR_VERSION), or, for an engine it does not publish, the newest release that does
    (apache: its last, 3.4.1). ValueError naming the releases with the engine when none will do."""
    rel = release(case.ktor) if case.ktor else default or default_release()
    if case.engine in rel.engines:
        return rel
    have = ", ".join(r.name for r in publishing(case.engine)) or "none"
    if case.ktor:
        raise ValueError(
            f"Ktor {rel.name} does not publish the {case.engine} engine (case {case.name}); "
            f"releases with it: {have}. Drop the release, or name one of those"
        )
    last = last_release(case.engine)
    if last is None:
        raise ValueError(
            f"no release of ktor-releases.tsv publishes the {case.engine} engine (case {case.id})"
        )
    return last


def proxy_release_of(case: CaseLike, default: Release | None = None) -> Release:
    """release_of, for the proxy: ValueError also when that release builds the clients only."""
    rel = release_of(case, default)
    if why := rel.proxy_refusal():
        raise ValueError(why)
    return rel


def note(case: CaseLike) -> str | None:
    """What a report and an overlay say of a case that runs on another release than the default by
    itself: `apache: Ktor 3.4.1, its last release; deprecated` (None for the others)."""
    if case.ktor or case.engine in default_release().engines:
        return None
    return f"{case.engine}: Ktor {release_of(case).name}, its last release; deprecated"


def module_dir(module: str) -> Path:
    """The module's folder (paths.MODULE_FOLDERS: proxy-app/, the benchmark-only ones in bench/)."""
    return REPO / MODULE_FOLDERS[module]


def build_dir(module: str, rel: Release) -> Path:
    base = module_dir(module) / "target"
    return base if rel == default_release() else base / f"ktor-{rel.name}"


def jar(module: str, rel: Release) -> Path:
    return build_dir(module, rel) / JARS[module]


def _sources(module: str) -> list[Path]:
    folder = module_dir(module)
    roots = [folder / "src", folder / "pom.xml", REPO / "pom.xml", RELEASES_FILE]
    if module in ("lean-proxy", "engine-bench"):
        proxy, plain = module_dir("proxy-app"), module_dir("plain-client")
        roots += [
            proxy / "src" / "main",
            proxy / "src" / "engines",
            proxy / "pom.xml",
            plain / "src",
            plain / "pom.xml",
        ]
    out = []
    for root in roots:
        if root.is_dir():  # a module's tests are not in its jar: editing one costs no build
            out += [p for p in root.rglob("*") if p.is_file() and not p.is_relative_to(root / "test")]
        elif root.exists():
            out.append(root)
    return out


def stale(module: str, rel: Release) -> bool:
    path = jar(module, rel)
    if not path.exists():
        return True
    built = path.stat().st_mtime
    return any(p.stat().st_mtime > built for p in _sources(module))


def ensure_jar(module: str, rel: Release, log=sys.stderr) -> Path:
    """The module's jar for `rel`, built first when missing or older than its sources (about
    30 s per module; unit tests are `make test`'s). RuntimeError with Maven's last lines on failure."""
    path = jar(module, rel)
    if not stale(module, rel):
        return path
    print(
        f"lab: building {module} for Ktor {rel.name} into {path.parent.relative_to(REPO)}/",
        file=log,
        flush=True,
    )
    # -pl takes the module's folder (bench/lean-proxy) or its :artifactId, not its bare name.
    argv = ["mvn", "-B", "-ntp", "-q", "-pl", MODULE_FOLDERS[module], "-am", "package", "-DskipTests"]
    argv += rel.maven_args(rel == default_release())
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0 or not path.exists():
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"building {module} for Ktor {rel.name} failed ({' '.join(argv)}):\n{tail}")
    path.touch()
    return path


def ensure_jars(releases: list[Release], modules: tuple[str, ...] = ("proxy-app",)) -> None:
    """Every module's jar for every release, built before anything starts."""
    for rel in releases:
        for module in modules:
            ensure_jar(module, rel)


def program(case: CaseLike) -> tuple[Path, str | None]:
    """What runs the proxy for `case`: the jar of its release (built first when missing or older
    than its sources; an engine the default release lacks on its last release), and its JDK's
    java (None: the default java)."""
    path = ensure_jar("proxy-app", proxy_release_of(case))
    return path, (jdk(case.java).java if case.java else None)


def names(text: str) -> list[str]:
    """A comma-separated list of releases or JDKs, as the options give them."""
    return [x.strip() for x in text.split(",") if x.strip()]


# --- JDKs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Jdk:
    version: str  # JAVA_VERSION of its release file, e.g. 17.0.15 or 25.0.3
    home: Path

    @property
    def major(self) -> str:
        return self.version.split(".")[0]

    @property
    def java(self) -> str:
        return str(self.home / "bin" / "java")


def _release_version(home: Path) -> str | None:
    try:
        text = (home / "release").read_text()
    except OSError:
        return None
    m = re.search(r'^JAVA_VERSION="([^"]+)"', text, re.M)
    return m.group(1) if m and (home / "bin" / "java").exists() else None


def jdks() -> list[Jdk]:
    """The JDKs and JREs on this machine ($JAVA_HOME's first, then /usr/lib/jvm), each once."""
    homes = [Path(os.environ["JAVA_HOME"])] if os.environ.get("JAVA_HOME") else []
    for d in JVM_DIRS:
        homes += sorted(p for p in d.iterdir() if p.is_dir()) if d.is_dir() else []
    seen, out = set(), []
    for home in homes:
        real = home.resolve()
        if real in seen or not (version := _release_version(real)):
            continue
        seen.add(real)
        out.append(Jdk(version, home))
    return out


def default_jdk() -> Jdk | None:
    """The JDK `java` runs by default ($JAVA_HOME's, else the one on PATH)."""
    from .machine import java

    home = Path(java()).resolve().parents[1]
    version = _release_version(home)
    return Jdk(version, home) if version else None


def jdk(name: str) -> Jdk:
    """A JDK by major version (`17`, `25`) or by its folder (or its bin/java); ValueError naming
    the JDKs found otherwise."""
    name = name.strip()
    if "/" in name:
        home = Path(name)
        home = home.parents[1] if home.name == "java" and home.parent.name == "bin" else home
        if version := _release_version(home):
            return Jdk(version, home)
        raise ValueError(f"--java {name}: not a JDK folder (no release file and bin/java in it)")
    default = default_jdk()
    for candidate in ([default] if default else []) + jdks():
        if candidate.major == name:
            return candidate
    found = ", ".join(f"{j.major} ({j.home})" for j in jdks()) or "none"
    raise ValueError(
        f"--java {name}: no JDK {name} on this machine (found: {found}); give one of those, a JDK's "
        f"folder, or install JDK {name} (openjdk-{name}-jdk-headless where your system's packages have it, "
        "or a Temurin build from adoptium.net, into /usr/lib/jvm)"
    )
