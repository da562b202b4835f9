"""How the helper's interpreter is reached inside a view that does not contain it.

The policy's view may hold nothing but the workspace (``read ws``): then
neither ``/usr``, ``/etc`` nor the daemon's virtualenv exist in it, and
adding them (as the one-shot helper's ``:minimal`` read does) would let a
request read ``/etc/shadow`` or the daemon's own files. Instead the pieces the
interpreter needs are bound read-only under one private directory,
``/dev/.execserver-fs-helper`` (``/dev`` is always a fresh tmpfs of bwrap's,
so nothing is created on the host), and the dynamic loader is run explicitly
from there:

    <private>/ld/ld-linux-x86-64.so.2 --library-path <private>/ld:<private>/home/lib
        <private>/home/bin/python3.11 -S -s -B -P -c <as_main.BOOTSTRAP> <module> serve <private>

with ``PYTHONHOME`` and ``PYTHONPATH`` pointing under it (``as_main``: the
module run as ``-m`` would, without importing runpy). The helper program
(the fs service's, ``execserver/fs/sandboxed/program.py``) locks the directory
(mode 000) before it serves anything.

``None`` from ``helper_runtime()`` means this interpreter cannot be moved that
way (not a 64-bit little-endian ELF with a loader, say); callers then start
the helper with ``launch.confined_plan`` instead.
"""

from __future__ import annotations

import functools
import logging
import os
import struct
import sys
from dataclasses import dataclass
from typing import Final

import pybase64

import execserver
from execserver.sandbox.backend import SandboxBackend
from execserver.sandbox.fs_helper.as_main import BOOTSTRAP
from execserver.sandbox.policy import ResolvedPolicy

__all__ = [
    "LEAN_HELPER_ENV",
    "PRIVATE_DIR",
    "HelperRuntime",
    "elf_interpreter",
    "has_bytecode",
    "helper_runtime",
    "serves_policy",
]

_log = logging.getLogger(__name__)

PRIVATE_DIR: Final = "/dev/.execserver-fs-helper"
# One interpreter per sandbox policy, so this is paid once per agent: the C
# locale with Python's UTF-8 mode (file names encoded as under C.UTF-8: UTF-8
# with surrogateescape) maps no locale archive, 0.15 MB of each helper's RSS.
LEAN_HELPER_ENV: Final = {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "1"}
_PT_INTERP: Final = 3


@dataclass(frozen=True)
class HelperRuntime:
    argv: tuple[str, ...]
    env: dict[str, str]
    binds: tuple[tuple[str, str], ...]  # (host path, path inside the sandbox)


def elf_interpreter(path: str) -> str | None:
    """The PT_INTERP of a 64-bit little-endian ELF executable, else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            (phoff,) = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                base = i * phentsize
                (p_type,) = struct.unpack_from("<I", table, base)
                if p_type != _PT_INTERP:
                    continue
                offset, size = (
                    struct.unpack_from("<Q", table, base + 8)[0],
                    struct.unpack_from("<Q", table, base + 32)[0],
                )
                f.seek(offset)
                return f.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class _Binds:
    """Host directories mapped to short names under PRIVATE_DIR."""

    def __init__(self, home: str) -> None:
        self.home = home
        self.binds: list[tuple[str, str]] = [(home, f"{PRIVATE_DIR}/home")]

    def place(self, host_dir: str, name: str) -> str:
        """The in-sandbox path of ``host_dir`` (bound under ``name`` unless it
        is already inside the interpreter's home)."""
        if _inside(host_dir, self.home):
            return f"{PRIVATE_DIR}/home{host_dir[len(self.home) :]}"
        for source, target in self.binds:
            if source == host_dir:
                return target
        target = f"{PRIVATE_DIR}/{name}"
        self.binds.append((host_dir, target))
        return target


def serves_policy(policy: ResolvedPolicy, backend: SandboxBackend) -> bool:
    """Whether a helper on the private runtime can enforce ``policy`` here. When
    not, a helper on ``launch.confined_plan`` does (the same policy, only slower)."""
    if backend.bwrap is None or not backend.seccomp_ok:
        return False
    if policy.enforces_nothing or policy.full_write or policy.legacy_landlock:
        return False
    # A rule on /dev itself would cover (or, writable, put on the host) the
    # private runtime directory.
    return not any(r.path == "/dev" or _inside(r.path, PRIVATE_DIR) for r in policy.rules)


def has_bytecode(module: str) -> bool:
    """Whether ``module``'s source has its bytecode cache next to it (a module
    without a source, or one not found, needs none)."""
    import importlib.util  # here: a daemon that never starts a helper never needs it

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.has_location or not spec.cached or not spec.origin:
        return True
    try:
        return os.stat(spec.cached).st_mtime >= os.stat(spec.origin).st_mtime
    except OSError:
        return False


@functools.cache
def helper_runtime(module: str) -> HelperRuntime | None:
    """How to run ``python -m module serve PRIVATE_DIR`` on the private runtime."""
    if not has_bytecode(module):
        # The helper cannot write it (its view is read-only, and it runs with -B).
        _log.warning(
            "the fs helper program %s has no bytecode cache (a source tree run with "
            "PYTHONDONTWRITEBYTECODE set?): each helper compiles its modules itself, "
            "~70 ms and ~0.8 MB more per sandbox policy",
            module,
        )
    executable = os.path.realpath(sys.executable)
    interpreter = elf_interpreter(executable)
    home = os.path.realpath(sys.base_prefix)
    if interpreter is None or not _inside(executable, home):
        return None
    loader = os.path.realpath(interpreter)
    binds = _Binds(home)
    loader_dir = binds.place(os.path.dirname(loader), "ld")
    library_path = [loader_dir]
    import sysconfig  # here, not at the top: ~5 ms of every daemon's start otherwise

    libdir = sysconfig.get_config_var("LIBDIR")
    if isinstance(libdir, str) and os.path.isdir(libdir):
        library_path.append(binds.place(os.path.realpath(libdir), "libpython"))
    # Only what the helper imports: this package and pybase64 (not the whole venv;
    # no msgspec: the helper speaks msgpack in pure Python).
    package_root = os.path.dirname(os.path.dirname(os.path.realpath(execserver.__file__)))
    deps_root = os.path.dirname(os.path.dirname(os.path.realpath(pybase64.__file__)))
    import_path = [binds.place(package_root, "pkg"), binds.place(deps_root, "deps")]
    python = binds.place(os.path.dirname(executable), "bin") + "/" + os.path.basename(executable)
    argv = (
        f"{loader_dir}/{os.path.basename(loader)}",
        "--library-path",
        ":".join(dict.fromkeys(library_path)),
        python,
        "-S",
        "-s",
        "-B",
        "-P",  # no current directory (the policy's view) on sys.path
        "-c",
        BOOTSTRAP,
        module,
        "serve",
        PRIVATE_DIR,
    )
    env = {
        "PYTHONHOME": f"{PRIVATE_DIR}/home",
        "PYTHONPATH": ":".join(dict.fromkeys(import_path)),
        "PATH": "/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        **LEAN_HELPER_ENV,
    }
    return HelperRuntime(argv=argv, env=env, binds=tuple(binds.binds))
