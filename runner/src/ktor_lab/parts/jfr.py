"""A CPU profile of one JVM over a window, from Java Flight Recorder: `lab bench --profile`.

The recording starts before the warm-up (`jcmd PID JFR.start`) and is dumped after the window;
only the window's execution samples are read. Started at the window itself, JFR's start (it
instruments classes, and the JVM throws away compiled code that used them) fell inside the
window: CPU per request 2.5-10x a run without it (plain CIO 2.777 against 0.714 ms, 2026-11-24).
The samples are counted by the frame on top of each stack (where the CPU went) and by the first
frame of the lab's, Ktor's, the engine's or Netty's code in each stack (whose code asked for it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..cases import ENGINE_PACKAGES
from ..machine import java

# The code a sample is charged to: the first frame of one of these in its stack, top down.
# Each engine's own code first (cases.ENGINE_PACKAGES, the one list of engines), then Ktor's.
OWNERS = (
    ("lab", ("lab.",)),
    *ENGINE_PACKAGES.items(),
    ("ktor", ("io.ktor.",)),
    ("kotlinx.coroutines", ("kotlinx.coroutines.",)),
    ("netty", ("io.netty.",)),
    ("micrometer", ("io.micrometer.",)),
    ("jdk", ("java.", "jdk.", "sun.")),
)


def tool(name: str) -> str:
    """jcmd or jfr of the JDK that runs the lab's JVMs."""
    return shutil.which(name) or str(Path(java()).resolve().with_name(name))


@dataclass
class Profile:
    samples: int = 0
    top_frames: list[tuple[str, float]] = field(default_factory=list)  # (method, share of samples)
    owners: dict[str, float] = field(default_factory=dict)  # owner -> share of samples

    def to_json(self) -> dict:
        return {"samples": self.samples, "top_frames": self.top_frames, "owners": self.owners}


class Recording:
    """`start()` before the warm-up, `dump(began, ended)` after the measured window, then `read()`."""

    def __init__(self, pid: int, path: Path):
        self.pid, self.path = pid, path
        self.began: datetime | None = None
        self.ended: datetime | None = None

    def start(self) -> None:
        subprocess.run(
            [tool("jcmd"), str(self.pid), "JFR.start", "name=window", "settings=profile"],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def dump(self, began: datetime, ended: datetime) -> None:
        self.began, self.ended = began, ended
        subprocess.run(
            [tool("jcmd"), str(self.pid), "JFR.stop", "name=window", f"filename={self.path}"],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def read(self, top: int = 15) -> Profile:
        """The window's samples (all of them when no window was marked)."""
        return read(self.path, top, self.began, self.ended)


def now() -> datetime:
    return datetime.now(UTC)


def event_time(text: str) -> datetime:
    """JFR's "2026-11-24T10:41:06.220867946Z" (nanoseconds, which Python does not read) as a time."""
    whole, _, rest = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{(rest + '000000')[:6]}+00:00")


def read(path: Path, top: int = 15, since: datetime | None = None, until: datetime | None = None) -> Profile:
    """The execution samples of a recording between `since` and `until`, counted by top frame and
    by owner."""
    r = subprocess.run(
        [tool("jfr"), "print", "--json", "--events", "jdk.ExecutionSample", "--stack-depth", "64", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    events = json.loads(r.stdout)["recording"]["events"]
    tops: Counter[str] = Counter()
    owners: Counter[str] = Counter()
    for event in events:
        if since and until and not since <= event_time(event["values"]["startTime"]) <= until:
            continue
        frames = [
            # a type's name as `jfr print --json` gives it, in binary (a.b.C) or internal (a/b/C) form
            f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
            for f in (event["values"].get("stackTrace") or {}).get("frames", [])
        ]
        if not frames:
            continue
        tops[frames[0]] += 1
        owners[owner(frames)] += 1
    n = sum(tops.values())
    return Profile(
        samples=n,
        top_frames=[(name, round(count / n, 4)) for name, count in tops.most_common(top)] if n else [],
        owners={k: round(v / n, 4) for k, v in owners.most_common()} if n else {},
    )


def owner(frames: list[str]) -> str:
    for frame in frames:
        for name, prefixes in OWNERS:
            if frame.startswith(prefixes):
                if name == "jdk":
                    break  # the JDK's own frames: look further down for who called it
                return name
    return "jdk" if frames and frames[0].startswith(OWNERS[-1][1]) else "other"
