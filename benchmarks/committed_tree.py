"""The daemon's code as committed, for a benchmark that measures a commit
(benchmarks/scale.py): ``git archive`` of HEAD in a temporary directory, with
the native programs ``make`` built copied in. Apart from benchmarks/scale.py so
that a test can check it without the bench extra (matplotlib)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from scripts.servers import PROJECT_ROOT

__all__ = ["NATIVE_PROGRAMS", "committed_daemon", "daemon_tree"]


@contextlib.contextmanager
def committed_daemon() -> Iterator[tuple[str, str]]:
    """The daemon's code as committed (``git archive HEAD``), in a temporary
    directory: the working tree may hold others' unfinished edits, and a
    figure is of a commit. Yields (directory, commit)."""
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="execserver-scale-src-") as tree:
        archive = subprocess.run(
            ["git", "archive", commit, "execserver"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        _add_native_programs(Path(tree))
        yield tree, commit


@contextlib.contextmanager
def daemon_tree(working_tree: bool) -> Iterator[tuple[str | None, str]]:
    """The daemon's code a benchmark serves: the working tree's (None: the
    project's own, as imported) when asked, else the committed one
    (``committed_daemon``). Yields (directory, commit)."""
    if working_tree:
        yield None, "working tree"
        return
    with committed_daemon() as committed:
        yield committed


# The C programs `make` builds (gitignored, so not in the archive), by their source.
NATIVE_PROGRAMS = {"exec-as": "exec_as.c", "orphan-guard": "orphan_guard.c"}


def _add_native_programs(tree: Path) -> None:
    """The built native programs into the archived tree, each where its committed
    source is the one it was built from (the working tree's, which `make` built):
    without them the measured daemon ran without its orphan guard and took
    subprocess's slower path for spawns that change account or cgroup."""
    native = Path("execserver/processes/native")
    for program, source in NATIVE_PROGRAMS.items():
        built, ours = PROJECT_ROOT / native / program, PROJECT_ROOT / native / source
        committed = tree / native / source
        if built.exists() and committed.exists() and committed.read_bytes() == ours.read_bytes():
            shutil.copy2(built, tree / native / program)
        else:
            print(f"warning: {program} not built from the committed {source}: measured without it")
