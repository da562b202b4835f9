"""Limit parsing and host probing of execserver.containment (directory layouts built
in tmp dirs; the real cgroups are exercised in tests/integration/test_process_limits.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from execserver.config import ProcessLimitsConfig
from execserver.containment import (
    ContainmentError,
    ProcessCgroups,
    open_process_cgroups,
    parse_size,
)
from execserver.containment.host import OwnCgroups, own_cgroups, probe_host


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2G", 2 << 30),
        ("100M", 100 << 20),
        ("100m", 100 << 20),
        ("512MiB", 512 << 20),
        ("1.5G", 3 << 29),
        ("64k", 64 << 10),
        ("65536", 65536),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "-1G", "2X", "0"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_own_cgroups_reads_v1_and_v2_lines() -> None:
    own = own_cgroups("4:memory:/a/b\n1:cpu,cpuacct:/\n0::/user.slice/x.service\n")
    assert own.v2 == "/user.slice/x.service"
    assert own.v1 == {"memory": "/a/b", "cpu": "/", "cpuacct": "/"}


def test_probe_finds_writable_v1_hierarchies(tmp_path: Path) -> None:
    for name in ("memory", "pids"):
        (tmp_path / name / "a").mkdir(parents=True)
        (tmp_path / name / "cgroup.procs").write_text("")
    host = probe_host(str(tmp_path), OwnCgroups(None, {"memory": "/a", "pids": "/a"}))
    assert host.v1_dirs == {"memory": str(tmp_path / "memory/a"), "pids": str(tmp_path / "pids/a")}
    assert host.v1_usable({"memory", "pids"}) and not host.v1_usable({"cpu"})
    assert "no cgroup v1 cpu hierarchy" in host.problems["cpu"]
    assert not host.v2_usable({"memory"})


def test_probe_reads_the_delegated_v2_controllers(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    own = tmp_path / "svc"
    own.mkdir()
    (own / "cgroup.controllers").write_text("memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    (own / "cgroup.procs").write_text("")
    host = probe_host(str(tmp_path), OwnCgroups("/svc", {}))
    assert host.v2_dir == str(own)
    assert host.v2_usable({"memory", "pids"}) and not host.v2_usable({"cpu"})


def test_no_limits_opens_nothing(tmp_path: Path) -> None:
    assert open_process_cgroups(ProcessLimitsConfig(cgroup_root=str(tmp_path))) is None


def test_limits_without_delegation_name_what_is_missing(tmp_path: Path) -> None:
    limits = ProcessLimitsConfig(memory_max_bytes=1 << 30, cgroup_root=str(tmp_path))
    with pytest.raises(ContainmentError) as err:
        open_process_cgroups(limits)
    message = str(err.value)
    assert message.startswith("--process-memory-max needs cgroup controllers delegated")
    assert f"no cgroup v2 mounted at {tmp_path}" in message
    assert f"no cgroup v1 memory hierarchy at {tmp_path}/memory" in message
    assert "\n" not in message


def test_a_prepared_cgroup_is_the_next_one_created(tmp_path: Path) -> None:
    """``prepare`` makes the next cgroup ahead (after a spawn, not on the next one's
    path); ``create`` takes it, and makes a new one when none is ready."""
    cgroups = ProcessCgroups(ProcessLimitsConfig(), 2, {"": str(tmp_path)})
    cgroups.prepare()
    made = [p.name for p in tmp_path.iterdir()]
    assert len(made) == 1
    first = cgroups.create()
    assert [Path(d).name for d in first.directories] == made
    second = cgroups.create()
    assert second.directories != first.directories
    assert all(Path(d).is_dir() for d in second.directories)


def test_a_prepared_cgroup_whose_directory_went_is_not_handed_out(tmp_path: Path) -> None:
    cgroups = ProcessCgroups(ProcessLimitsConfig(), 2, {"": str(tmp_path)})
    cgroups.prepare()
    (gone,) = tmp_path.iterdir()
    gone.rmdir()  # e.g. its parent removed as stale by another daemon
    fresh = cgroups.create()
    assert all(Path(d).is_dir() for d in fresh.directories)
    assert [Path(d).name for d in fresh.directories] != [gone.name]


def test_cgroups_made_beside_the_daemons_leaf_weigh_the_child_nice_steps_on_v2(
    tmp_path: Path,
) -> None:
    """On v2 a process's own cgroup and a principal's group are siblings of the
    daemon's leaf, where nice values do not reach: they get --child-nice's steps as a
    CPU weight (cpu.weight.nice). A process's cgroup inside a principal's group does
    not: its siblings are the principal's own."""
    cgroups = ProcessCgroups(ProcessLimitsConfig(), 2, {"": str(tmp_path)}, frozenset({"cpu"}), 5)
    own = cgroups.create()
    assert (Path(own.directories[0]) / "cpu.weight.nice").read_text() == "5"
    cgroups.set_groups({"alice": ProcessLimitsConfig()})
    group = tmp_path / f"tenant-{os.getpid()}-alice"
    assert (group / "cpu.weight.nice").read_text() == "5"
    inside = cgroups.create("alice")
    assert Path(inside.directories[0]).parent == group
    assert not (Path(inside.directories[0]) / "cpu.weight.nice").exists()


@pytest.mark.parametrize(
    ("version", "controllers", "steps"),
    [(2, {"cpu"}, 0), (2, {"memory"}, 5), (1, {"cpu"}, 5)],
    ids=["no-steps", "no-cpu-controller", "v1"],
)
def test_no_weight_is_written_without_steps_a_cpu_controller_or_on_v1(
    tmp_path: Path, version: int, controllers: set[str], steps: int
) -> None:
    parents = {"": str(tmp_path)} if version == 2 else {"cpu": str(tmp_path)}
    cgroups = ProcessCgroups(ProcessLimitsConfig(), version, parents, frozenset(controllers), steps)
    made = cgroups.create()
    assert made.directories
    assert not any((Path(d) / "cpu.weight.nice").exists() for d in made.directories)
    assert not any((Path(d) / "cpu.shares").exists() for d in made.directories)
