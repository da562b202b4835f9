"""``fs.upload`` through a file system with a workspace-write sandbox: the tar
on the executor runs under that sandbox, so a destination outside the writable
roots fails with the executor's own error and nothing is written there, while
one inside them is uploaded whole."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import execserver
from execserver.client import ExecServerClient, Sandbox
from execserver.client.transfer import TransferError


@pytest.fixture
async def client() -> AsyncIterator[ExecServerClient]:
    async with execserver.serve_local() as local:
        yield local


def make_source(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "README").write_text("hello\n")


def every_path(root: Path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(top, name), root)
        for top, dirs, files in os.walk(root)
        for name in [*dirs, *files]
    )


async def test_upload_outside_the_writable_roots_fails_and_writes_nothing(
    client: ExecServerClient, tmp_path: Path
) -> None:
    source, workspace, outside = tmp_path / "src", tmp_path / "ws", tmp_path / "outside"
    make_source(source)
    workspace.mkdir()
    outside.mkdir()
    (outside / "kept").write_text("kept\n")
    fs = client.fs.with_sandbox(Sandbox.workspace_write(workspace, tmp_writable=False))

    for destination in (outside / "new", outside):  # one to create, one that exists
        with pytest.raises(TransferError) as info:
            await fs.upload(source, str(destination))
        assert info.value.step != "extract"  # the executor refused, not this client
        assert "Read-only file system" in str(info.value)
        assert every_path(outside) == ["kept"]
    assert (outside / "kept").read_text() == "kept\n"

    sent = await fs.upload(source, str(workspace / "copy"))
    assert (sent.files, sent.directories) == (2, 2)
    assert every_path(workspace / "copy") == ["README", "pkg", "pkg/mod.py"]
    assert (workspace / "copy" / "pkg" / "mod.py").read_text() == "x = 1\n"
