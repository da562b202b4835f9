"""Is a sandboxed start's "denial" really a missing program?

Under a sandbox both servers start the command through a launcher (bwrap, or
their own helper). When the launcher cannot exec the program it exits 101, and
the executor reports that exit with ``sandboxDenied: true`` whether the sandbox
hid the program or the program simply does not exist. That answer is the
reference's and stays as it is; this module tells the two cases apart on the
client side, the way the launcher looks the program up:

* a name with a slash is taken relative to the request's cwd;
* a bare name is searched in the child's ``PATH`` (the request's own, else the
  executor's: a child without one is searched in the daemon's), relative
  entries against the request's cwd;
* every candidate is asked about with ``fs/getMetadata`` *under the same
  sandbox*, so a program the sandbox hides (a ``deny_read`` directory) still
  reads as there, and its failed exec stays a denial.

Only a program that is missing from every place the launcher would look is
reported (``CommandNotFound``); when anything is unclear the denial stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import uuid
from typing import TYPE_CHECKING, Final, Protocol

from execserver.client.calls import Caller
from execserver.client.errors import (
    CommandNotExecutable,
    CommandNotFound,
    ExecServerError,
)
from execserver.client.events import Output
from execserver.wire import methods
from execserver.wire.process import ExecEnvPolicy, ExecParams, TerminateParams
from execserver.wire.uri import uri_to_path

if TYPE_CHECKING:
    from execserver.client.fs import RemoteFileSystem
    from execserver.client.params import Timeout
    from execserver.client.process import RemoteProcess

__all__ = [
    "DEFAULT_SEARCH_PATH",
    "LAUNCHER_EXEC_FAILED",
    "LookupClient",
    "looks_like_launch_failure",
    "unlaunchable_program",
]

log = logging.getLogger(__name__)

# The sandbox launcher's exit status when its execvp failed (both servers).
LAUNCHER_EXEC_FAILED: Final = 101
# execvp's search path for a child whose environment has no PATH at all.
DEFAULT_SEARCH_PATH: Final = "/bin:/usr/bin"
# The executor's environment as a sandboxed child inherits it, unfiltered (the
# probe reads only PATH).
_PROBE_ENV_POLICY: Final = ExecEnvPolicy(
    inherit="all", ignore_default_excludes=False, exclude=[], set={}, include_only=[]
)
_PROBE_PROGRAM: Final = "/usr/bin/env"
_PROBE_TIMEOUT: Final = 10.0


class LookupClient(Caller, Protocol):
    """What the lookup needs from a client (``ExecServerClient`` is one)."""

    fs: RemoteFileSystem

    async def start(self, params: ExecParams, *, timeout: Timeout = ...) -> RemoteProcess: ...


def looks_like_launch_failure(exit_code: int | None, sandbox_denied: bool) -> bool:
    """The executor's answer for a sandboxed exec that failed: 101 and denied."""
    return exit_code == LAUNCHER_EXEC_FAILED and sandbox_denied


async def unlaunchable_program(
    client: LookupClient, params: ExecParams, program: str | None = None
) -> CommandNotFound | CommandNotExecutable | None:
    """The error a local spawn of ``params`` would have raised when its program
    cannot be found (or is a directory), looked up as the launcher does; None
    when the program is there (the failure was the sandbox's) or it cannot be told.

    ``program`` is the name to report (default ``argv[0]``)."""
    name = params.argv[0]
    shown = program if program is not None else name
    cwd = uri_to_path(params.cwd)
    fs = client.fs.with_sandbox(params.sandbox)
    if "/" in name:
        target = posixpath.normpath(posixpath.join(cwd, name))
        try:
            meta = await fs.get_metadata(target)
        except (FileNotFoundError, NotADirectoryError):
            return CommandNotFound(shown, "No such file or directory (os error 2)")
        except (OSError, ExecServerError):
            return None
        if meta.is_directory:
            return CommandNotExecutable(shown, "Permission denied (os error 13)")
        return None
    search_path = await _child_search_path(client, params)
    if search_path is None:
        return None
    for entry in search_path.split(":"):
        candidate = posixpath.normpath(posixpath.join(cwd, entry or ".", name))
        try:
            meta = await fs.get_metadata(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except (OSError, ExecServerError):
            return None  # hidden or unreadable: the sandbox's doing, not a missing program
        if not meta.is_directory:
            return None
    return CommandNotFound(shown, f"not found in PATH {search_path!r}")


async def _child_search_path(client: LookupClient, params: ExecParams) -> str | None:
    """The PATH the launcher searches: the request's own (the ``env`` overlay wins
    over the policy's ``set``), else the executor's, else execvp's default."""
    if "PATH" in params.env:
        return params.env["PATH"]
    if params.env_policy is not None and "PATH" in params.env_policy.set:
        return params.env_policy.set["PATH"]
    # Inherited or absent: either way the executor's own PATH is searched.
    environment = await _executor_environment(client, params)
    if environment is None:
        return None
    return environment.get("PATH", DEFAULT_SEARCH_PATH)


async def _executor_environment(client: LookupClient, params: ExecParams) -> dict[str, str] | None:
    """The executor's environment as seen by a child under the same sandbox and
    cwd (``/usr/bin/env``); None when the probe itself does not run."""
    probe = ExecParams(
        process_id=f"lookup-{uuid.uuid4().hex}",
        argv=[_PROBE_PROGRAM, "-0"],
        cwd=params.cwd,
        env={},
        tty=False,
        pipe_stdin=False,
        arg0=None,
        env_policy=_PROBE_ENV_POLICY,
        sandbox=params.sandbox,
    )
    chunks: list[bytes] = []
    try:
        proc = await client.start(probe)
    except (ExecServerError, OSError) as exc:
        log.debug("program lookup probe did not start: %s", exc)
        return None
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT):
            chunks.extend(
                [
                    event.data
                    async for event in proc
                    if isinstance(event, Output) and event.stream == "stdout"
                ]
            )
            status = await proc.wait()
    except (TimeoutError, ExecServerError) as exc:
        log.debug("program lookup probe failed: %s", exc)
        with contextlib.suppress(ExecServerError, TimeoutError):
            async with asyncio.timeout(_PROBE_TIMEOUT):
                await client.call(
                    methods.PROCESS_TERMINATE, TerminateParams(process_id=probe.process_id)
                )
        return None
    if status.exit_code != 0:
        return None
    environment: dict[str, str] = {}
    for item in b"".join(chunks).split(b"\0"):
        key, sep, value = item.decode("utf-8", "surrogateescape").partition("=")
        if sep:
            environment[key] = value
    return environment
