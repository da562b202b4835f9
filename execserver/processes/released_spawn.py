"""Starting a child while the event loop runs on: ``posix_spawn`` called through
ctypes from a worker thread.

CPython's subprocess starts a child by vfork with the GIL held, and the parent
stays suspended until the child has exec'd. Every command leads a session of its
own, and with autogroup scheduling (the default of most distributions' kernels)
a new session is a new scheduling group: with many busy sessions the child waits
tens of milliseconds for a CPU before its exec, and the daemon's whole event loop
waits with it (measured in docs/scale.md: 37 ms p50, 89 ms at worst per spawn
among 50 busy sessions). ``posix_spawn`` vforks too, but a ctypes call releases
the GIL for its duration: only the worker thread waits, the loop goes on.

What subprocess does in the child, and how it is done here:
- stdin, stdout, stderr: dup2 file actions (stdin /dev/null when not a pipe);
- ``pass_fds``: a dup2 of each onto itself, which clears its close-on-exec flag in
  the child only (POSIX.1-2024; glibc since 2.29);
- every other descriptor closed: subprocess closes all the rest in the child;
  posix_spawn has no "close all but these" action, so every descriptor of the
  daemon above 2 is first marked close-on-exec (one ``close_range`` call with
  CLOSE_RANGE_CLOEXEC, Linux 5.11). Python opens everything close-on-exec already
  (PEP 446); the call covers what a C library or the daemon's parent left
  inheritable. Rust's std, and so the reference server, relies on that flag
  alone. Above the highest passed descriptor everything is closed as well. (The
  flag is the process's: code sharing the daemon's process that hands an
  inheritable descriptor to a child of its own must name it, as subprocess's
  pass_fds does, rather than rely on the flag it set);
- a new session (POSIX_SPAWN_SETSID), the working directory (addchdir_np);
- SIGPIPE and SIGXFSZ back to their defaults (Python ignores them; subprocess's
  ``restore_signals``), and an empty signal mask.

A failure anywhere in the child (chdir, exec) comes back as posix_spawn's result,
raised here as the same OSError subprocess would raise.

Needs glibc 2.34 (``posix_spawn_file_actions_addclosefrom_np``) and Linux 5.11;
``released_spawner()`` is None elsewhere and callers keep subprocess.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ReleasedSpawner", "released_spawner"]

# <spawn.h> (glibc, every architecture).
_POSIX_SPAWN_SETSIGDEF = 0x04
_POSIX_SPAWN_SETSIGMASK = 0x08
_POSIX_SPAWN_SETSID = 0x80
# <linux/close_range.h>
_CLOSE_RANGE_CLOEXEC = 1 << 2
_ALL_FDS = 0xFFFFFFFF
# Room for the opaque types (glibc's sizes on 64-bit: file actions 80 bytes,
# attributes 336, sigset_t 128), with margin.
_FILE_ACTIONS_SIZE = 512
_ATTR_SIZE = 1024
_SIGSET_SIZE = 256
# The signals subprocess's restore_signals puts back to their defaults.
_RESTORED_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)
_MIN_GLIBC = (2, 34)
# The kernel's first real-time signal; the C library keeps those below its SIGRTMIN.
_KERNEL_SIGRTMIN = 32


def _glibc_version() -> tuple[int, int] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None
    if not text or not text.startswith("glibc "):
        return None
    major, _, minor = text.removeprefix("glibc ").partition(".")
    try:
        return int(major), int(minor.partition(".")[0])
    except ValueError:
        return None


class ReleasedSpawner:
    """``spawn``: posix_spawn with subprocess's child set-up; safe to call from
    several threads at once (each call builds its own actions and attributes)."""

    def __init__(self, libc: Any) -> None:
        self._libc = libc
        pointer, c_int, c_uint = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        strings, pid = ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(c_int)
        for name, argtypes in {
            "posix_spawn": [pid, ctypes.c_char_p, pointer, pointer, strings, strings],
            "posix_spawn_file_actions_init": [pointer],
            "posix_spawn_file_actions_destroy": [pointer],
            "posix_spawn_file_actions_adddup2": [pointer, c_int, c_int],
            "posix_spawn_file_actions_addopen": [pointer, c_int, ctypes.c_char_p, c_int, c_uint],
            "posix_spawn_file_actions_addchdir_np": [pointer, ctypes.c_char_p],
            "posix_spawn_file_actions_addclosefrom_np": [pointer, c_int],
            "posix_spawnattr_init": [pointer],
            "posix_spawnattr_destroy": [pointer],
            "posix_spawnattr_setflags": [pointer, ctypes.c_short],
            "posix_spawnattr_setsigmask": [pointer, pointer],
            "posix_spawnattr_setsigdefault": [pointer, pointer],
            "sigemptyset": [pointer],
            "sigaddset": [pointer, c_int],
            "close_range": [c_uint, c_uint, c_int],
        }.items():
            function = getattr(libc, name)
            function.argtypes = argtypes
            function.restype = c_int
        self._empty = ctypes.create_string_buffer(_SIGSET_SIZE)
        libc.sigemptyset(self._empty)
        self._restored = _signal_set(_RESTORED_SIGNALS)

    @staticmethod
    def accepts(
        executable: str,
        env: Mapping[str, str],
        fds: Sequence[int],
    ) -> bool:
        """Whether ``spawn`` reproduces subprocess for these: an executable with a
        directory part (subprocess searches the child's PATH for a bare name), an
        environment subprocess would not refuse, and no descriptor among 0-2 to
        move (dup2 actions run in order: one would overwrite another)."""
        if "/" not in executable or "\0" in executable:
            return False
        if any(fd < 3 for fd in fds):
            return False
        return not any("=" in key or "\0" in key or "\0" in value for key, value in env.items())

    def spawn(
        self,
        executable: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        *,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
        terminal: str | None = None,
        pass_fds: Sequence[int] = (),
    ) -> int:
        """Start ``argv`` as subprocess.Popen(..., start_new_session=True) would, and
        return its pid. Raises OSError (the errno subprocess would raise) when the
        child could not be started. Blocks the calling thread, never the GIL, until
        the child has exec'd.

        ``stdin`` None is /dev/null. ``terminal``: instead of the three, the path of a
        pseudo-terminal's slave, opened as the child's stdin, stdout and stderr; the
        child, leader of a new session, opens it without O_NOCTTY, so it becomes its
        controlling terminal (what TIOCSCTTY after setsid does in subprocess's
        pre-exec hook)."""
        if terminal is None and (stdout is None or stderr is None):
            raise ValueError("stdout and stderr, or a terminal")
        libc = self._libc
        arguments = [os.fsencode(a) for a in argv]
        environment = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]
        argv_array = (ctypes.c_char_p * (len(arguments) + 1))(*arguments, None)
        env_array = (ctypes.c_char_p * (len(environment) + 1))(*environment, None)
        actions = ctypes.create_string_buffer(_FILE_ACTIONS_SIZE)
        attributes = ctypes.create_string_buffer(_ATTR_SIZE)
        _check(libc.posix_spawn_file_actions_init(actions))
        try:
            _check(libc.posix_spawnattr_init(attributes))
            try:
                if terminal is not None:
                    path = os.fsencode(terminal)
                    _check(libc.posix_spawn_file_actions_addopen(actions, 0, path, os.O_RDWR, 0))
                    _check(libc.posix_spawn_file_actions_adddup2(actions, 0, 1))
                    _check(libc.posix_spawn_file_actions_adddup2(actions, 0, 2))
                else:
                    assert stdout is not None and stderr is not None
                    if stdin is None:
                        _check(
                            libc.posix_spawn_file_actions_addopen(
                                actions, 0, b"/dev/null", os.O_RDONLY, 0
                            )
                        )
                    else:
                        _check(libc.posix_spawn_file_actions_adddup2(actions, stdin, 0))
                    _check(libc.posix_spawn_file_actions_adddup2(actions, stdout, 1))
                    _check(libc.posix_spawn_file_actions_adddup2(actions, stderr, 2))
                for fd in pass_fds:
                    _check(libc.posix_spawn_file_actions_adddup2(actions, fd, fd))
                _check(libc.posix_spawn_file_actions_addchdir_np(actions, os.fsencode(cwd)))
                highest = max((2, *pass_fds))
                _check(libc.posix_spawn_file_actions_addclosefrom_np(actions, highest + 1))
                flags = _POSIX_SPAWN_SETSID | _POSIX_SPAWN_SETSIGMASK | _POSIX_SPAWN_SETSIGDEF
                _check(libc.posix_spawnattr_setflags(attributes, flags))
                _check(libc.posix_spawnattr_setsigmask(attributes, self._empty))
                _check(libc.posix_spawnattr_setsigdefault(attributes, self._restored))
                # Everything the child should not have is close-on-exec at the fork.
                if libc.close_range(3, _ALL_FDS, _CLOSE_RANGE_CLOEXEC) != 0:
                    raise _errno_error()
                pid = ctypes.c_int(0)
                error = libc.posix_spawn(
                    ctypes.byref(pid),
                    os.fsencode(executable),
                    actions,
                    attributes,
                    argv_array,
                    env_array,
                )
            finally:
                libc.posix_spawnattr_destroy(attributes)
        finally:
            libc.posix_spawn_file_actions_destroy(actions)
        if error != 0:
            # The errno of the child's first failed step: entering cwd, or the exec.
            raise OSError(error, os.strerror(error))
        return pid.value


def _signal_set(signals: Sequence[int]) -> ctypes.Array[ctypes.c_ulong]:
    """A sigset_t of ``signals`` and of the C library's own signals (32 up to
    SIGRTMIN). glibc's child sets those two to SIG_IGN unless they are in the
    default set, and an ignored signal stays ignored across exec: the command would
    start with signals 32 and 33 ignored (subprocess leaves them at their
    defaults). sigaddset refuses them, so the bits are set here (bit n-1 of the
    array of unsigned longs is signal n)."""
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    words = (ctypes.c_ulong * (_SIGSET_SIZE // ctypes.sizeof(ctypes.c_ulong)))()
    for sig in (*signals, *range(_KERNEL_SIGRTMIN, signal.SIGRTMIN)):
        words[(sig - 1) // bits] |= 1 << ((sig - 1) % bits)
    return words


def _check(result: int) -> None:
    if result != 0:
        raise OSError(result, os.strerror(result))


def _errno_error() -> OSError:
    number = ctypes.get_errno()
    return OSError(number, os.strerror(number))


@functools.cache
def released_spawner() -> ReleasedSpawner | None:
    """This system's ReleasedSpawner, or None when its C library or kernel lacks
    what it needs (callers then use subprocess)."""
    version = _glibc_version()
    if version is None or version < _MIN_GLIBC:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        spawner = ReleasedSpawner(libc)
    except (OSError, AttributeError):
        return None
    # CLOSE_RANGE_CLOEXEC on an empty range: EINVAL before Linux 5.11.
    if libc.close_range(_ALL_FDS, _ALL_FDS, _CLOSE_RANGE_CLOEXEC) != 0:
        return None
    return spawner
