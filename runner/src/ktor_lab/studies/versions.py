"""`lab study versions`: what an upgrade of Ktor or of the JDK does to each engine.

Two `lab run`s at one fixed rate (equal work): every case on JDK 17 with each Ktor release
(ktor-releases.tsv, oldest first), then every case on the newest release on JDK 17 and 25. A case
a release does not publish (Java before 3.5.0) is skipped by name. Ktor's own socket and file I/O
per release is the io study's (JMH: `lab study io --ktor RELEASE`).
"""

from __future__ import annotations

from .. import versions
from .plans import Part, PlanStudy

RATE = "rate/200/40"


def releases() -> list[str]:
    """The releases with the proxy (a clients-only one is the engines study's), oldest first."""
    return sorted((r.name for r in versions.releases() if r.builds_proxy), key=versions.version_key)


def parts() -> tuple[Part, ...]:
    names = releases()
    return (
        Part(
            "ktor",
            "each Ktor release on JDK 17",
            ("--ktor", ",".join(names), "--java", "17", "--loads", RATE),
        ),
        Part(
            "jdk",
            f"Ktor {names[-1]} on JDK 17 and 25",
            ("--ktor", names[-1], "--java", "17,25", "--loads", RATE),
        ),
    )


STUDY = PlanStudy(
    name="versions",
    title="Ktor release and JDK: what an upgrade changes, per engine",
    help=f"Ktor {' vs '.join(releases())} and JDK 17 vs 25 at one fixed rate: CPU, latency, threads, heap",
    question="What does an upgrade of Ktor, or of the JDK, change for each engine and lifetime at equal "
    "work? Every case on each release, then on each JDK, at the same fixed rate; each change is tested "
    "over the JVMs and given with its interval.",
    parts=parts,
    compares=("ktor", "java"),
    notes=(
        "Ktor's own socket and file I/O per release, against plain JVM I/O: "
        f"`lab study io --ktor {releases()[0]}`, then each other release.",
    ),
)
