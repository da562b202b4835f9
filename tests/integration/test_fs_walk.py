"""fs/walk: breadth-first order, limits and truncation, symlinks, hidden dirs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.rpc import connect, uri
from tests.support.servers import RunningServer

OPTIONS = {
    "maxDepth": 10,
    "maxDirectories": 100,
    "maxEntries": 100,
    "followDirectorySymlinks": False,
}
FULL = [
    ".h/", ".hf", "a/", "b/", "c/", "f1",
    ".h/x/", "a/a1/", "a/a2/", "a/fa", "b/fb", "c/c1/",
    ".h/x/hf", "c/c1/c2/", "c/c1/c2/deep",
]  # fmt: skip


def build(root: Path) -> None:
    for sub in ["w/a/a1", "w/a/a2", "w/b", "w/.h/x", "w/c/c1/c2", "out/o1"]:
        (root / sub).mkdir(parents=True)
    for f in ["w/f1", "w/a/fa", "w/.h/x/hf", "w/c/c1/c2/deep", "w/.hf", "w/b/fb", "out/of"]:
        (root / f).write_text("x")
    (root / "w" / "la").symlink_to(root / "w" / "a")
    (root / "w" / "lf").symlink_to(root / "w" / "f1")
    (root / "w" / "dang").symlink_to(root / "nowhere")
    os.mkfifo(root / "w" / "fifo")


def listing(result: dict[str, Any], root: Path) -> list[str]:
    prefix = uri(root / "w") + "/"
    out = []
    for entry in result["entries"]:
        assert entry["path"].startswith(prefix), entry
        out.append(entry["path"][len(prefix) :] + ("/" if entry["kind"] == "directory" else ""))
    return out


async def walk(client: Any, root: Path, path: str = "w", **options: Any) -> dict[str, Any]:
    params = {"path": uri(root / path), "options": {**OPTIONS, **options}}
    result: dict[str, Any] = await client.ok("fs/walk", params)
    return result


TOO_BIG = (
    -32600,
    "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000",
)

# (options, number of leading FULL entries listed, truncated)
LIMIT_CASES = [
    ({}, 15, False),
    ({"maxEntries": 6}, 6, True),
    # the root's fifo and two symlinks are examined (and count) but not listed;
    # the dangling symlink neither lists nor counts
    ({"maxEntries": 9}, 6, True),
    ({"maxEntries": 10}, 7, True),
    ({"maxEntries": 17}, 14, True),
    ({"maxEntries": 18}, 15, False),  # ends exactly at the limit: complete
    ({"maxDirectories": 1}, 6, True),
    ({"maxDirectories": 2}, 7, True),
    ({"maxDirectories": 3}, 10, True),
    ({"maxDirectories": 9}, 14, True),
    ({"maxDirectories": 10}, 15, False),
    ({"maxDepth": 0}, 6, False),  # depth never sets truncated
    ({"maxDepth": 1}, 12, False),
    ({"maxDepth": 2}, 14, False),
    ({"maxDepth": 64, "maxDirectories": 10000, "maxEntries": 50000}, 15, False),
]


@pytest.mark.parametrize(("options", "count", "truncated"), LIMIT_CASES)
async def test_limits(
    any_server: RunningServer, tmp_path: Path, options: dict[str, Any], count: int, truncated: bool
) -> None:
    build(tmp_path)
    async with connect(any_server.url) as client:
        result = await walk(client, tmp_path, **options)
    assert listing(result, tmp_path) == FULL[:count]
    assert result["truncated"] is truncated
    assert result["errors"] == []


async def test_symlinks_hidden_and_roots(any_server: RunningServer, tmp_path: Path) -> None:
    build(tmp_path)
    async with connect(any_server.url) as client:
        pruned = await walk(client, tmp_path, pruneHiddenDirectories=True)
        followed = await walk(client, tmp_path, followDirectorySymlinks=True)
        (tmp_path / "w" / "b" / "lout").symlink_to(tmp_path / "out")
        (tmp_path / "w" / "c" / "loop").symlink_to(tmp_path / "w")
        looped = await walk(client, tmp_path, followDirectorySymlinks=True)
        link_root = await walk(client, tmp_path, "w/la")
        file_root = await walk(client, tmp_path, "w/f1")
        fifo_root = await walk(client, tmp_path, "w/fifo")
        missing = await client.err("fs/walk", {"path": uri(tmp_path / "nope"), "options": OPTIONS})
        dangling = await client.err(
            "fs/walk", {"path": uri(tmp_path / "w/dang"), "options": OPTIONS}
        )
        below_file = await client.err(
            "fs/walk", {"path": uri(tmp_path / "w/f1/x"), "options": OPTIONS}
        )
    # hidden directories are listed but not descended into
    assert listing(pruned, tmp_path) == [e for e in FULL if e == ".h/" or not e.startswith(".h/")]
    # a link to an already-queued directory is listed, not walked twice
    assert listing(followed, tmp_path) == [*FULL[:6], "la/", *FULL[6:]]
    assert listing(looped, tmp_path) == [
        *FULL[:6], "la/", *FULL[6:11], "b/lout/", "c/c1/", "c/loop/",
        ".h/x/hf", "b/lout/o1/", "b/lout/of", "c/c1/c2/", "c/c1/c2/deep",
    ]  # fmt: skip
    empty = {"entries": [], "errors": [], "truncated": False}
    assert link_root == file_root == fifo_root == empty
    assert missing == dangling == (-32004, "No such file or directory (os error 2)")
    assert below_file == (-32603, "Not a directory (os error 20)")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"maxEntries": 0}, (-32600, "filesystem walk limits must be greater than zero")),
        ({"maxDirectories": 0}, (-32600, "filesystem walk limits must be greater than zero")),
        (
            {"maxDepth": 0, "maxEntries": 0, "maxDirectories": 100000},
            (-32600, "filesystem walk limits must be greater than zero"),
        ),
        (
            {"maxDepth": 65},
            TOO_BIG,
        ),
        (
            {"maxDirectories": 10001},
            TOO_BIG,
        ),
        (
            {"maxEntries": 50001},
            TOO_BIG,
        ),
        ({"maxDepth": -1}, (-32602, "invalid number")),
        ({"maxEntries": 1.5}, (-32602, "invalid number")),
    ],
)
async def test_limit_errors(
    any_server: RunningServer, tmp_path: Path, options: dict[str, Any], expected: tuple[int, str]
) -> None:
    params = {"path": uri(tmp_path), "options": {**OPTIONS, **options}}
    async with connect(any_server.url) as client:
        assert await client.err("fs/walk", params) == expected


async def test_names_that_need_encoding(any_server: RunningServer, tmp_path: Path) -> None:
    n = tmp_path / "n"
    n.mkdir()
    (n / "é sp%.txt").write_text("y")
    # a name that is not UTF-8
    (n / os.fsdecode(b"bad\xff.txt")).write_text("x")
    async with connect(any_server.url) as client:
        listing = await client.ok("fs/readDirectory", {"path": uri(n)})
        result = await client.ok("fs/walk", {"path": uri(n), "options": {**OPTIONS, "maxDepth": 1}})
        read = await client.ok("fs/readFile", {"path": uri(n) + "/bad%FF.txt"})
    assert sorted(e["fileName"] for e in listing["entries"]) == ["bad\ufffd.txt", "é sp%.txt"]
    assert result["entries"] == [{"path": uri(n) + "/%C3%A9%20sp%25.txt", "kind": "file"}]
    # the reference looks the lossily decoded name up, which fails
    assert result["errors"] == [
        {"path": uri(n) + "/bad%EF%BF%BD.txt", "message": "No such file or directory (os error 2)"}
    ]
    assert read == {"dataBase64": "eA=="}
