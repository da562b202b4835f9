"""The persistent sandboxed fs helper stays lean: one interpreter per sandbox
policy, so what it imports is memory and start time times the number of agents
(docs/scale.md). A later import of a heavy module anywhere in its import graph
(execserver/fs/operations.py and what it imports) fails here, by name."""

from __future__ import annotations

import logging
import os
import py_compile
import statistics
import subprocess
import sys
from pathlib import Path

import pybase64
import pytest

import execserver
from execserver.fs.sandboxed import program
from execserver.sandbox.fs_helper import runtime
from execserver.sandbox.fs_helper.as_main import BOOTSTRAP
from execserver.sandbox.fs_helper.runtime import LEAN_HELPER_ENV

# Each of these, with what it imports, cost the helper 0.5-4.4 MB PSS.
FORBIDDEN = (
    "msgspec",
    "typing",
    "dataclasses",
    "inspect",
    "re",
    "enum",
    "urllib",
    "shutil",
    "threading",
    "json",
    "runpy",
    "importlib.util",
    "functools",
    "collections",
    "contextlib",
    "subprocess",
    "asyncio",
    "logging",
    "ctypes",  # the package; statx is bound on its C core, _ctypes (sandbox/statx.py)
)
# The helper's imports over a bare interpreter's: 1.0 MB when this was written
# (6.2 MB before), ctypes (statx) the largest part.
MAX_EXTRA_PSS_MB = 2.0

PACKAGE_ROOT = str(Path(execserver.__file__).resolve().parents[1])
DEPS_ROOT = str(Path(pybase64.__file__).resolve().parents[1])


def _env() -> dict[str, str]:
    """The helper's import path (``runtime.helper_runtime``), as host paths."""
    return {
        "PYTHONPATH": f"{PACKAGE_ROOT}:{DEPS_ROOT}",
        "PATH": "/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        **LEAN_HELPER_ENV,
    }


def _helper_imports() -> set[str]:
    """Every module the helper program imports, started as the daemon starts it
    (``-S -s -B -P -c BOOTSTRAP <module>``, without ``serve``: it prints its
    usage once everything is imported)."""
    argv = [sys.executable, "-S", "-s", "-B", "-P", "-X", "importtime", "-c", BOOTSTRAP]
    done = subprocess.run(
        [*argv, program.__name__],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr  # its usage: every import was made
    assert "usage: serve" in done.stderr
    return {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_the_helper_imports_nothing_heavy() -> None:
    imported = _helper_imports()
    # Seen at all (the program itself runs as __main__, not imported by name).
    assert {"execserver.fs.operations", "execserver.sandbox.statx"} <= imported
    heavy = sorted(
        name for name in imported if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    )
    assert heavy == [], f"the fs helper now imports {heavy}"


def _mean_pss_mb(code: str, copies: int = 6) -> float:
    """Mean PSS of ``copies`` interpreters that ran ``code`` (alive together:
    shared pages are split between them, as between a daemon's helpers)."""
    argv = [sys.executable, "-S", "-s", "-B", "-P", "-c"]
    ready = (
        f"{code}\nimport sys\nsys.stdout.write('ready\\n')\nsys.stdout.flush()\nsys.stdin.read()"
    )
    children = [
        subprocess.Popen([*argv, ready], env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for _ in range(copies)
    ]
    try:
        sizes = []
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == b"ready\n"
            with open(f"/proc/{child.pid}/smaps_rollup") as rollup:
                pss = next(line for line in rollup if line.startswith("Pss:"))
            sizes.append(int(pss.split()[1]) / 1024)
        return statistics.mean(sizes)
    finally:
        for child in children:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.close()
            child.wait(30)
            child.stdout.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="no smaps_rollup")
def test_the_helpers_imports_cost_little_memory() -> None:
    # Bytecode written first, as the daemon's own import of these modules leaves
    # it (the helper runs with -B): compiling a source costs memory of its own.
    env = {key: value for key, value in _env().items() if key != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-S", "-s", "-P", "-c", f"import {program.__name__}"],
        env=env,
        check=True,
        timeout=60,
    )
    bare = _mean_pss_mb("pass")
    helper = _mean_pss_mb(f"import {program.__name__}")
    assert helper - bare <= MAX_EXTRA_PSS_MB, (bare, helper)


def test_bootstrap_runs_a_module_as_python_m_does(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(
        "import sys\n"
        "if __name__ == '__main__':\n"
        "    print(__name__, __package__, __spec__.name, sys.argv[1:], __file__)\n"
        "    sys.exit(3)\n"
    )
    env = {**_env(), "PYTHONPATH": f"{tmp_path}:{PACKAGE_ROOT}"}
    runs = [
        subprocess.run(
            [sys.executable, "-S", "-s", "-B", "-P", *how, "pkg.mod", "a", "b c"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        for how in (["-m"], ["-c", BOOTSTRAP])
    ]
    assert [(run.returncode, run.stdout) for run in runs] == [(3, runs[0].stdout)] * 2
    assert runs[0].stdout.startswith("__main__ pkg pkg.mod ['a', 'b c'] ")
    missing = subprocess.run(
        [sys.executable, "-S", "-s", "-B", "-P", "-c", BOOTSTRAP, "pkg.nothing"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1 and "No module named pkg.nothing" in missing.stderr


def test_a_helper_program_without_bytecode_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a bytecode cache each helper compiles its modules itself (the helper
    cannot write one): the daemon says so once, and only then."""
    (tmp_path / "helper_prog_cached.py").write_text("X = 1\n")
    (tmp_path / "helper_prog_source_only.py").write_text("X = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    py_compile.compile(str(tmp_path / "helper_prog_cached.py"), doraise=True)
    assert runtime.has_bytecode("helper_prog_cached")
    assert not runtime.has_bytecode("helper_prog_source_only")
    with caplog.at_level(logging.WARNING, logger=runtime.__name__):
        runtime.helper_runtime.cache_clear()
        runtime.helper_runtime("helper_prog_cached")
        assert caplog.messages == []
        runtime.helper_runtime("helper_prog_source_only")
    runtime.helper_runtime.cache_clear()
    (message,) = caplog.messages
    assert "helper_prog_source_only has no bytecode cache" in message
