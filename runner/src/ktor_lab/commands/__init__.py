"""One module per `lab` command: each is a `Command` (`add_parser(sub)` and `run(args) -> int`), and
raises `LabError` to stop with a message (cli.main prints it). Parts come up through a backend
(backends.py)."""

from __future__ import annotations

import argparse
from typing import Protocol


class Command(Protocol):
    """A `lab` command's module, as cli.COMMANDS holds it."""

    def add_parser(self, sub) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...
