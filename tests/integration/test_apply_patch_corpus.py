"""The patch engine over a real executor's fs/* against the reference's record.

Every case of ``tests/data/apply_patch/cases`` (recorded from the reference
``apply_patch`` by ``record.py``) is applied through ``RemoteFileSystem`` to a
fresh directory, on our execserver and on the reference exec-server: exit
code, stdout, stderr and the resulting tree must equal the record, and
replaying the returned delta on the input tree must give that same tree -
also for runs that fail half-way.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from execserver.client import ExecServerClient
from execserver.client.blocking_rpc import BlockingRpcSession, run_blocking
from execserver.core.apply_patch.blocking_fs import BlockingFileSystem
from execserver.core.apply_patch.delta import (
    AddChange,
    AppliedPatchDelta,
    DeleteChange,
    UpdateChange,
)
from execserver.core.apply_patch.engine import PatchOutcome, apply_patch
from execserver.core.apply_patch.fs import PatchFileSystem
from tests.support.servers import start_server

CASES_DIR = Path(__file__).resolve().parent.parent / "data" / "apply_patch" / "cases"
CASES = sorted(CASES_DIR.glob("*.json"))
ROOT = "<ROOT>"


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def write_tree(root: Path, files: dict[str, str], dirs: list[str]) -> None:
    for d in dirs:
        (root / d).mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content.encode("utf-8"))


def snapshot(root: Path) -> tuple[dict[str, str], list[str]]:
    files: dict[str, str] = {}
    dirs: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirs.extend(os.path.normpath(os.path.join(rel_dir, n)) for n in dirnames)
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            files[rel] = (Path(dirpath) / name).read_bytes().decode("utf-8")
    return files, sorted(dirs)


def replay(files: dict[str, str], delta: AppliedPatchDelta, root: Path) -> dict[str, str]:
    """The tree the delta describes, starting from ``files``."""
    out = dict(files)

    def rel(path: str) -> str:
        return os.path.relpath(path, root)

    for item in delta.changes:
        change = item.change
        if isinstance(change, AddChange):
            out[rel(item.path)] = change.content
        elif isinstance(change, DeleteChange):
            assert out.pop(rel(item.path)) == change.content
        else:
            assert isinstance(change, UpdateChange)
            assert out[rel(item.path)] == change.old_content
            if change.move_path is not None:
                # The destination is written first, then the source removed.
                out[rel(change.move_path)] = change.new_content
                del out[rel(item.path)]
            else:
                out[rel(item.path)] = change.new_content
    return out


@pytest_asyncio.fixture(
    scope="module",
    loop_scope="module",
    params=["execserver", "reference", "execserver-blocking"],
)
async def fs(request: pytest.FixtureRequest) -> AsyncIterator[PatchFileSystem]:
    """The async client's ``RemoteFileSystem`` on each server, and the one-shot
    command's ``BlockingFileSystem`` on execserver."""
    kind = request.param.removesuffix("-blocking")
    async with start_server(kind) as server:
        if request.param.endswith("-blocking"):
            with BlockingRpcSession.connect(server.url) as session:
                yield BlockingFileSystem(session, None)
        else:
            async with await ExecServerClient.connect(server.url) as c:
                yield c.fs


async def _apply(patch: str, fs: PatchFileSystem, root: Path) -> PatchOutcome:
    if isinstance(fs, BlockingFileSystem):
        # Its calls block, so the engine runs to its end without the event loop.
        return run_blocking(apply_patch(patch, fs, str(root)))
    return await apply_patch(patch, fs, str(root))


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("case_path", CASES, ids=[p.stem for p in CASES])
async def test_corpus_case_matches_reference(
    fs: PatchFileSystem, case_path: Path, tmp_path: Path
) -> None:
    case = load(case_path)
    ref = case["reference"]
    root = (tmp_path / "work").resolve()
    root.mkdir()
    write_tree(root, case["files"], case["dirs"])

    outcome = await _apply(case["patch"].replace(ROOT, str(root)), fs, root)

    assert outcome.exit_code == ref["exit_code"]
    assert outcome.stdout.replace(str(root), ROOT) == ref["stdout"]
    assert outcome.stderr.replace(str(root), ROOT) == ref["stderr"]
    files, dirs = snapshot(root)
    assert files == ref["files"]
    assert dirs == ref["dirs"]
    assert replay(case["files"], outcome.delta, root) == ref["files"]
    # A failed write may have truncated the file: the delta says it is inexact.
    assert outcome.delta.exact == ("Failed to write file" not in ref["stderr"])


def test_corpus_has_at_least_forty_cases_of_each_outcome_kind() -> None:
    outcomes = [load(p)["reference"]["exit_code"] for p in CASES]
    assert len(outcomes) >= 40
    assert outcomes.count(0) >= 20 and outcomes.count(1) >= 20
