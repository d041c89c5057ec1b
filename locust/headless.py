"""Headless compose runs (compose/headless.yml): the run's folder in results/, then Locust.

Started as root in the container, it makes `/results/compose-<time>-<case>/`, gives it to the
owner of the mounted results/ folder (the user whose checkout it is; LAB_UID and LAB_GID
override), and runs Locust as that user, so the CSV and HTML files belong to whoever runs
compose, with no step of theirs. Locust's exit code is the run's: 0 without failures.
"""

from __future__ import annotations

import os
import sys
import time

RESULTS = "/results"


def owner(path: str) -> tuple[int, int]:
    st = os.stat(path)
    uid = os.environ.get("LAB_UID") or st.st_uid
    gid = os.environ.get("LAB_GID") or st.st_gid
    return int(uid), int(gid)


def main(argv: list[str]) -> None:
    uid, gid = owner(RESULTS)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folder = os.path.join(RESULTS, f"compose-{stamp}-{os.environ.get('LAB_CASE') or 'case'}")
    os.makedirs(folder)
    os.chown(folder, uid, gid)
    if os.getuid() == 0 and uid != 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    os.environ["HOME"] = "/tmp"  # the uid may have no home in the image
    print(f"lab: headless run as {uid}:{gid}, files in results/{os.path.basename(folder)}/", flush=True)
    locust = ["locust", *argv, "--csv", f"{folder}/locust", "--html", f"{folder}/locust.html"]
    os.execvp(locust[0], locust)


if __name__ == "__main__":
    main(sys.argv[1:])
