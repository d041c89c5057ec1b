"""The one error a command raises to stop with a message: `main()` prints it and exits with its code."""

from __future__ import annotations


class LabError(Exception):
    """A reason to stop, for the user: `lab: <message>`, exit `code` (2: bad input, 1: a run failed)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code
