"""The recorded corpus still describes the reference binary.

Each case is run again through the reference ``apply_patch`` (codex 0.169.0,
arg0 entry point) exactly as ``record.py`` records it, and must give the
recorded exit code, output and tree - so a hand-edited or stale record cannot
silently become the thing our engine is compared with.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.servers import reference_binary

DATA = Path(__file__).resolve().parent.parent / "data" / "apply_patch"
CASES = sorted((DATA / "cases").glob("*.json"))


def _load_recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("apply_patch_record", DATA / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORDER = _load_recorder()
BY_NAME = {case.name: case for case in RECORDER.CASES}


def test_every_defined_case_is_recorded() -> None:
    assert sorted(BY_NAME) == [p.stem for p in CASES]


@pytest.mark.needs_reference
@pytest.mark.parametrize("via_flag", [False, True], ids=["arg0", "flag"])
@pytest.mark.parametrize("case_path", CASES, ids=[p.stem for p in CASES])
def test_record_matches_a_fresh_reference_run(case_path: Path, via_flag: bool) -> None:
    """Both entry points of the reference (``apply_patch`` as arg0 and
    ``codex --codex-run-as-apply-patch``) give the recorded result."""
    recorded: dict[str, Any] = json.loads(case_path.read_text(encoding="utf-8"))
    case = BY_NAME[case_path.stem]
    assert recorded["patch"] == case.patch
    assert recorded["files"] == case.files
    fresh = RECORDER.record(case, reference_binary(), via_flag=via_flag)
    assert fresh == recorded["reference"]
