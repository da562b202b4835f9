"""The orphan guard (``native/orphan_guard.c``): what the daemon started dies with it,
even when the daemon cannot kill it itself (SIGKILL, the OOM killer, a crash).

The daemon starts the program once, at start-up, with the read end of a pipe as its
stdin, and tells it on the pipe of every process it starts (pid and start time) and
of every tree that ended. The write end is close-on-exec and the daemon's alone, so
the pipe ends when the daemon exits, however it exits; the guard then kills what is
still recorded, with its session and its descendants. After an orderly shutdown
(every tree killed and reaped already) it finds nothing and exits.

Processes held by keepers (``--state-dir``) are not the guard's: they are meant to
outlive the daemon, and their keepers end them after the session TTL.

``make`` builds the program next to its source, as it builds ``exec-as``; without it
the daemon runs unguarded and says so once at start-up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from typing import Final

from execserver.processes.native_programs import built_program
from execserver.processes.stdin import StdinWriter

__all__ = ["ORPHAN_GUARD_PROGRAM", "OrphanGuard"]

log = logging.getLogger(__name__)


# The orphan-guard this installation has (None: a SIGKILLed daemon's processes
# outlive it).
ORPHAN_GUARD_PROGRAM: Final[str | None] = built_program("orphan-guard")
# How long an orderly shutdown waits for the guard to find nothing and exit.
EXIT_WAIT_S = 2.0


class OrphanGuard:
    """The running guard: ``started``/``ended`` as the daemon's trees come and go,
    ``aclose`` at shutdown (after every tree was killed)."""

    def __init__(self, popen: subprocess.Popen[bytes], pipe: int) -> None:
        self._popen = popen
        # The guard's stdin, written as a child's is: a line the pipe does not take
        # at once (a guard slower than the spawns) waits for it, in order.
        self._stdin = StdinWriter(pipe, owns_fd=True)

    @classmethod
    def start(cls, program: str | None = ORPHAN_GUARD_PROGRAM) -> OrphanGuard | None:
        """The guard, running; None (and a warning) when it is not built or will
        not start."""
        if program is None:
            log.warning(
                "orphan-guard is not built (make builds it): the processes of a daemon "
                "that is SIGKILLed outlive it"
            )
            return None
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            # In the daemon's session and process group (not a session of its own,
            # which the supervisor's sweeps would take for an escapee to attribute);
            # it ignores the signals a terminal or a group kill would send it.
            popen = subprocess.Popen(
                [program], stdin=read_end, stdout=subprocess.DEVNULL, close_fds=True
            )
        except OSError as exc:
            os.close(write_end)
            log.warning(
                "orphan-guard did not start (%s): a SIGKILLed daemon's processes outlive it",
                exc.strerror,
            )
            return None
        finally:
            os.close(read_end)
        os.set_blocking(write_end, False)
        return cls(popen, write_end)

    @property
    def pid(self) -> int:
        return self._popen.pid

    def started(self, pid: int, start: int) -> None:
        """The daemon started ``pid`` (``start``: its /proc start time)."""
        self._stdin.write(b"+ %d %d\n" % (pid, start))

    def ended(self, pid: int) -> None:
        """The tree of ``pid`` has ended (killed and reaped, or exited whole)."""
        self._stdin.write(b"- %d\n" % pid)

    async def aclose(self) -> None:
        """Shutdown, once the daemon has ended its processes: the pipe ends, the
        guard looks, finds nothing of them, and exits."""
        self._stdin.close()
        try:
            await asyncio.to_thread(self._popen.wait, EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            log.warning("orphan-guard did not exit; killing it")
            self._popen.kill()
            self._popen.wait()
