"""Cheap metadata calls run inline only when no mounted file system can block."""

from __future__ import annotations

from execserver.fs.local_mounts import LocalMounts, all_local, mount_types

LOCAL = ["ext4", "proc", "tmpfs", "overlay"]
WITH_NFS = [*LOCAL, "nfs4"]
WITH_FUSE = [*LOCAL, "fuse.s3fs"]


def test_mount_types_are_this_hosts_mount_table() -> None:
    with open("/proc/self/mountinfo") as handle:
        lines = handle.read().splitlines()
    types = mount_types()
    assert "proc" in types
    assert len(types) == len(lines)


def test_local_only_tables_allow_inline_calls() -> None:
    assert all_local(LOCAL)


def test_network_or_fuse_mounts_send_calls_to_threads() -> None:
    assert not all_local(WITH_NFS)
    assert not all_local(WITH_FUSE)


def test_the_table_is_read_again_so_a_later_mount_counts() -> None:
    table = list(LOCAL)
    mounts = LocalMounts(lambda: table, recheck_s=0.0)
    assert mounts.all_local()
    table.append("nfs4")
    assert not mounts.all_local()


def test_an_unreadable_table_is_treated_as_not_local() -> None:
    def unreadable() -> list[str]:
        raise PermissionError("/proc/self/mounts")

    assert not LocalMounts(unreadable, recheck_s=0.0).all_local()
