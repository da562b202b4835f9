"""The scale benchmark measures the committed daemon (benchmarks/scale.py,
committed_daemon) with the native programs `make` built, as an install has them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.committed_tree import NATIVE_PROGRAMS, committed_daemon
from execserver.processes.native_programs import built_program

NATIVE = Path("execserver/processes/native")


def test_the_committed_tree_carries_the_built_native_programs() -> None:
    if any(built_program(program) is None for program in NATIVE_PROGRAMS):
        pytest.fail("make builds the native programs before the tests run")
    with committed_daemon() as (tree, _commit):
        for program in NATIVE_PROGRAMS:
            path = Path(tree) / NATIVE / program
            assert os.access(path, os.X_OK), f"{program} missing from the measured tree"
