"""The fs traffic of a remote apply_patch, against both servers.

A client applies Add/Update/Delete/Move hunks with getMetadata, readFile,
writeFile, createDirectory and remove; it relies on -32004 for "not found"
to create files in new directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.rpc import b64, check_cases, connect, uri
from tests.support.servers import RunningServer

OK: dict[str, Any] = {"result": {}}
NOENT = {"error": [-32004, "No such file or directory (os error 2)"]}


def content(text: str) -> dict[str, Any]:
    return {"result": {"dataBase64": b64(text)}}


def file_meta(size: int) -> dict[str, Any]:
    return {
        "result": {
            "isDirectory": False,
            "isFile": True,
            "isSymlink": False,
            "size": size,
            "createdAtMs": "<MS>",
            "modifiedAtMs": "<MS>",
        }
    }


@pytest.mark.parametrize("follow", [True, False])
async def test_apply_patch_sequence(
    any_server: RunningServer, tmp_path: Path, follow: bool
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "old.txt").write_text("old\n")
    (tmp_path / "src" / "gone.txt").write_text("bye\n")
    (tmp_path / "src" / "move-me.txt").write_text("move\n")
    d = str(tmp_path)

    def p(rel: str, **extra: Any) -> dict[str, Any]:
        return {"path": uri(f"{d}/{rel}"), "followSymlinks": follow, **extra}

    meta = file_meta if not follow else (lambda size: _created_zero(file_meta(size)))
    cases = [
        # *** Add File: new/dir/added.txt
        ("add: probe", "fs/getMetadata", p("new/dir/added.txt"), NOENT),
        ("add: previous content", "fs/readFile", p("new/dir/added.txt"), NOENT),
        (
            "add: write, parent missing",
            "fs/writeFile",
            p("new/dir/added.txt", dataBase64=b64("added\n")),
            NOENT,
        ),
        ("add: create parents", "fs/createDirectory", p("new/dir", recursive=True), OK),
        ("add: write again", "fs/writeFile", p("new/dir/added.txt", dataBase64=b64("added\n")), OK),
        # *** Update File: src/old.txt
        ("update: probe", "fs/getMetadata", p("src/old.txt"), meta(4)),
        ("update: read", "fs/readFile", p("src/old.txt"), content("old\n")),
        ("update: write", "fs/writeFile", p("src/old.txt", dataBase64=b64("new\n")), OK),
        # *** Delete File: src/gone.txt
        ("delete: probe", "fs/getMetadata", p("src/gone.txt"), meta(4)),
        ("delete: read", "fs/readFile", p("src/gone.txt"), content("bye\n")),
        ("delete: not a directory", "fs/getMetadata", p("src/gone.txt"), meta(4)),
        ("delete: remove", "fs/remove", p("src/gone.txt", recursive=False, force=False), OK),
        (
            "delete again: missing",
            "fs/remove",
            p("src/gone.txt", recursive=False, force=False),
            NOENT,
        ),
        # *** Update File: src/move-me.txt / *** Move to: moved/here.txt
        ("move: probe source", "fs/getMetadata", p("src/move-me.txt"), meta(5)),
        ("move: read source", "fs/readFile", p("src/move-me.txt"), content("move\n")),
        ("move: probe destination", "fs/getMetadata", p("moved/here.txt"), NOENT),
        ("move: old destination", "fs/readFile", p("moved/here.txt"), NOENT),
        (
            "move: write destination",
            "fs/writeFile",
            p("moved/here.txt", dataBase64=b64("moved\n")),
            NOENT,
        ),
        ("move: create parents", "fs/createDirectory", p("moved", recursive=True), OK),
        (
            "move: write destination again",
            "fs/writeFile",
            p("moved/here.txt", dataBase64=b64("moved\n")),
            OK,
        ),
        ("move: source not a directory", "fs/getMetadata", p("src/move-me.txt"), meta(5)),
        (
            "move: remove source",
            "fs/remove",
            p("src/move-me.txt", recursive=False, force=False),
            OK,
        ),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
    assert (tmp_path / "new" / "dir" / "added.txt").read_text() == "added\n"
    assert (tmp_path / "src" / "old.txt").read_text() == "new\n"
    assert not (tmp_path / "src" / "gone.txt").exists()
    assert not (tmp_path / "src" / "move-me.txt").exists()
    assert (tmp_path / "moved" / "here.txt").read_text() == "moved\n"


def _created_zero(reply: dict[str, Any]) -> dict[str, Any]:
    # the path-based (followSymlinks: true) lookup reports no birth time
    return {"result": {**reply["result"], "createdAtMs": 0}}
