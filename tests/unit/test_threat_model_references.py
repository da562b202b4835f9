"""Every test THREAT_MODEL.md names exists: a claim whose test was renamed or
removed would otherwise go on naming evidence that is no longer there.

A reference is a backticked ``tests/....py`` path, optionally followed by
``::test_name``; a bare ```::test_name``` names a test of the last file named
before it (the document lists several tests of one file that way).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)?(?:::(test_\w+))?[^`]*`")


def references(text: str) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    current: str | None = None
    for match in REFERENCE.finditer(text):
        path, test = match.groups()
        if path is not None:
            current = path
        if current is not None and (path is not None or test is not None):
            found.append((current, test))
    return found


def missing_references(text: str) -> list[str]:
    missing = []
    for path, test in references(text):
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
        elif test is not None and not re.search(
            rf"^\s*(async )?def {test}\b", source.read_text(), re.MULTILINE
        ):
            missing.append(f"{path}::{test}")
    return missing


def test_every_test_the_threat_model_names_exists() -> None:
    text = (ROOT / "THREAT_MODEL.md").read_text()
    assert len(references(text)) > 20  # the document does name its tests
    assert missing_references(text) == []


def test_a_renamed_test_or_a_removed_file_is_reported() -> None:
    here = "tests/unit/test_threat_model_references.py"
    text = (
        f"`{here}::test_every_test_the_threat_model_names_exists`, "
        "`::test_no_such_test_here`; `tests/unit/no_such_file.py`"
    )
    assert missing_references(text) == [
        f"{here}::test_no_such_test_here",
        "tests/unit/no_such_file.py",
    ]
