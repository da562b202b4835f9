"""Synthetic mount points: claiming one is atomic with respect to its release.

Checking "exists" and "is ours" separately raced with the last release
removing the directory in between, and the later sandbox asked bwrap to bind
a path that was gone ("Can't find source path .../.git")."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from execserver.sandbox.mounts import SyntheticMounts


def test_claim_of_a_missing_path_takes_a_reference(tmp_path: Path) -> None:
    mounts = SyntheticMounts()
    path = str(tmp_path / ".git")
    assert mounts.claim(path) is True
    os.mkdir(path)  # what bwrap does through the writable bind
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
                try:
                    os.mkdir(path)
                except FileExistsError:
                    pass
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
    os.mkdir(synthetic)
    assert mounts.is_real(synthetic) is False  # ours: never bound as a read rule
    mounts.release(synthetic)
    assert mounts.is_real(synthetic) is False  # removed by the last release
    real = tmp_path / ".git"
    real.mkdir()
    assert mounts.is_real(str(real)) is True
