"""The scale benchmark measures the committed daemon (benchmarks/scale.py,
committed_daemon) with the native programs `make` built, as an install has them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.committed_tree import NATIVE_PROGRAMS, committed_daemon, daemon_tree
from execserver.processes.native_programs import built_program

NATIVE = Path("execserver/processes/native")


def test_the_committed_tree_carries_the_built_native_programs() -> None:
    if any(built_program(program) is None for program in NATIVE_PROGRAMS):
        pytest.fail("make builds the native programs before the tests run")
    with committed_daemon() as (tree, _commit):
        for program in NATIVE_PROGRAMS:
            path = Path(tree) / NATIVE / program
            assert os.access(path, os.X_OK), f"{program} missing from the measured tree"


def test_a_benchmark_serves_the_committed_tree_unless_told_the_working_one() -> None:
    with daemon_tree(working_tree=True) as (tree, commit):
        assert (tree, commit) == (None, "working tree")
    with daemon_tree(working_tree=False) as (tree, commit):
        assert tree is not None and (Path(tree) / "execserver" / "__init__.py").is_file()
        assert len(commit) == 40
    assert not Path(tree).exists()  # the archive is removed afterwards
