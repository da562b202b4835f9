"""docs/core-guarantees.md and the ``test_invariant_N_...`` tests name each other:
every number a test uses is a guarantee there, every file the page names exists,
and every file with a test of guarantee N is named under N."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "core-guarantees.md"
TEST_NAME = re.compile(r"def test_invariant_((?:\d+_)+)")


def _guarantees() -> dict[int, set[str]]:
    """Guarantee number -> the test files its entry names."""
    entries: dict[int, set[str]] = {}
    for match in re.finditer(
        r"^ *(\d+)\. \*\*(.*?)(?=^ *\d+\. \*\*|^## |\Z)", DOC.read_text(), re.M | re.S
    ):
        entries[int(match.group(1))] = set(re.findall(r"`(tests/[^`]+\.py)`", match.group(2)))
    return entries


def _tested() -> dict[int, set[str]]:
    """Guarantee number -> the files that hold a test named after it."""
    tested: dict[int, set[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for numbers in TEST_NAME.findall(path.read_text()):
            for number in numbers.strip("_").split("_"):
                tested.setdefault(int(number), set()).add(str(path.relative_to(ROOT)))
    return tested


def test_the_page_numbers_every_guarantee_once_in_order() -> None:
    assert list(_guarantees()) == list(range(1, 16))


def test_every_named_test_file_exists() -> None:
    for number, files in _guarantees().items():
        assert files, f"guarantee {number} names no tests"
        for name in files:
            assert (ROOT / name).is_file(), f"guarantee {number}: {name} does not exist"


def test_every_guarantee_test_is_listed_under_its_number() -> None:
    guarantees = _guarantees()
    tested = _tested()
    assert set(tested) <= set(guarantees)
    for number, files in tested.items():
        assert files <= guarantees[number], (number, files - guarantees[number])
