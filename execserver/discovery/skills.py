"""capabilityRoots/discoverV1: find ``SKILL.md`` files below a capability root.

Observed on 0.169.0: every file named exactly ``SKILL.md`` anywhere below the
root (hidden directories and directory symlinks included) is a skill, listed
in path order with its contents; ``metadata`` is null; a missing root or a
non-directory root is reported in the root's ``error``. Plain blocking
JSON-in/JSON-out function, so it can run inside the sandbox helper.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from execserver.wire.rust.io_error import os_error_text
from execserver.wire.uri import path_to_uri

__all__ = ["scan_root"]

SKILL_FILE = "SKILL.md"
MAX_DEPTH = 8  # bounds link cycles and huge trees; deeper skills are not looked for


def _skill_files(root: str) -> list[str]:
    found: list[str] = []
    visited: set[tuple[int, int]] = set()

    def visit(directory: str, depth: int) -> None:
        try:
            st = os.stat(directory)
        except OSError:
            return
        key = (st.st_dev, st.st_ino)
        if key in visited or depth > MAX_DEPTH:
            return
        visited.add(key)
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            return
        for entry in entries:
            try:
                is_dir = entry.is_dir()
                is_file = entry.is_file()
            except OSError:
                continue
            if is_file and entry.name == SKILL_FILE:
                found.append(entry.path)
            elif is_dir:
                visit(entry.path, depth + 1)

    visit(root, 0)
    return sorted(found, key=os.fsencode)


def scan_root(path: str) -> dict[str, Any]:
    """``{"skills": [...], "error": str | None}`` for one capability root."""
    uri = path_to_uri(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        message = f"failed to inspect capability root {uri}: {os_error_text(exc.errno or 0)}"
        return {"skills": [], "error": message}
    if not stat.S_ISDIR(st.st_mode):
        return {"skills": [], "error": f"capability root {uri} is not a directory"}
    skills = []
    for file in _skill_files(path):
        try:
            with open(file, encoding="utf-8", errors="replace") as stream:
                contents = stream.read()
        except OSError:
            continue
        skills.append(
            {"instructions": {"path": path_to_uri(file), "contents": contents}, "metadata": None}
        )
    return {"skills": skills, "error": None}
