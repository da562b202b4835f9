"""Symlinks through ``fs.upload`` / ``fs.download``, both ways: a link into the
tree, one to a file outside it, one to a directory outside it and a dangling
one each arrive as a link with the same target text; what an outside link
points to is never copied, and nothing is written through a link."""

from __future__ import annotations

import os
from pathlib import Path

from execserver.client import ExecServerClient
from tests.support.servers import RunningServer

LINKS = {
    "in-tree": "data/file",
    "out-file": "../../secret",
    "out-dir-absolute": "",  # filled in with an absolute outside directory
    "dangling": "/no/such/target",
    "data/up": "..",
}


def make_tree(root: Path, outside: Path) -> dict[str, str]:
    (root / "data").mkdir(parents=True)
    (root / "data" / "file").write_text("inside\n")
    links = {**LINKS, "out-dir-absolute": str(outside)}
    for rel, target in links.items():
        (root / rel).symlink_to(target)
    return links


def regular_files(root: Path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(top, name), root)
        for top, _, files in os.walk(root)
        for name in files
        if not os.path.islink(os.path.join(top, name))
    )


async def test_links_travel_as_links_both_ways(any_server: RunningServer, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private").write_text("never copied\n")
    (tmp_path / "secret").write_text("never copied either\n")
    source, remote, back = tmp_path / "src", tmp_path / "remote", tmp_path / "back"
    links = make_tree(source, outside)

    async with await ExecServerClient.connect(any_server.url) as client:
        sent = await client.fs.upload(source, str(remote))
        got = await client.fs.download(str(remote), back)

    assert (sent.files, sent.symlinks) == (1, len(links))
    assert (got.files, got.symlinks) == (1, len(links))
    for tree in (remote, back):
        for rel, target in links.items():
            assert (tree / rel).is_symlink(), (tree, rel)
            assert os.readlink(tree / rel) == target, (tree, rel)
        # Only the one regular file came: no link was followed on either side.
        assert regular_files(tree) == ["data/file"]
    assert sorted(os.listdir(outside)) == ["private"]
    assert (outside / "private").read_text() == "never copied\n"
    assert (tmp_path / "secret").read_text() == "never copied either\n"
