"""Synthetic mount points: claiming one is atomic with respect to its release.

Checking "exists" and "is ours" separately raced with the last release
removing the directory in between, and the later sandbox asked bwrap to bind
a path that was gone ("Can't find source path .../.git")."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import execserver.sandbox.mounts as mounts_module
from execserver.sandbox.mounts import MARK, SyntheticMounts


def test_claim_of_a_missing_path_takes_a_reference(tmp_path: Path) -> None:
    mounts = SyntheticMounts()
    path = str(tmp_path / ".git")
    assert mounts.claim(path) is True
    assert os.path.isdir(path)  # the mount point, made before bwrap runs
    assert mounts.claim(path) is True  # a second sandbox shares it
    mounts.release(path)
    assert os.path.isdir(path)  # still used by the first sandbox
    mounts.release(path)
    assert not os.path.exists(path)  # the last release removes it


def test_a_real_directory_is_bound_not_claimed(tmp_path: Path) -> None:
    mounts = SyntheticMounts()
    real = tmp_path / ".git"
    real.mkdir()
    assert mounts.claim(str(real)) is False
    assert real.is_dir()


def test_claim_never_sees_a_synthetic_point_as_real_while_it_is_released(tmp_path: Path) -> None:
    mounts = SyntheticMounts()
    path = str(tmp_path / ".codex")
    stop = threading.Event()
    wrong: list[str] = []

    def sandbox_cycle() -> None:
        while not stop.is_set():
            if mounts.claim(path):
                mounts.release(path)
            else:
                wrong.append("claimed a synthetic mount point as a real directory")

    threads = [threading.Thread(target=sandbox_cycle) for _ in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(20000):
        if wrong:
            break
        os.sched_yield()
    stop.set()
    for thread in threads:
        thread.join()
    assert not wrong


def test_a_synthetic_mount_point_is_not_real_and_a_vanished_path_neither(tmp_path: Path) -> None:
    mounts = SyntheticMounts()
    synthetic = str(tmp_path / ".agents")
    assert mounts.claim(synthetic)
    assert os.path.isdir(synthetic)
    assert mounts.is_real(synthetic) is False  # ours: never bound as a read rule
    mounts.release(synthetic)
    assert mounts.is_real(synthetic) is False  # removed by the last release
    real = tmp_path / ".git"
    real.mkdir()
    assert mounts.is_real(str(real)) is True


# Two daemons on one host: two SyntheticMounts, each with its own descriptors and
# so its own flocks (the lock is per open file description, as across processes).


def _user_attributes(directory: Path) -> bool:
    probe = directory / "xattr-probe"
    probe.mkdir()
    try:
        os.setxattr(probe, MARK, b"1")
    except OSError:
        return False
    finally:
        probe.rmdir()
    return True


def test_a_mount_point_another_daemon_holds_is_not_removed(tmp_path: Path) -> None:
    first, second = SyntheticMounts(), SyntheticMounts()
    path = str(tmp_path / ".git")
    assert first.claim(path) is True
    held_by_second = second.claim(path)
    assert held_by_second is not None
    first.release(path)  # the first daemon's last sandbox ends
    assert os.path.isdir(path)  # the second one's still stands on it
    second.release(path)
    if _user_attributes(tmp_path):
        # Marked as a mount point: the second daemon covered it too, and removes it.
        assert held_by_second is True
        assert not os.path.exists(path)


def test_another_daemons_mount_point_is_not_a_read_rule(tmp_path: Path) -> None:
    if not _user_attributes(tmp_path):
        pytest.skip("no user extended attributes here: the mount point is bound read-only")
    first, second = SyntheticMounts(), SyntheticMounts()
    path = str(tmp_path / ".codex")
    assert first.claim(path) is True
    assert second.is_real(path) is False
    first.release(path)


def test_the_users_empty_directory_is_never_removed(tmp_path: Path) -> None:
    first, second = SyntheticMounts(), SyntheticMounts()
    real = tmp_path / ".git"
    real.mkdir()
    assert first.claim(str(real)) is False
    assert second.claim(str(real)) is False
    first.release(str(real))
    second.release(str(real))
    assert real.is_dir()


def test_a_file_is_bound_without_a_reference(tmp_path: Path) -> None:
    worktree_git = tmp_path / ".git"
    worktree_git.write_text("gitdir: /elsewhere\n")
    mounts = SyntheticMounts()
    assert mounts.claim(str(worktree_git)) is None
    mounts.release(str(worktree_git))
    assert worktree_git.read_text() == "gitdir: /elsewhere\n"


def test_a_reference_held_elsewhere_keeps_the_mount_point_past_the_last_release(
    tmp_path: Path,
) -> None:
    # A keeper holds a sandbox's mount points beyond the daemon (hold_elsewhere):
    # the daemon's last release must leave the directory while that reference is
    # open, and the mark the keeper checks before removing it is this module's.
    from execserver.keeper.program import MOUNT_MARK

    assert MOUNT_MARK == MARK
    mounts = SyntheticMounts()
    path = str(tmp_path / ".git")
    assert mounts.claim(path) is True
    elsewhere = mounts.hold_elsewhere(path)
    try:
        mounts.release(path)
        assert os.path.isdir(path)
    finally:
        os.close(elsewhere)
    # With no holder left, the next sandbox's last release removes it again.
    assert mounts.claim(path) is True
    mounts.release(path)
    assert not os.path.exists(path)


def test_hold_elsewhere_refuses_a_path_not_held_here(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="not held by this daemon"):
        SyntheticMounts().hold_elsewhere(str(tmp_path / ".git"))


# A mount point is made under a temporary name, marked, and moved into place
# (renameat2 RENAME_NOREPLACE): made in place and marked afterwards, it was
# unmarked for a moment, and another daemon claiming the name then took it for the
# user's directory and bound it without a reference; the first daemon's last
# release removed it under that sandbox ("bwrap: Can't find source path /tmp/.git").
# And is_real looked twice (exists, then the mark): a mount point removed in
# between was taken for a real directory, to be bound although it was gone.


def _unmarked_at(path: str) -> bool:
    """Something is at ``path`` and carries no MARK (gone meanwhile: nothing is)."""
    try:
        os.getxattr(path, MARK, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.lexists(path)
    return False


def test_a_mount_point_never_appears_under_its_name_unmarked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _user_attributes(tmp_path):
        pytest.skip("no user extended attributes here: nothing is marked")
    path = str(tmp_path / ".git")
    seen: list[str] = []

    def checked(name: str, call: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return call(*args, **kwargs)
            finally:
                if _unmarked_at(path):
                    seen.append(name)

        return wrapper

    # Every step the claim takes goes through these: after each one, whatever is at
    # the protected name must already be marked.
    for name in ("mkdir", "open", "setxattr", "stat", "fstat", "rmdir", "close"):
        monkeypatch.setattr(os, name, checked(name, getattr(os, name)))
    monkeypatch.setattr(fcntl, "flock", checked("flock", fcntl.flock))
    mounts = SyntheticMounts()
    assert mounts.claim(path) is True
    monkeypatch.undo()
    assert not seen, f"{path} was there unmarked after: {seen}"
    assert sorted(os.listdir(tmp_path)) == [".git"]  # no temporary name left
    mounts.release(path)
    assert not os.listdir(tmp_path)


def test_another_daemon_never_takes_a_mount_point_being_made_for_a_real_directory(
    tmp_path: Path,
) -> None:
    if not _user_attributes(tmp_path):
        pytest.skip("no user extended attributes here: the mount point is bound read-only")
    path = str(tmp_path / ".git")
    daemons = [SyntheticMounts(), SyntheticMounts()]
    observer = SyntheticMounts()  # a third daemon resolving a policy meanwhile
    stop = threading.Event()
    wrong: list[str] = []

    def sandboxes(mounts: SyntheticMounts) -> None:
        while not stop.is_set():
            if mounts.claim(path) is not True:
                wrong.append("a claim bound another daemon's mount point as real")
            mounts.release(path)

    threads = [threading.Thread(target=sandboxes, args=(m,)) for m in daemons]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 2.0
    try:
        while not wrong and time.monotonic() < deadline:
            if observer.is_real(path):
                wrong.append("is_real took a mount point being made for the user's directory")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not wrong, wrong[0]
    assert not os.listdir(tmp_path)


def test_a_failed_move_into_place_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(source: str, target: str) -> bool | None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(mounts_module, "_rename_noreplace", failing)
    mounts = SyntheticMounts()
    with pytest.raises(OSError):
        mounts.claim(str(tmp_path / ".git"))
    assert not os.listdir(tmp_path)


def test_a_name_taken_while_the_mount_point_is_moved_in_is_taken_as_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / ".git"
    move = mounts_module._rename_noreplace

    def user_first(source: str, target: str) -> bool | None:
        real.mkdir()  # the user makes it just before the move
        return move(source, target)

    monkeypatch.setattr(mounts_module, "_rename_noreplace", user_first)
    mounts = SyntheticMounts()
    assert mounts.claim(str(real)) is False  # the user's: bound read-only
    assert sorted(os.listdir(tmp_path)) == [".git"]
    mounts.release(str(real))
    assert real.is_dir()  # and never removed


def test_without_rename_noreplace_the_mount_point_is_made_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mounts_module, "_rename_noreplace", lambda source, target: None)
    mounts = SyntheticMounts()
    path = str(tmp_path / ".git")
    assert mounts.claim(path) is True
    assert sorted(os.listdir(tmp_path)) == [".git"]
    if _user_attributes(tmp_path):
        assert mounts.is_real(path) is False
        assert SyntheticMounts().is_real(path) is False  # marked for other daemons too
    mounts.release(path)
    assert not os.listdir(tmp_path)
