#!/usr/bin/env python3
"""Go for the tests, when the machine has none new enough: the lab's pinned Go release, from the
Go module proxy (the toolchain module `go` itself downloads for GOTOOLCHAIN), checked against the
SHA-256 written below, unpacked into the user's cache. No root, nothing outside that folder.

    tools/fetch-go.py          print the path of a `go` 1.24+ (the one on PATH, else the cached
                               one), downloading the pinned release first when neither is there

runner/src/ktor_lab/parts/compose.py runs it for the go it builds tools/compose-config with.
Standard library only: it runs before the lab's venv exists.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

VERSION = "1.26.8"
# sha256 of golang.org/toolchain@v0.0.1-go1.26.8.linux-<arch>.zip, as served on 2026-11-24.
SHA256 = {
    "amd64": "30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7",
    "arm64": "02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99",
}
ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
MINIMUM = (1, 24)


def go_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("LAB_GO_DIR") or cache / "ktor-lab" / f"go{VERSION}")


def new_enough(go: str | Path | None) -> bool:
    """True when `go version` names 1.24 or later."""
    if not go or not Path(go).exists():
        return False
    try:
        out = subprocess.run([str(go), "version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    m = re.search(r"\bgo(\d+)\.(\d+)", out)
    return bool(m) and (int(m[1]), int(m[2])) >= MINIMUM


def fetch(target: Path, url: str, sha256: str) -> None:
    """Download, check, unpack beside `target`, then move into place: a failed try leaves nothing."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-go-") as tmp:
        archive = Path(tmp) / "go.zip"
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=60) as r, archive.open("wb") as f:
            while chunk := r.read(1 << 20):
                digest.update(chunk)
                f.write(chunk)
        if digest.hexdigest() != sha256:
            raise SystemExit(
                f"fetch-go: {url} has sha256 {digest.hexdigest()}, not {sha256}: nothing installed"
            )
        unpacked = Path(tmp) / "go"
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                # Each name starts with golang.org/toolchain@<version>/; nothing may leave the folder.
                rel = Path(*Path(info.filename).parts[2:])
                if not rel.parts or ".." in rel.parts or rel.is_absolute():
                    continue
                dest = unpacked / rel
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, dest.open("wb") as out:
                    shutil.copyfileobj(src, out)
                # Module zips keep no file modes: the programs are bin/* and pkg/tool/<os_arch>/*.
                if rel.parts[0] == "bin" or rel.parts[:2] == ("pkg", "tool"):
                    dest.chmod(dest.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        if not new_enough(unpacked / "bin" / "go"):
            raise SystemExit(f"fetch-go: the Go unpacked from {url} does not run here: nothing installed")
        try:
            unpacked.rename(target)
        except OSError:
            if not new_enough(target / "bin" / "go"):  # another run may have put it there first
                raise


def main() -> None:
    on_path = shutil.which("go")
    if new_enough(on_path):
        print(on_path)
        return
    target = go_dir()
    go = target / "bin" / "go"
    if not new_enough(go):
        arch = ARCH.get(platform.machine().lower())
        if platform.system() != "Linux" or arch is None:
            raise SystemExit(
                f"fetch-go: no pinned Go for {platform.system()} {platform.machine()}: install Go 1.24+"
            )
        if target.exists():
            # Ours to replace only in the cache (a download cut short); a folder named by
            # LAB_GO_DIR is the user's.
            if os.environ.get("LAB_GO_DIR"):
                raise SystemExit(
                    f"fetch-go: LAB_GO_DIR={target} holds no working Go: remove it or name another folder"
                )
            shutil.rmtree(target)
        proxy = os.environ.get("LAB_GO_PROXY", "https://proxy.golang.org")
        url = f"{proxy}/golang.org/toolchain/@v/v0.0.1-go{VERSION}.linux-{arch}.zip"
        print(f"fetch-go: downloading Go {VERSION} ({url}, about 70 MB) into {target}", file=sys.stderr)
        fetch(target, url, SHA256[arch])
    print(go)


if __name__ == "__main__":
    main()
