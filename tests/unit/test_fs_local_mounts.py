"""Cheap metadata calls run inline only when no mounted file system can block."""

from __future__ import annotations

from pathlib import Path

from execserver.fs.local_mounts import LocalMounts, all_local, mount_types

LOCAL = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid shared:2 - proc proc rw
24 22 0:22 / /tmp rw shared:3 - tmpfs tmpfs rw
25 22 0:23 / /var/lib/docker/x rw - overlay overlay rw,lowerdir=/a,upperdir=/b
"""
WITH_NFS = LOCAL + "26 22 0:40 / /mnt/share rw - nfs4 server:/export rw,vers=4.2\n"
WITH_FUSE = LOCAL + "27 22 0:41 / /mnt/s3 rw - fuse.s3fs s3fs rw\n"


def test_mount_types_read_the_field_after_the_separator() -> None:
    assert mount_types(LOCAL) == ["ext4", "proc", "tmpfs", "overlay"]


def test_local_only_tables_allow_inline_calls() -> None:
    assert all_local(mount_types(LOCAL))


def test_network_or_fuse_mounts_send_calls_to_threads() -> None:
    assert not all_local(mount_types(WITH_NFS))
    assert not all_local(mount_types(WITH_FUSE))


def test_the_table_is_read_again_so_a_later_mount_counts(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    table.write_text(LOCAL)
    mounts = LocalMounts(str(table), recheck_s=0.0)
    assert mounts.all_local()
    table.write_text(WITH_NFS)
    assert not mounts.all_local()


def test_an_unreadable_table_is_treated_as_not_local(tmp_path: Path) -> None:
    assert not LocalMounts(str(tmp_path / "missing"), recheck_s=0.0).all_local()
