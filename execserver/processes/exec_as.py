"""Spawning through ``exec-as`` (``native/exec_as.c``): the daemon keeps its vfork
fast path for a child that must change account or enter a cgroup first.

CPython's subprocess forks instead of vforking as soon as a uid, gid, group list
or pre-exec hook is given, and forking the daemon copies its page tables: a
tenant's spawn cost about three times an ordinary one. Here the daemon vforks
``exec-as``, which writes its cgroup placements, drops to the account and execs
the command; the command keeps the pid, so nothing else changes. ``exec-as``
reports a failure on a pipe (closed by the exec on success), which becomes the
same OSError subprocess would have raised.

``make`` builds the program next to its source (``execserver/processes/native/
exec-as``), and a wheel or image built after it carries it (package data). Without
it, or with one built for another architecture, a spawn falls back to
subprocess's own account switch and pre-exec placement: the same result, slower.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from typing import Final

from execserver.processes.native_programs import built_program
from execserver.sandbox.plan import Credentials

__all__ = ["EXEC_AS_PROGRAM", "ExecAs"]

_REPORT_MAX = 64


# The exec-as this installation has (None: spawns fall back to subprocess alone).
EXEC_AS_PROGRAM: Final[str | None] = built_program("exec-as")


def _ids(values: Sequence[int] | None) -> str:
    if values is None:
        return "-"
    return ",".join(str(v) for v in values)


def _candidates(executable: str, env: Mapping[str, str] | None) -> list[str]:
    """The paths subprocess would try for ``executable``, in its order."""
    if os.path.dirname(executable):
        return [executable]
    return [os.path.join(d, executable) for d in os.get_exec_path(env)]


class ExecAs:
    """One spawn through ``exec-as``: ``argv``/``pass_fds`` for Popen, then ``wait``
    once Popen has returned (the command runs, or the OSError of why not)."""

    def __init__(
        self,
        program: str,
        credentials: Credentials | None,
        cgroup_fds: Sequence[int],
        executable: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
    ) -> None:
        self._report, report_w = os.pipe2(os.O_CLOEXEC)
        self._report_w: int | None = report_w
        uid = gid = "-"
        groups: Sequence[int] | None = None
        if credentials is not None:
            uid, gid, groups = str(credentials.uid), str(credentials.gid), credentials.groups
        self.argv = [
            program,
            str(report_w),
            uid,
            gid,
            _ids(groups),
            _ids(list(cgroup_fds)) if cgroup_fds else "-",
            "--",
            *_candidates(executable, env),
            "--",
            *argv,
        ]
        self.pass_fds = (report_w, *cgroup_fds)

    def started(self) -> None:
        """Popen returned: drop our copy of the report pipe's write end."""
        if self._report_w is not None:
            os.close(self._report_w)
            self._report_w = None

    def outcome(self) -> OSError | None:
        """Blocks until exec-as has exec'd the command (None) or failed (its error);
        as short as subprocess's own wait for its exec."""
        self.started()
        try:
            report = b""
            while True:
                chunk = os.read(self._report, _REPORT_MAX)
                if not chunk:
                    break
                report += chunk
        finally:
            os.close(self._report)
        if not report:
            return None
        stage, _, number = report.decode("ascii", "replace").strip().partition(" ")
        code = int(number) if number.isdigit() else errno.EIO
        return OSError(code, f"{os.strerror(code)} ({stage})")

    def close(self) -> None:
        """After a failed Popen: nothing will report."""
        self.started()
        os.close(self._report)
