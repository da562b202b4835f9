"""The byte sizes ``--process-memory-max`` accepts: ``2G``, ``512M``, ``65536``."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["parse_size"]

_SIZE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``2G``, ``512M``, ``100m``, ``1.5G``, ``65536``: bytes (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"invalid size {text!r} (expected e.g. 512M, 2G or a byte count)")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value < 1:
        raise ValueError(f"invalid size {text!r}: must be positive")
    return value
