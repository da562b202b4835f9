"""``execserver patch`` passes the patch bytes through untouched.

The corpus cases whose patch text carries CRs (CRLF patches, lone CRs inside
lines, CRs before the End marker) are piped into the real CLI against a real
executor: the exit code, output and resulting tree must equal the reference
record. Reading stdin as text would turn every CR into an LF before parsing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_apply_patch_corpus import ROOT, load, snapshot, write_tree
from tests.support.servers import RunningServer

CASES_DIR = Path(__file__).resolve().parent.parent / "data" / "apply_patch" / "cases"
CR_CASES = [
    p for p in sorted(CASES_DIR.glob("*.json")) if "\r" in json.loads(p.read_text())["patch"]
]


def test_there_are_patches_with_lone_crs() -> None:
    patches = [json.loads(p.read_text())["patch"] for p in CR_CASES]
    assert any("\r" in patch.replace("\r\n", "") for patch in patches)


@pytest.mark.parametrize("case_path", CR_CASES, ids=[p.stem for p in CR_CASES])
async def test_cli_applies_patches_with_crs_like_the_reference(
    execserver: RunningServer, case_path: Path, tmp_path: Path
) -> None:
    case: dict[str, Any] = load(case_path)
    ref = case["reference"]
    root = (tmp_path / "work").resolve()
    root.mkdir()
    write_tree(root, case["files"], case["dirs"])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "execserver",
        "patch",
        execserver.url,
        "--cwd",
        str(root),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(case["patch"].replace(ROOT, str(root)).encode())
    assert proc.returncode == ref["exit_code"]
    assert out.decode().replace(str(root), ROOT) == ref["stdout"]
    assert err.decode().replace(str(root), ROOT) == ref["stderr"]
    assert snapshot(root) == (ref["files"], ref["dirs"])
