"""Every whole-path fs/* method, success and failure, against both servers.

Each test builds a real tree in a tmp dir and runs a table of calls on one
connection; the expectations are what the reference 0.169.0 answers (checked
by the same tests running with ``any_server = reference``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.support.rpc import b64, check_cases, connect, unb64, uri
from tests.support.servers import RunningServer

OK: dict[str, Any] = {"result": {}}
NOENT = {"error": [-32004, "No such file or directory (os error 2)"]}
ENOTDIR = {"error": [-32603, "Not a directory (os error 20)"]}
EEXIST = {"error": [-32603, "File exists (os error 17)"]}
EISDIR = {"error": [-32603, "Is a directory (os error 21)"]}
ELOOP = {"error": [-32603, "Symbolic link loop (os error 40)"]}
SYMLINK_REFUSED = {"error": [-32600, "path contains a symbolic link"]}


def err(code: int, message: str) -> dict[str, Any]:
    return {"error": [code, message]}


def meta(kind: str, size: int, *, link: bool = False, created: Any = 0) -> dict[str, Any]:
    return {
        "result": {
            "isDirectory": kind == "dir",
            "isFile": kind == "file",
            "isSymlink": link,
            "size": size,
            "createdAtMs": created,
            "modifiedAtMs": "<MS>",
        }
    }


def tree(root: Path) -> None:
    (root / "dir" / "sub").mkdir(parents=True)
    (root / "dir" / "a.txt").write_text("hello world\n")
    (root / "dir" / "sub" / "b.bin").write_bytes(bytes(range(256)))
    (root / "ldir").symlink_to(root / "dir")
    (root / "la").symlink_to(root / "dir" / "a.txt")
    (root / "dang").symlink_to(root / "nowhere")
    os.mkfifo(root / "fifo")


async def test_read_file(any_server: RunningServer, tmp_path: Path) -> None:
    tree(tmp_path)
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    cases = [
        (
            "plain",
            "fs/readFile",
            {"path": u("dir/a.txt")},
            {"result": {"dataBase64": b64("hello world\n")}},
        ),
        (
            "through symlink",
            "fs/readFile",
            {"path": u("la")},
            {"result": {"dataBase64": b64("hello world\n")}},
        ),
        (
            "dot-dot normalised",
            "fs/readFile",
            {"path": u("dir/sub/../a.txt")},
            {"result": {"dataBase64": b64("hello world\n")}},
        ),
        (
            "localhost host",
            "fs/readFile",
            {"path": f"file://localhost{d}/dir/a.txt"},
            {"result": {"dataBase64": b64("hello world\n")}},
        ),
        (
            "percent-encoded",
            "fs/readFile",
            {"path": u("dir/a%2Etxt")},
            {"result": {"dataBase64": b64("hello world\n")}},
        ),
        ("no-follow on symlink", "fs/readFile", {"path": u("la"), "followSymlinks": False}, ELOOP),
        (
            "no-follow through symlinked dir",
            "fs/readFile",
            {"path": u("ldir/a.txt"), "followSymlinks": False},
            ENOTDIR,
        ),
        (
            "no-follow directory",
            "fs/readFile",
            {"path": u("dir"), "followSymlinks": False},
            err(-32600, "path is not a regular file"),
        ),
        (
            "no-follow fifo",
            "fs/readFile",
            {"path": u("fifo"), "followSymlinks": False},
            err(-32600, "path is not a regular file"),
        ),
        (
            "directory",
            "fs/readFile",
            {"path": u("dir")},
            err(-32600, "path `<D>/dir` is not a file"),
        ),
        ("fifo", "fs/readFile", {"path": u("fifo")}, err(-32600, "path `<D>/fifo` is not a file")),
        ("missing", "fs/readFile", {"path": u("nope")}, NOENT),
        ("missing parent", "fs/readFile", {"path": u("nope/x")}, NOENT),
        ("dangling symlink", "fs/readFile", {"path": u("dang")}, NOENT),
        ("file as parent", "fs/readFile", {"path": u("dir/a.txt/x")}, ENOTDIR),
        (
            "native path",
            "fs/readFile",
            {"path": f"{d}/dir/a.txt"},
            err(-32602, "invalid URI: relative URL without a base"),
        ),
        (
            "other scheme",
            "fs/readFile",
            {"path": "http://x/y"},
            err(-32602, "unsupported path URI scheme `http`"),
        ),
        (
            "query",
            "fs/readFile",
            {"path": u("dir/a.txt?x")},
            err(-32602, "query parameters are not allowed in path URIs"),
        ),
        (
            "fragment",
            "fs/readFile",
            {"path": u("dir/a.txt#x")},
            err(-32602, "fragments are not allowed in path URIs"),
        ),
        (
            "remote host",
            "fs/readFile",
            {"path": "file://host/x"},
            err(-32600, "'file://host/x' is invalid on 'linux'"),
        ),
        ("missing path", "fs/readFile", {}, err(-32602, "missing field `path`")),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)


async def test_write_file(any_server: RunningServer, tmp_path: Path) -> None:
    tree(tmp_path)
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    cases = [
        ("create", "fs/writeFile", {"path": u("new.txt"), "dataBase64": b64("new content")}, OK),
        (
            "truncate and overwrite",
            "fs/writeFile",
            {"path": u("new.txt"), "dataBase64": b64("over")},
            OK,
        ),
        ("empty data", "fs/writeFile", {"path": u("empty.txt"), "dataBase64": ""}, OK),
        ("through symlink", "fs/writeFile", {"path": u("la"), "dataBase64": b64("via link\n")}, OK),
        (
            "missing parent",
            "fs/writeFile",
            {"path": u("nodir/x.txt"), "dataBase64": b64("x")},
            NOENT,
        ),
        ("onto a directory", "fs/writeFile", {"path": u("dir"), "dataBase64": b64("x")}, EISDIR),
        ("file as parent", "fs/writeFile", {"path": u("dir/a.txt/x"), "dataBase64": ""}, ENOTDIR),
        (
            "no-follow onto symlink",
            "fs/writeFile",
            {"path": u("la"), "dataBase64": b64("x"), "followSymlinks": False},
            ELOOP,
        ),
        (
            "no-follow below symlinked dir",
            "fs/writeFile",
            {"path": u("ldir/b.txt"), "dataBase64": "", "followSymlinks": False},
            ENOTDIR,
        ),
        (
            "no-follow plain",
            "fs/writeFile",
            {"path": u("nf.txt"), "dataBase64": b64("nf"), "followSymlinks": False},
            OK,
        ),
        (
            "bad base64 symbol",
            "fs/writeFile",
            {"path": u("bad"), "dataBase64": "!!!"},
            err(
                -32600,
                "fs/writeFile requires valid base64 dataBase64: Invalid symbol 33, offset 0.",
            ),
        ),
        (
            "bad base64 padding",
            "fs/writeFile",
            {"path": u("bad"), "dataBase64": "abc"},
            err(-32600, "fs/writeFile requires valid base64 dataBase64: Invalid padding"),
        ),
        (
            "bad base64 inner pad",
            "fs/writeFile",
            {"path": u("bad"), "dataBase64": "ab=c"},
            err(
                -32600,
                "fs/writeFile requires valid base64 dataBase64: Invalid symbol 61, offset 2.",
            ),
        ),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
    assert (tmp_path / "new.txt").read_text() == "over"
    assert (tmp_path / "empty.txt").read_bytes() == b""
    assert (tmp_path / "dir" / "a.txt").read_text() == "via link\n"
    assert (tmp_path / "la").is_symlink()
    assert (tmp_path / "nf.txt").read_text() == "nf"
    assert not (tmp_path / "bad").exists()


async def test_create_directory(any_server: RunningServer, tmp_path: Path) -> None:
    tree(tmp_path)
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    cases = [
        ("recursive omitted", "fs/createDirectory", {"path": u("c1")}, OK),
        ("nested, recursive omitted", "fs/createDirectory", {"path": u("c2/x/y")}, OK),
        ("recursive null", "fs/createDirectory", {"path": u("c3/x"), "recursive": None}, OK),
        (
            "nested, recursive false",
            "fs/createDirectory",
            {"path": u("c4/x/y"), "recursive": False},
            NOENT,
        ),
        (
            "existing, recursive false",
            "fs/createDirectory",
            {"path": u("c1"), "recursive": False},
            EEXIST,
        ),
        (
            "existing, recursive true",
            "fs/createDirectory",
            {"path": u("c1"), "recursive": True},
            OK,
        ),
        (
            "file there, recursive",
            "fs/createDirectory",
            {"path": u("dir/a.txt"), "recursive": True},
            EEXIST,
        ),
        ("file as parent", "fs/createDirectory", {"path": u("dir/a.txt/x")}, ENOTDIR),
        (
            "file as parent, recursive false",
            "fs/createDirectory",
            {"path": u("dir/a.txt/x"), "recursive": False},
            ENOTDIR,
        ),
        ("through dir symlink", "fs/createDirectory", {"path": u("ldir/viaLink")}, OK),
        ("existing dir symlink", "fs/createDirectory", {"path": u("ldir")}, OK),
        (
            "root, recursive false",
            "fs/createDirectory",
            {"path": "file:///", "recursive": False},
            EEXIST,
        ),
        (
            "no-follow below symlink",
            "fs/createDirectory",
            {"path": u("ldir/newd"), "followSymlinks": False},
            ENOTDIR,
        ),
        (
            "no-follow on dir symlink",
            "fs/createDirectory",
            {"path": u("ldir"), "followSymlinks": False},
            ENOTDIR,
        ),
        (
            "no-follow on file symlink",
            "fs/createDirectory",
            {"path": u("la"), "followSymlinks": False},
            ENOTDIR,
        ),
        (
            "no-follow nested",
            "fs/createDirectory",
            {"path": u("n1/x/y"), "followSymlinks": False},
            OK,
        ),
        (
            "no-follow existing, recursive false",
            "fs/createDirectory",
            {"path": u("n1"), "recursive": False, "followSymlinks": False},
            EEXIST,
        ),
        (
            "no-follow missing parent, recursive false",
            "fs/createDirectory",
            {"path": u("n2/a"), "recursive": False, "followSymlinks": False},
            NOENT,
        ),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
    assert (tmp_path / "c2" / "x" / "y").is_dir()
    assert (tmp_path / "dir" / "viaLink").is_dir()
    assert (tmp_path / "n1" / "x" / "y").is_dir()


async def test_get_metadata(any_server: RunningServer, tmp_path: Path) -> None:
    tree(tmp_path)
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    cases = [
        # createdAtMs is 0 on the path-based lookup, the birth time on the no-follow one.
        ("file", "fs/getMetadata", {"path": u("dir/a.txt")}, meta("file", 12)),
        ("file symlink", "fs/getMetadata", {"path": u("la")}, meta("file", 12, link=True)),
        ("dir symlink", "fs/getMetadata", {"path": u("ldir")}, meta("dir", 4096, link=True)),
        ("fifo", "fs/getMetadata", {"path": u("fifo")}, meta("other", 0)),
        (
            "no-follow file",
            "fs/getMetadata",
            {"path": u("dir/a.txt"), "followSymlinks": False},
            meta("file", 12, created="<MS>"),
        ),
        (
            "no-follow dir",
            "fs/getMetadata",
            {"path": u("dir"), "followSymlinks": False},
            meta("dir", 4096, created="<MS>"),
        ),
        (
            "no-follow symlink",
            "fs/getMetadata",
            {"path": u("la"), "followSymlinks": False},
            SYMLINK_REFUSED,
        ),
        (
            "no-follow dangling",
            "fs/getMetadata",
            {"path": u("dang"), "followSymlinks": False},
            SYMLINK_REFUSED,
        ),
        (
            "no-follow below symlink",
            "fs/getMetadata",
            {"path": u("ldir/a.txt"), "followSymlinks": False},
            ENOTDIR,
        ),
        (
            "no-follow missing",
            "fs/getMetadata",
            {"path": u("nope"), "followSymlinks": False},
            NOENT,
        ),
        ("dangling", "fs/getMetadata", {"path": u("dang")}, NOENT),
        ("missing", "fs/getMetadata", {"path": u("nope")}, NOENT),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)


async def test_canonicalize_and_read_directory(any_server: RunningServer, tmp_path: Path) -> None:
    tree(tmp_path)
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    cases = [
        (
            "through symlinks",
            "fs/canonicalize",
            {"path": u("ldir/sub/../a.txt")},
            {"result": {"path": u("dir/a.txt").replace(d, "<D>")}},
        ),
        ("root", "fs/canonicalize", {"path": "file:///"}, {"result": {"path": "file:///"}}),
        ("missing leaf", "fs/canonicalize", {"path": u("nope")}, NOENT),
        ("missing parent", "fs/canonicalize", {"path": u("nope/x")}, NOENT),
        ("dangling", "fs/canonicalize", {"path": u("dang")}, NOENT),
        ("not a directory", "fs/readDirectory", {"path": u("dir/a.txt")}, ENOTDIR),
        ("missing directory", "fs/readDirectory", {"path": u("nope")}, NOENT),
        ("sandbox null", "fs/readDirectory", {"path": u("nope"), "sandbox": None}, NOENT),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
        listing = await client.ok("fs/readDirectory", {"path": uri(d)})
        via_link = await client.ok("fs/readDirectory", {"path": u("ldir")})
    # OS order: compare as sets. Dangling symlinks are left out; links typed by target.
    entries = {(e["fileName"], e["isDirectory"], e["isFile"]) for e in listing["entries"]}
    assert entries == {
        ("dir", True, False),
        ("ldir", True, False),
        ("la", False, True),
        ("fifo", False, False),
    }
    names = sorted(e["fileName"] for e in via_link["entries"])
    assert names == ["a.txt", "sub"]


async def test_remove(any_server: RunningServer, tmp_path: Path) -> None:
    tree(tmp_path)
    (tmp_path / "full" / "x").mkdir(parents=True)
    (tmp_path / "full" / "x" / "f").write_text("f")
    (tmp_path / "full2" / "y").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "f1").write_text("1")
    (tmp_path / "f2").write_text("2")
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    cases = [
        (
            "non-empty dir, recursive false",
            "fs/remove",
            {"path": u("full"), "recursive": False},
            err(-32603, "Directory not empty (os error 39)"),
        ),
        ("non-empty dir, recursive omitted", "fs/remove", {"path": u("full")}, OK),
        (
            "non-empty dir, recursive null",
            "fs/remove",
            {"path": u("full2"), "force": False, "recursive": None},
            OK,
        ),
        ("empty dir, recursive false", "fs/remove", {"path": u("empty"), "recursive": False}, OK),
        ("missing, force omitted", "fs/remove", {"path": u("gone")}, OK),
        ("missing, force false", "fs/remove", {"path": u("gone"), "force": False}, NOENT),
        ("missing parent, force false", "fs/remove", {"path": u("gone/x"), "force": False}, NOENT),
        ("file as parent, force true", "fs/remove", {"path": u("f1/x"), "force": True}, ENOTDIR),
        (
            "dangling symlink, force false",
            "fs/remove",
            {"path": u("dang"), "recursive": False, "force": False},
            OK,
        ),
        (
            "dir symlink removes the link only",
            "fs/remove",
            {"path": u("ldir"), "recursive": True},
            OK,
        ),
        ("fifo", "fs/remove", {"path": u("fifo"), "recursive": False}, OK),
        (
            "no-follow with recursive omitted",
            "fs/remove",
            {"path": u("f1"), "followSymlinks": False},
            err(-32603, "recursive no-follow removal is unsupported"),
        ),
        (
            "no-follow recursive, missing path",
            "fs/remove",
            {"path": u("gone"), "followSymlinks": False, "recursive": True},
            err(-32603, "recursive no-follow removal is unsupported"),
        ),
        (
            "no-follow missing, force false",
            "fs/remove",
            {"path": u("gone"), "followSymlinks": False, "recursive": False, "force": False},
            NOENT,
        ),
        (
            "no-follow missing",
            "fs/remove",
            {"path": u("gone"), "followSymlinks": False, "recursive": False},
            OK,
        ),
        (
            "no-follow symlink",
            "fs/remove",
            {"path": u("la"), "followSymlinks": False, "recursive": False},
            SYMLINK_REFUSED,
        ),
        (
            "no-follow file",
            "fs/remove",
            {"path": u("f1"), "followSymlinks": False, "recursive": False},
            OK,
        ),
        (
            "no-follow empty dir",
            "fs/remove",
            {"path": u("dir/sub2"), "followSymlinks": False, "recursive": False},
            OK,
        ),
        (
            "no-follow non-empty dir",
            "fs/remove",
            {"path": u("dir"), "followSymlinks": False, "recursive": False},
            err(-32603, "Directory not empty (os error 39)"),
        ),
    ]
    (tmp_path / "dir" / "sub2").mkdir()
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
    assert sorted(os.listdir(tmp_path)) == ["dir", "f2", "la"]
    assert (tmp_path / "dir" / "a.txt").exists()


async def test_copy(any_server: RunningServer, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a").write_text("A")
    (src / "sub" / "b").write_text("B")
    (src / "a").chmod(0o751)
    (src / "rel-link").symlink_to("a")
    os.mkfifo(src / "fifo")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "a").write_text("old-longer")
    (tmp_path / "lsrc").symlink_to(src)
    (tmp_path / "f").write_text("F")
    (tmp_path / "g").write_text("G")
    d = str(tmp_path)

    def u(p: str) -> str:
        return uri(f"{d}/{p}")

    def cp(s: str, t: str, recursive: bool) -> dict[str, Any]:
        return {"sourcePath": u(s), "destinationPath": u(t), "recursive": recursive}

    cases = [
        ("tree merges into an existing dir, fifo skipped", "fs/copy", cp("src", "dst", True), OK),
        ("again: links already exist", "fs/copy", cp("src", "dst", True), EEXIST),
        ("file with recursive", "fs/copy", cp("src/a", "d2", True), OK),
        (
            "dir without recursive",
            "fs/copy",
            cp("src", "d5", False),
            err(-32600, "fs/copy requires recursive: true when sourcePath is a directory"),
        ),
        ("symlink source copied as link", "fs/copy", cp("lsrc", "d3", False), OK),
        ("link onto existing", "fs/copy", cp("lsrc", "d3", False), EEXIST),
        ("file into directory", "fs/copy", cp("f", "d3", False), EISDIR),
        (
            "into itself",
            "fs/copy",
            cp("src", "src", True),
            err(-32600, "fs/copy cannot copy a directory to itself or one of its descendants"),
        ),
        (
            "into descendant via link",
            "fs/copy",
            cp("src", "lsrc/zz", True),
            err(-32600, "fs/copy cannot copy a directory to itself or one of its descendants"),
        ),
        ("file to missing parent", "fs/copy", cp("f", "nod/x", False), NOENT),
        ("dir to missing parents", "fs/copy", cp("src", "nod2/x", True), OK),
        ("dir onto a file", "fs/copy", cp("src", "f", True), EEXIST),
        ("missing source", "fs/copy", cp("nope", "f2", True), NOENT),
        (
            "device source",
            "fs/copy",
            {"sourcePath": "file:///dev/null", "destinationPath": u("f2"), "recursive": False},
            err(-32600, "fs/copy only supports regular files, directories, and symlinks"),
        ),
        ("file over file", "fs/copy", cp("g", "f", False), OK),
        (
            "recursive is required",
            "fs/copy",
            {"sourcePath": u("f"), "destinationPath": u("f3")},
            err(-32602, "missing field `recursive`"),
        ),
    ]
    async with connect(any_server.url) as client:
        await check_cases(client, d, cases)
    dst = tmp_path / "dst"
    assert sorted(os.listdir(dst)) == ["a", "rel-link", "sub"]
    assert (dst / "a").read_text() == "A"
    assert oct((dst / "a").stat().st_mode & 0o777) == oct(0o751)
    assert os.readlink(dst / "rel-link") == "a"
    assert (dst / "sub" / "b").read_text() == "B"
    assert os.readlink(tmp_path / "d3") == str(src)
    assert (tmp_path / "nod2" / "x" / "sub" / "b").read_text() == "B"
    assert (tmp_path / "f").read_text() == "G"


async def test_copy_file_onto_itself_truncates(any_server: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("content")
    params = {
        "sourcePath": uri(tmp_path / "f"),
        "destinationPath": uri(tmp_path / "f"),
        "recursive": False,
    }
    async with connect(any_server.url) as client:
        assert await client.ok("fs/copy", params) == {}
    assert (tmp_path / "f").read_bytes() == b""


async def test_large_write_and_read_file_round_trip(
    any_server: RunningServer, tmp_path: Path
) -> None:
    data = os.urandom(3 * 1024 * 1024)
    async with connect(any_server.url) as client:
        await client.ok("fs/writeFile", {"path": uri(tmp_path / "big"), "dataBase64": b64(data)})
        result = await client.ok("fs/readFile", {"path": uri(tmp_path / "big")})
    assert (tmp_path / "big").read_bytes() == data
    assert unb64(result["dataBase64"]) == data


async def test_changes_are_audited(tmp_path: Path) -> None:
    import asyncio
    import json

    from tests.support.servers import start_server

    log = tmp_path / "audit.jsonl"
    work = tmp_path / "work"
    work.mkdir()
    async with (
        start_server("execserver", ["--audit-log", str(log)]) as running,
        connect(running.url) as client,
    ):
        # Contents that cannot turn up in a record by chance (a session id is hex).
        await client.ok("fs/writeFile", {"path": uri(work / "a"), "dataBase64": b64("SECRET")})
        await client.ok("fs/createDirectory", {"path": uri(work / "d")})
        await client.ok(
            "fs/copy",
            {"sourcePath": uri(work / "a"), "destinationPath": uri(work / "b"), "recursive": False},
        )
        await client.ok("fs/remove", {"path": uri(work / "b")})
        await client.err("fs/remove", {"path": uri(work / "gone"), "force": False})
        events: list[dict[str, Any]] = []
        for _ in range(100):  # the audit log is written by a background writer
            text = log.read_text() if log.exists() else ""
            events = [json.loads(line) for line in text.splitlines()]
            if sum(e["event"].startswith("fs.") for e in events) >= 4:
                break
            await asyncio.sleep(0.05)
    fs_events = [(e["event"], e["path"]) for e in events if e["event"].startswith("fs.")]
    assert fs_events == [
        ("fs.write", str(work / "a")),
        ("fs.mkdir", str(work / "d")),
        ("fs.copy", str(work / "b")),
        ("fs.remove", str(work / "b")),
    ]
    write = next(e for e in events if e["event"] == "fs.write")
    assert write["bytes"] == 6
    assert "SECRET" not in log.read_text()  # sizes, never contents
