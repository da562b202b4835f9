"""How hard the reliability suite pushes: ``RELIABILITY_SCALE=full`` (``make
reliability``) runs the issue's full numbers; the default is the bounded CI
subset that keeps the whole suite fast."""

from __future__ import annotations

import os

FULL = os.environ.get("RELIABILITY_SCALE", "ci") == "full"


def pick(ci: int, full: int) -> int:
    return full if FULL else ci
