"""What the sandboxed fs helper runs in place of a heavy standard-library module
does what that module did: ``file_uri.quote_path`` as ``urllib.parse.quote``,
``ops_write.rmtree`` as ``shutil.rmtree``, the helper's plain classes as the
dataclasses they replaced."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execserver.fs import ops_write
from execserver.fs.nofollow import parent_fd
from execserver.sandbox.statx import Statx, statx
from execserver.wire.file_uri import SAFE, path_to_uri, quote_path
from execserver.wire.uri import uri_to_path

# Paths as a host has them: any text, undecodable bytes as surrogate escapes.
paths = st.text() | st.binary().map(lambda raw: os.fsdecode(raw.replace(b"\0", b"")))


@settings(max_examples=500, deadline=None)
@given(paths)
def test_quote_path_is_urllib_quote(path: str) -> None:
    assert quote_path(path) == quote(path, safe=SAFE, errors="surrogateescape")


@settings(max_examples=300, deadline=None)
@given(paths)
def test_path_to_uri_and_back(path: str) -> None:
    absolute = os.path.normpath("/" + path.replace("\0", "")).replace("//", "/")
    if "\0" in absolute or absolute.startswith("//"):
        return
    assert uri_to_path(path_to_uri(absolute)) == absolute


def test_path_to_uri_refuses_a_relative_path() -> None:
    with pytest.raises(ValueError, match="not an absolute path"):
        path_to_uri("relative")
    assert path_to_uri("/a b/%/é") == "file:///a%20b/%25/%C3%A9"


def _tree(root: Path) -> None:
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "f").write_text("x")
    (root / "a" / "b" / "c" / "g").write_text("y")
    (root / "a" / ".hidden").mkdir()
    os.mkfifo(root / "a" / "fifo")


def test_rmtree_removes_what_shutil_removes_and_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    for name, remove in (("ours", ops_write.rmtree), ("shutil", shutil.rmtree)):
        root = tmp_path / name
        _tree(root)
        os.symlink(outside, root / "a" / "link_dir")
        os.symlink(outside / "keep", root / "a" / "b" / "link_file")
        remove(str(root))
        assert not root.exists()
    assert (outside / "keep").read_text() == "keep"


# Run as an account the directory's mode binds (root ignores it): the same
# comparison, in a child process as nobody when the suite runs as root.
_FAILS_AS_SHUTIL_DOES = """
import os, shutil, stat, sys
from pathlib import Path
from execserver.fs import ops_write

# Imported first, then the switch: the checkout may lie where that account cannot
# read (a fresh clone in a 0700 temporary directory).
if len(sys.argv) > 2:
    os.setgroups([])
    os.setgid(int(sys.argv[3]))
    os.setuid(int(sys.argv[2]))
base = Path(sys.argv[1])
outcomes = []
for name, remove in (("ours", ops_write.rmtree), ("shutil", shutil.rmtree)):
    root = base / name
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "g").write_text("y")
    (root / "a" / "f").write_text("x")
    locked = root / "a" / "b"
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        remove(str(root))
        outcomes.append("removed")
    except OSError as exc:
        outcomes.append(f"{type(exc).__name__} {exc.errno} {sorted(os.listdir(locked))}")
    finally:
        locked.chmod(0o755)
print(outcomes[0])
print(outcomes[1])
"""


def test_rmtree_fails_as_shutil_does(tmp_path: Path) -> None:
    import pwd
    import subprocess
    import sys
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="es-rmtree-", dir="/tmp"))
    try:
        account: list[str] = []
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(base, nobody.pw_uid, nobody.pw_gid)
            account = [str(nobody.pw_uid), str(nobody.pw_gid)]
        done = subprocess.run(
            [sys.executable, "-c", _FAILS_AS_SHUTIL_DOES, str(base), *account],
            capture_output=True,
            text=True,
            check=False,
            cwd="/",
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        ours, theirs = done.stdout.splitlines()
        assert ours.startswith("PermissionError "), ours  # it failed, as shutil does
        assert ours == theirs
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_rmtree_refuses_a_symlink_as_shutil_does(tmp_path: Path) -> None:
    _tree(tmp_path / "ours")
    os.symlink(tmp_path / "ours", tmp_path / "link")
    for remove in (ops_write.rmtree, shutil.rmtree):
        with pytest.raises(OSError, match="symbolic link"):
            remove(str(tmp_path / "link"))
    assert (tmp_path / "ours").is_dir()


def test_parent_fd_closes_its_descriptor(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    with parent_fd(str(tmp_path / "d" / "f")) as (dir_fd, name):
        assert name == "f"
        assert os.path.samestat(os.fstat(dir_fd), os.stat(tmp_path / "d"))
    with pytest.raises(NotADirectoryError):
        (tmp_path / "file").write_text("")
        with parent_fd(str(tmp_path / "file" / "f")):
            pass
    assert len(os.listdir("/proc/self/fd")) == before


def test_statx_compares_and_hashes_by_value(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    first, second = statx(str(tmp_path / "f")), statx(str(tmp_path / "f"))
    assert first is not None and first == second and hash(first) == hash(second)
    assert first != Statx(first.dev, first.ino + 1, first.btime)
    assert {first: 1}[Statx(first.dev, first.ino, first.btime)] == 1


@pytest.mark.parametrize("holding_gil", [False, True])
def test_statx_sees_what_stat_sees_with_the_gil_released_or_held(
    tmp_path: Path, holding_gil: bool
) -> None:
    (tmp_path / "f").write_text("")
    os.symlink("f", tmp_path / "link")
    for path, follow in ((tmp_path / "f", True), (tmp_path / "link", False)):
        found = statx(str(path), follow_symlinks=follow, holding_gil=holding_gil)
        st = os.stat(path, follow_symlinks=follow)
        assert found is not None
        assert (os.makedev(*found.dev), found.ino) == (st.st_dev, st.st_ino)
    assert statx(str(tmp_path / "missing"), holding_gil=holding_gil) is None
    assert statx(str(tmp_path / "link"), holding_gil=holding_gil) == statx(str(tmp_path / "f"))
