"""posix_spawn without the GIL (execserver/processes/released_spawn.py) sets a child
up as subprocess does: only its stdio and passed descriptors, no signal ignored or
blocked, a session of its own, its cwd; failures as subprocess's OSErrors."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from execserver.processes.released_spawn import ReleasedSpawner, released_spawner

REPORT = "ps -o sid= -p $$; pwd"


@pytest.fixture
def spawner() -> ReleasedSpawner:
    found = released_spawner()
    if found is None:
        pytest.fail("this machine has glibc >= 2.34 and Linux >= 5.11: the spawner must load")
    return found


@contextlib.contextmanager
def output_pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe2(os.O_CLOEXEC)
    try:
        yield read, write
    finally:
        for fd in (read, write):
            with contextlib.suppress(OSError):
                os.close(fd)


def read_all(fd: int) -> str:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    return data.decode()


def run_report(spawner: ReleasedSpawner, cwd: str, pass_fds: tuple[int, ...] = ()) -> list[str]:
    with output_pipe() as (read, write):
        pid = spawner.spawn(
            "/bin/sh",
            ["sh", "-c", REPORT],
            {"PATH": "/usr/bin:/bin"},
            cwd,
            stdin=None,
            stdout=write,
            stderr=write,
            pass_fds=pass_fds,
        )
        os.close(write)
        lines = read_all(read).splitlines()
    _, status = os.waitpid(pid, 0)
    assert status == 0, lines
    assert int(lines[-2]) == pid  # the leader of a session of its own
    return lines


def test_the_child_gets_only_its_stdio_and_passed_descriptors(
    spawner: ReleasedSpawner, tmp_path: Path
) -> None:
    # An inheritable descriptor below the passed one: posix_spawn alone would hand
    # it over (closefrom spares everything up to the passed descriptor).
    leaked = os.open(tmp_path, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    passed = os.open(tmp_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        assert leaked < passed
        with output_pipe() as (read, write):
            pid = spawner.spawn(
                "/bin/ls",
                ["ls", "/proc/self/fd"],
                {},
                str(tmp_path),
                stdin=None,
                stdout=write,
                stderr=write,
                pass_fds=(passed,),
            )
            os.close(write)
            listed = sorted(int(fd) for fd in read_all(read).split())
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        os.close(leaked)
        os.close(passed)
    # ls's own listing descriptor is the lowest free number.
    assert listed == [0, 1, 2, 3, passed]


def signal_mask(*signals: int) -> int:
    return sum(1 << (sig - 1) for sig in signals)


def status_masks(lines: list[str]) -> dict[str, int]:
    """SigBlk/SigIgn of /proc/PID/status lines, as numbers."""
    return {name: int(value, 16) for name, value in (line.split(":\t") for line in lines)}


def test_the_child_blocks_nothing_and_ignores_what_subprocess_would_leave_ignored(
    spawner: ReleasedSpawner, tmp_path: Path
) -> None:
    # The daemon's ignored signals stay ignored across exec (subprocess and Rust's
    # Command leave them so) but SIGPIPE and SIGXFSZ, which Python ignores itself
    # (subprocess's restore_signals), and glibc's own 32 and 33, which its
    # posix_spawn would otherwise set ignored. The spawning thread's blocked
    # signals are not the child's. The program reads its own status (a shell's
    # would show what it blocks itself around a fork).
    status = ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"]
    assert signal.getsignal(signal.SIGPIPE) is signal.SIG_IGN
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        here = Path("/proc/self/status").read_text().splitlines()
        ignored_here = status_masks([line for line in here if line.startswith("SigIgn")])
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
        try:
            with output_pipe() as (read, write):
                pid = spawner.spawn(
                    "/bin/grep", status, {}, str(tmp_path), stdout=write, stderr=write
                )
                os.close(write)
                ours = status_masks(read_all(read).splitlines())
            assert os.waitpid(pid, 0)[1] == 0
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        theirs = status_masks(
            subprocess.run(
                status, capture_output=True, text=True, start_new_session=True, check=True
            ).stdout.splitlines()
        )
    finally:
        signal.signal(signal.SIGHUP, hangup)
    restored = signal_mask(signal.SIGPIPE, signal.SIGXFSZ)
    assert ours["SigBlk"] == theirs["SigBlk"] == 0
    assert ours["SigIgn"] & signal_mask(signal.SIGHUP)
    assert ours["SigIgn"] == ignored_here["SigIgn"] & ~restored & ~signal_mask(32, 33)
    assert theirs["SigIgn"] == ignored_here["SigIgn"] & ~restored


def test_the_child_starts_in_its_cwd_and_failures_are_subprocess_errors(
    spawner: ReleasedSpawner, tmp_path: Path
) -> None:
    assert run_report(spawner, str(tmp_path))[-1] == str(tmp_path)
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    cases = [
        ("/bin/true", str(tmp_path / "missing"), errno.ENOENT),
        (str(tmp_path / "missing"), str(tmp_path), errno.ENOENT),
        (str(script), str(tmp_path), errno.EACCES),
    ]
    for executable, cwd, expected in cases:
        with output_pipe() as (_, write), pytest.raises(OSError) as failed:
            spawner.spawn(executable, ["x"], {}, cwd, stdin=None, stdout=write, stderr=write)
        assert failed.value.errno == expected, (executable, cwd)


def test_what_subprocess_would_search_or_refuse_is_left_to_it() -> None:
    assert ReleasedSpawner.accepts("/bin/true", {"A": "1"}, [5, 6])
    assert not ReleasedSpawner.accepts("true", {}, [5])  # a bare name: PATH search
    assert not ReleasedSpawner.accepts("/bin/true", {"A=B": "1"}, [5])
    assert not ReleasedSpawner.accepts("/bin/true", {"A": "1\0"}, [5])
    assert not ReleasedSpawner.accepts("/bin/true", {}, [1, 5])  # would be overwritten


def test_on_a_terminal_the_child_has_it_as_its_controlling_terminal(
    spawner: ReleasedSpawner, tmp_path: Path
) -> None:
    master, slave = os.openpty()
    name = os.ttyname(slave)
    try:
        pid = spawner.spawn(
            "/bin/sh",
            ["sh", "-c", "tty; ps -o tpgid= -p $$"],
            {"PATH": "/usr/bin:/bin"},
            str(tmp_path),
            terminal=name,
        )
        os.close(slave)
        assert os.waitpid(pid, 0)[1] == 0
        output = b""
        with contextlib.suppress(OSError):  # EIO once the child is gone and all is read
            while chunk := os.read(master, 4096):
                output += chunk
    finally:
        os.close(master)
    # Its terminal, with its own process group in the foreground (as TIOCSCTTY gives).
    assert output.decode().split() == [name, str(pid)]
