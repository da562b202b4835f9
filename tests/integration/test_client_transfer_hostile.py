"""``fs.download`` against a hostile executor: its ``tar -c`` sends an archive
with members that would leave the destination. The daemon is real; only the
``tar`` on its PATH is replaced by a script that answers ``--version`` as GNU
tar does and sends a prepared archive (``<remote dir>.tar``) for ``-c``, as a
compromised executor could. Each member is refused (``TransferError``, step
``extract``) and nothing is written outside the destination. GNU tar itself
cannot produce these from a directory tree, which is why the test lies for it.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from execserver.client import ExecServerClient
from execserver.client.transfer import TransferError
from tests.support.servers import RunningServer
from tests.support.shared_daemon import SharedDaemon

FAKE_TAR = """#!/bin/sh
case "$1" in
--version) echo 'tar (GNU tar) 1.35' ;;
*) exec cat -- "$PWD.tar" ;;
esac
"""


@pytest.fixture(scope="module")
def hostile_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDaemon]:
    """One daemon with the lying tar for the module's tests: each test's session is
    its own (tests/support/shared_daemon.py), and the fake tar sends the archive
    next to whatever directory the test downloads. A daemon per test cost ~0.5 s
    of CPU each."""
    bin_dir = tmp_path_factory.mktemp("hostile-bin")
    (bin_dir / "tar").write_text(FAKE_TAR)
    (bin_dir / "tar").chmod(0o755)
    daemon = SharedDaemon(env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    try:
        daemon.get()  # now, before the first test's leak check looks
        yield daemon
    finally:
        daemon.close()


@pytest.fixture
def hostile_server(hostile_daemon: SharedDaemon) -> Iterator[RunningServer]:
    """Synchronous: the daemon's loop runs outside the test's."""
    yield hostile_daemon.get()
    hostile_daemon.check_alive()


@pytest.fixture
async def hostile(hostile_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(hostile_server.url, token=None) as client:
        yield client


def regular(name: str, data: bytes = b"hostile") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o755
    return info, b""


def archive(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(special(".", tarfile.DIRTYPE)[0])
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return out.getvalue()


def listing(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``: a file's contents, a link's target."""
    seen: dict[str, bytes | str] = {}
    for top, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(top) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = os.readlink(path)
            elif path.is_file():
                seen[rel] = path.read_bytes()
            else:
                seen[rel] = "dir"
    return seen


# Each case: the archive's members, given the (absolute) outside directory.
Members = Callable[[Path], list[tuple[tarfile.TarInfo, bytes]]]
CASES: dict[str, Members] = {
    "absolute path": lambda out: [regular(str(out / "evil"))],
    "dot-dot": lambda out: [regular("../outside/evil")],
    "dot-dot inside the path": lambda out: [
        special("sub", tarfile.DIRTYPE),
        regular("./sub/../../outside/evil"),
    ],
    "through an archive symlink (absolute)": lambda out: [
        special("esc", tarfile.SYMTYPE, str(out)),
        regular("esc/evil"),
    ],
    "through an archive symlink (relative)": lambda out: [
        special("esc", tarfile.SYMTYPE, "../outside"),
        regular("esc/evil"),
    ],
    "a directory through an archive symlink": lambda out: [
        special("esc", tarfile.SYMTYPE, "../outside"),
        special("esc/made", tarfile.DIRTYPE),
    ],
    "through a symlink nested in the archive": lambda out: [
        special("a", tarfile.DIRTYPE),
        special("a/esc", tarfile.SYMTYPE, "../../outside"),
        regular("a/esc/evil"),
    ],
    "through a symlink already at the destination": lambda out: [regular("pre/evil")],
    "hard link to a file outside": lambda out: [
        special("hl", tarfile.LNKTYPE, str(out / "victim"))
    ],
    "hard link by a relative path": lambda out: [
        special("hl", tarfile.LNKTYPE, "../outside/victim")
    ],
    "the root as a symlink": lambda out: [special(".", tarfile.SYMTYPE, str(out))],
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_member_leaving_the_destination_is_refused(
    hostile: ExecServerClient, tmp_path: Path, case: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"victim")
    remote = tmp_path / "remote"
    remote.mkdir()
    (tmp_path / "remote.tar").write_bytes(archive(CASES[case](outside)))
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "pre").symlink_to(outside)
    with pytest.raises(TransferError) as info:
        await hostile.fs.download(str(remote), dest)
    assert info.value.step == "extract"
    assert "refused archive member" in str(info.value)
    assert "failed here, refusing the executor's archive" in str(info.value)
    assert listing(outside) == {"victim": b"victim"}
    assert (outside / "victim").stat().st_nlink == 1
    assert os.readlink(dest / "pre") == str(outside)
    assert sorted(os.listdir(tmp_path)) == ["dest", "outside", "remote", "remote.tar"]


async def test_links_at_the_destination_are_replaced_not_written_through(
    hostile: ExecServerClient, tmp_path: Path
) -> None:
    """Not refused, but never followed: a file member where a symlink (or a
    hard link) to an outside file is, and a directory member where a symlink
    to an outside directory is, replace the link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"victim")
    remote = tmp_path / "remote"
    remote.mkdir()
    members = [
        regular("f", b"new f"),
        regular("hard", b"new hard"),
        special("d", tarfile.DIRTYPE),
        regular("d/x", b"new x"),
    ]
    (tmp_path / "remote.tar").write_bytes(archive(members))
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "f").symlink_to(outside / "victim")
    os.link(outside / "victim", dest / "hard")
    (dest / "d").symlink_to(outside)
    summary = await hostile.fs.download(str(remote), dest)
    assert (summary.files, summary.directories) == (3, 2)
    assert listing(outside) == {"victim": b"victim"}
    assert listing(dest) == {"f": b"new f", "hard": b"new hard", "d": "dir", "d/x": b"new x"}
    assert (outside / "victim").stat().st_nlink == 1
