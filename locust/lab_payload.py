"""The bytes of the lab's static files: nginx/docker-entrypoint.d/40-lab-files.sh writes a file of
N bytes as this line repeated and cut at N. The locustfile checks downloads and makes uploads
with it; the runner's tests check nginx's files against it (one definition, imported by both)."""

from __future__ import annotations

import hashlib

LINE = b"ktor-lab static payload 0123456789 abcdefghijklmnopqrstuvwxyz.\n"

_digests: dict[int, str] = {}


def payload(size: int) -> bytes:
    """The content of a lab file of `size` bytes."""
    return (LINE * (size // len(LINE) + 1))[:size]


def digest_of(size: int) -> str:
    """The SHA-256 (hex) of payload(size), computed once per size."""
    if size not in _digests:
        _digests[size] = hashlib.sha256(payload(size)).hexdigest()
    return _digests[size]
