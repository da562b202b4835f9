"""The C programs ``make`` builds next to their sources (``processes/native/``):
which of them this installation has.

A wheel or image built after ``make`` carries them (package data). One built for
another architecture (copied into an image of another one) counts as missing: each
caller then does without it, as it says.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Final

__all__ = ["built_program", "runs_here"]

_NATIVE_DIR: Final = Path(__file__).parent / "native"

# ELF e_machine of the platforms the programs are built for.
_ELF_MACHINES: Final = {"x86_64": 62, "aarch64": 183, "i686": 3, "armv7l": 40, "riscv64": 243}


def runs_here(path: str) -> bool:
    """Whether ``path`` is an executable ELF program for this machine."""
    if not os.access(path, os.X_OK):
        return False
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    wanted = _ELF_MACHINES.get(platform.machine())
    machine = int.from_bytes(header[18:20], "little") if len(header) == 20 else -1
    return header[:4] == b"\x7fELF" and (wanted is None or machine == wanted)


def built_program(name: str) -> str | None:
    """The path of the native program ``name`` when it is built and runs here."""
    path = str(_NATIVE_DIR / name)
    return path if runs_here(path) else None
