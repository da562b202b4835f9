"""``ExecServerClient.run``: one command from start to its last byte, the way
``subprocess.run`` (or an SDK's ``commands.run``) behaves.

What the protocol gives and what this module adds on top:

* ``process/start`` without ``envPolicy`` gives the child exactly the ``env``
  map, usually nothing. ``run`` (like ``start_process``) sends an ``envPolicy``
  that inherits the executor's environment (names containing KEY, SECRET or
  TOKEN are left out, as codex does) and overlays ``env``.
* ``process/terminate`` is the only way to stop a child; ``run`` sends it when
  its ``timeout`` expires, when the caller is cancelled, and when anything else
  ends the wait early, so no remote process outlives the call.
* A pipe's stdin can never be closed through the protocol, so ``stdin=`` bytes
  for a non-tty command are staged as a file on the executor and redirected
  (``/bin/sh`` opens it, deletes it, then execs the command). Under a tty the
  bytes are typed into the terminal followed by end-of-input (^D).
* A failed spawn comes back as a generic -32603 with the OS error text, and
  "program not found" and "cwd not found" have the same text. ``run`` tells
  them apart by asking the executor about the cwd, and raises
  ``CommandNotFound``, ``CommandNotExecutable``, ``FileNotFoundError`` or
  ``NotADirectoryError``.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import datetime
import errno
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AnyStr, Final, Generic, Protocol

from execserver.aio.tasks import TaskSet
from execserver.client.calls import Caller
from execserver.client.env_defaults import INHERIT_ENV_POLICY, env_policy_for
from execserver.client.errors import (
    CommandFailed,
    CommandIdleTimeout,
    CommandNotExecutable,
    CommandNotFound,
    CommandTimeout,
    ExecServerError,
    ExecServerUnavailable,
    InternalError,
    WorkingDirectoryNotADirectory,
    WorkingDirectoryNotFound,
)
from execserver.client.events import Output, ProcessEvent
from execserver.client.limits import STDIN_STAGING_LIMIT
from execserver.client.options import OutputCallback
from execserver.client.process import RemoteProcess
from execserver.client.program_lookup import looks_like_launch_failure, unlaunchable_program
from execserver.client.sandbox import sandbox_param, to_uri
from execserver.wire import methods
from execserver.wire.process import (
    ExecEnvPolicy,
    ExecParams,
    TerminateParams,
)
from execserver.wire.uri import uri_to_path

if TYPE_CHECKING:
    from execserver.client.fs import RemoteFileSystem
    from execserver.client.params import Timeout
    from execserver.wire.lifecycle import EnvironmentInfo

__all__ = [
    "INHERIT_ENV_POLICY",
    "STDIN_STAGING_LIMIT",
    "CommandClient",
    "CompletedRemoteProcess",
    "Launched",
    "command_argv",
    "launch",
    "remote_temp_path",
    "run_command",
    "terminate",
]


class CommandClient(Caller, Protocol):
    """What running a command needs from a client (``ExecServerClient`` is one)."""

    environment_info: EnvironmentInfo | None
    fs: RemoteFileSystem
    # Owns the work a call leaves running (a start being settled, a shielded
    # clean-up); closed with the client.
    tasks: TaskSet

    async def start(self, params: ExecParams, *, timeout: Timeout = ...) -> RemoteProcess: ...


__all__ = [
    "INHERIT_ENV_POLICY",
    "STDIN_STAGING_LIMIT",
    "CompletedRemoteProcess",
    "Launched",
    "OutputCallback",
    "launch",
    "remote_temp_path",
    "run_command",
    "spawn_error",
    "terminate",
]


log = logging.getLogger(__name__)

# Bounds for the clean-up requests sent after a timeout or cancellation.
TERMINATE_TIMEOUT: Final = 5.0
START_SETTLE_TIMEOUT: Final = 10.0
# After process/terminate the server sends exited + closed at once; wait at most this.
DRAIN_TIMEOUT: Final = 2.0
END_OF_INPUT: Final = b"\x04"  # ^D: the terminal's EOF character
STAGED_STDIN_SHELL: Final = "/bin/sh"
# $0 is the program's name (the shell's messages start with it), $1 the staged
# file, the rest the command. Deleting the file once it is open leaves nothing
# behind even if the client goes away.
STAGED_STDIN_SCRIPT: Final = 'exec <"$1" || exit 125\nrm -f -- "$1" 2>/dev/null\nshift\nexec "$@"'

_OS_ERROR = re.compile(r"\(os error (\d+)\)")


@dataclass(frozen=True)
class CompletedRemoteProcess(Generic[AnyStr]):
    """What :meth:`ExecServerClient.run` collected. ``stdout``/``stderr`` are empty
    for a tty command, whose output arrives on the one ``pty`` stream.

    ``started_at`` is when ``process/start`` was sent (UTC), ``duration`` the
    seconds from then until the process's stream closed. ``pid`` is always
    ``None``: neither server puts the child's pid on the wire (``process/start``
    answers with the client's own process id and the sandbox type only)."""

    exit_code: int
    sandbox_denied: bool
    stdout: AnyStr
    stderr: AnyStr
    pty: AnyStr
    duration: float = 0.0
    started_at: datetime.datetime | None = None
    pid: int | None = None

    @property
    def returncode(self) -> int:
        """Same as ``exit_code`` (the ``subprocess`` name)."""
        return self.exit_code

    @property
    def output(self) -> AnyStr:
        """``pty`` for a tty command, else ``stdout``."""
        return self.pty or self.stdout


class _Collected:
    """The output so far, and the callbacks told each piece of it as it arrives.

    ``pty`` output goes to ``on_stdout`` (a terminal has one stream). With
    ``text`` the callbacks get ``str`` from an incremental decoder per stream,
    so a character split across two chunks is not replaced.
    """

    def __init__(
        self,
        *,
        text: bool = False,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> None:
        self.streams: dict[str, list[bytes]] = {"stdout": [], "stderr": [], "pty": []}
        self._text = text
        self._callbacks = {"stdout": on_stdout, "stderr": on_stderr, "pty": on_stdout}
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in self.streams
        }

    def add(self, event: object) -> None:
        if isinstance(event, Output):
            self.streams[event.stream].append(event.data)
            self._tell(event.stream, event.data, final=False)

    def add_quietly(self, event: object) -> None:
        """``add`` for output drained after a timeout or cancellation: a failing
        callback must not hide why the command ended."""
        try:
            self.add(event)
        except Exception:
            log.exception("output callback failed")

    def flush(self) -> None:
        """Hand the decoders' held-back bytes (an incomplete last character) over."""
        if self._text:
            for name in self.streams:
                self._tell(name, b"", final=True)

    def _tell(self, stream: str, data: bytes, *, final: bool) -> None:
        callback = self._callbacks[stream]
        if callback is None:
            return
        if not self._text:
            if data:
                callback(data)
            return
        piece = self._decoders[stream].decode(data, final)
        if piece:
            callback(piece)

    def raw(self, stream: str) -> bytes:
        return b"".join(self.streams[stream])

    def get(self, stream: str, text: bool) -> bytes | str:
        data = self.raw(stream)
        return data.decode("utf-8", "replace") if text else data


def command_argv(client: CommandClient, command: str | Sequence[str]) -> list[str]:
    """A list is the argv itself; a string runs through the executor's shell."""
    if isinstance(command, str):
        info = client.environment_info
        shell = info.shell.path if info is not None and info.shell.path else "/bin/sh"
        return [shell, "-c", command]
    argv = [os.fspath(part) for part in command]
    if not argv:
        raise ValueError("the command must not be empty")
    return argv


def _native(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return uri_to_path(text) if text.startswith("file:") else text


def _stdin_bytes(stdin: bytes | str | None) -> bytes | None:
    if stdin is None:
        return None
    data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
    if len(data) > STDIN_STAGING_LIMIT:
        raise ValueError(
            f"stdin= is limited to {STDIN_STAGING_LIMIT} bytes (it is staged as a file on the "
            "executor); write larger input with client.fs and redirect it"
        )
    return data


@dataclass
class Launched:
    """A started command: its process, and the staged stdin file to remove afterwards."""

    process: RemoteProcess
    staged_stdin: str | None
    # What was sent (argv is the staging shell's when stdin was staged).
    params: ExecParams | None = None

    async def cleanup(self, client: CommandClient) -> None:
        if self.staged_stdin is not None:
            path, self.staged_stdin = self.staged_stdin, None
            await _remove_quietly(client, path)


async def launch(
    client: CommandClient,
    argv: list[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    env_policy: ExecEnvPolicy | None = INHERIT_ENV_POLICY,
    tty: bool = False,
    staged_stdin: bytes | None = None,
    sandbox: object = None,
    arg0: str | None = None,
    process_id: str | None = None,
) -> Launched:
    """Start ``argv`` with spawn failures turned into ``CommandNotFound`` & co.

    ``staged_stdin`` (non-tty only) is written to a file on the executor that
    becomes the command's stdin. If the caller is cancelled while the start is
    in flight, the process is terminated once the start has settled.
    """
    cwd_native = _native(cwd)
    if not cwd_native.startswith("/"):
        raise ValueError(f"cwd must be an absolute path on the executor, got {cwd_native!r}")
    if tty:
        # Both servers start a pty child even when its cwd is missing (it then
        # runs in the server's cwd); refuse that here.
        await _require_directory(client, cwd_native)
    command = argv
    staged: str | None = None
    if staged_stdin is not None:
        if tty:
            raise ValueError("staged stdin is for pipes; type into a tty instead")
        staged = await _stage_stdin(client, staged_stdin)
        command = [STAGED_STDIN_SHELL, "-c", STAGED_STDIN_SCRIPT, argv[0], staged, *argv]
    params = ExecParams(
        process_id=process_id or f"run-{uuid.uuid4().hex}",
        argv=command,
        cwd=to_uri(cwd),
        env=dict(env or {}),
        tty=tty,
        pipe_stdin=False,
        arg0=arg0,
        env_policy=env_policy,
        sandbox=sandbox_param(sandbox),
    )
    if client.tasks.closed:
        raise ExecServerUnavailable("exec-server client is closed")
    # A task of the client's, not of this call: a cancelled caller leaves it to
    # settle, so a child it spawned can still be terminated.
    start = client.tasks.spawn(
        client.start(params, timeout=None), name=f"start {params.process_id}", log_failures=False
    )
    try:
        try:
            proc = await asyncio.shield(start)
        except InternalError as exc:
            raise await spawn_error(client, exc, argv[0], cwd_native) from exc
        except BaseException:
            await _shielded(client, _settle_and_terminate(client, start), "settle and terminate")
            raise
    except BaseException:
        if staged is not None:
            await _remove_quietly(client, staged)
        raise
    return Launched(proc, staged, params)


async def terminate(
    client: CommandClient,
    proc: RemoteProcess,
    on_event: Callable[[ProcessEvent], None] | None = None,
) -> None:
    """``process/terminate`` unless it already ended, then hand what it printed
    until ``Closed`` to ``on_event`` (bounded). Shielded: a second cancellation
    stops the waiting, not the clean-up."""
    await _shielded(client, _terminate_and_drain(client, proc, on_event), "terminate")


async def _shielded(client: CommandClient, work: Coroutine[Any, Any, None], name: str) -> None:
    """Run ``work`` to its end even if the caller is cancelled meanwhile (a second
    cancellation stops the waiting, not the work). It is a task of the client's
    set, so it lives no longer than the client."""
    if client.tasks.closed:
        await work  # a closed client fails every request at once: nothing to protect
        return
    await asyncio.shield(client.tasks.spawn(work, name=name, log_failures=False))


async def _settle_and_terminate(
    client: CommandClient, start: asyncio.Future[RemoteProcess]
) -> None:
    if not start.done():
        # A start still in flight may yet spawn the child; terminate after it.
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(start), START_SETTLE_TIMEOUT)
    if start.done() and not start.cancelled() and start.exception() is None:
        await _terminate_and_drain(client, start.result(), None)


async def _terminate_and_drain(
    client: CommandClient,
    proc: RemoteProcess,
    on_event: Callable[[ProcessEvent], None] | None,
) -> None:
    if proc.finished:
        return
    try:
        # Bounded as a whole: while the client is reconnecting, call() first
        # waits for the recovery, which may take far longer.
        async with asyncio.timeout(TERMINATE_TIMEOUT):
            await client.call(
                methods.PROCESS_TERMINATE, TerminateParams(process_id=proc.process_id)
            )
    except (ExecServerError, TimeoutError) as exc:
        # The server ends a detached session's processes when the session expires.
        log.warning("could not terminate remote process %s: %s", proc.process_id, exc)
        return
    with contextlib.suppress(TimeoutError, ExecServerError):
        async with asyncio.timeout(DRAIN_TIMEOUT):
            async for event in proc:
                if on_event is not None:
                    on_event(event)


async def run_command(
    client: CommandClient,
    command: str | Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    # The defaults of ``run``'s options (execserver.client.options.RunOptions).
    env: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    env_policy: ExecEnvPolicy | None = None,
    timeout: float | None = None,
    check: bool = False,
    stdin: bytes | str | None = None,
    tty: bool = False,
    sandbox: object = None,
    text: bool = False,
    arg0: str | None = None,
    process_id: str | None = None,
    idle_timeout: float | None = None,
    on_stdout: OutputCallback | None = None,
    on_stderr: OutputCallback | None = None,
) -> CompletedRemoteProcess[bytes] | CompletedRemoteProcess[str]:
    argv = command_argv(client, command)
    data = _stdin_bytes(stdin)
    policy = env_policy_for(env_policy, inherit_env)
    if idle_timeout is not None and idle_timeout <= 0:
        raise ValueError(f"idle_timeout must be positive, got {idle_timeout!r}")
    out = _Collected(text=text, on_stdout=on_stdout, on_stderr=on_stderr)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    launched: Launched | None = None
    finished = False
    started_at = datetime.datetime.now(datetime.UTC)
    started = time.monotonic()
    # The idle scope is rescheduled on every event; None until the command runs.
    idle: asyncio.Timeout | None = None
    try:
        async with asyncio.timeout_at(deadline) as scope:
            launched = await launch(
                client,
                argv,
                cwd=cwd,
                env=env,
                env_policy=policy,
                tty=tty,
                staged_stdin=None if tty else data,
                sandbox=sandbox,
                arg0=arg0,
                process_id=process_id,
            )
            proc = launched.process
            async with asyncio.timeout(None) as idle:
                if idle_timeout is not None:
                    idle.reschedule(loop.time() + idle_timeout)
                if data is not None and tty:
                    await _type_into_terminal(proc, data)
                async for event in proc:
                    out.add(event)
                    if idle_timeout is not None:
                        idle.reschedule(loop.time() + idle_timeout)
            status = await proc.wait()
            finished = True
            duration = time.monotonic() - started
    except TimeoutError:
        if launched is not None:
            await terminate(client, launched.process, out.add_quietly)
        with contextlib.suppress(Exception):
            out.flush()
        so_far = (out.get("stdout", text), out.get("stderr", text), out.get("pty", text))
        if idle is not None and idle.expired():
            assert idle_timeout is not None
            raise CommandIdleTimeout(argv, idle_timeout, *so_far) from None
        if not scope.expired():
            raise
        assert timeout is not None
        raise CommandTimeout(argv, timeout, *so_far) from None
    except BaseException:
        # Cancelled, connection lost, interrupted, a callback failed: the remote
        # command must not outlive this call.
        if launched is not None and not finished:
            await terminate(client, launched.process, out.add_quietly)
        raise
    finally:
        if launched is not None:
            await launched.cleanup(client)
    out.flush()
    if looks_like_launch_failure(status.exit_code, status.sandbox_denied):
        assert launched is not None and launched.params is not None
        if launched.params.argv == argv:  # not the stdin staging shell
            # The executor flags any failed exec under a sandbox as a denial,
            # a missing program included; tell that case apart.
            missing = await unlaunchable_program(client, launched.params)
            if missing is not None:
                raise missing
    result: CompletedRemoteProcess[bytes] | CompletedRemoteProcess[str]
    if text:
        result = CompletedRemoteProcess(
            status.exit_code,
            status.sandbox_denied,
            out.raw("stdout").decode("utf-8", "replace"),
            out.raw("stderr").decode("utf-8", "replace"),
            out.raw("pty").decode("utf-8", "replace"),
            duration=duration,
            started_at=started_at,
        )
    else:
        result = CompletedRemoteProcess(
            status.exit_code,
            status.sandbox_denied,
            out.raw("stdout"),
            out.raw("stderr"),
            out.raw("pty"),
            duration=duration,
            started_at=started_at,
        )
    if check and result.exit_code != 0:
        raise CommandFailed(argv, result.exit_code, result.stdout, result.stderr, result.pty)
    return result


async def _type_into_terminal(proc: RemoteProcess, data: bytes) -> None:
    # In canonical mode ^D ends the input only at the start of a line; after a
    # partial line it just hands that line over, so a second one is needed.
    eof = END_OF_INPUT if not data or data.endswith(b"\n") else END_OF_INPUT * 2
    await proc.write(data + eof)


def remote_temp_path(client: CommandClient, prefix: str) -> str:
    """A fresh file name in the executor's temporary directory."""
    info = client.environment_info
    tmp = uri_to_path(info.temp_dir) if info is not None and info.temp_dir else "/tmp"
    return f"{tmp.rstrip('/')}/{prefix}-{uuid.uuid4().hex}"


async def _stage_stdin(client: CommandClient, data: bytes) -> str:
    path = remote_temp_path(client, "execserver-stdin")
    await client.fs.write_file(path, data)
    return path


async def _remove_quietly(client: CommandClient, path: str) -> None:
    with contextlib.suppress(ExecServerError, OSError):
        await _shielded(client, client.fs.remove(path, recursive=False), "remove staged stdin")


async def _require_directory(client: CommandClient, cwd: str) -> None:
    problem = await _cwd_problem(client, cwd)
    if problem is not None:
        raise problem


async def _cwd_problem(client: CommandClient, cwd: str) -> OSError | None:
    try:
        meta = await client.fs.get_metadata(cwd)
    except FileNotFoundError:
        return WorkingDirectoryNotFound(cwd)
    except (OSError, ExecServerError):
        return None
    if not meta.is_directory:
        return WorkingDirectoryNotADirectory(cwd)
    return None


async def spawn_error(
    client: CommandClient, exc: InternalError, program: str, cwd: str
) -> BaseException:
    """Turn a -32603 from ``process/start`` into the exception a local spawn would raise.

    Texts (identical on both servers): non-tty ``<strerror> (os error N)`` for
    the program *and* the cwd; tty ``Unable to spawn <prog> because:\\n...`` when
    the program is not on the PATH.
    """
    message = exc.message
    if message.startswith("Unable to spawn "):
        return CommandNotFound(program, message.partition("because:")[2].strip() or message)
    match = _OS_ERROR.search(message)
    if match is None:
        return exc
    code = int(match.group(1))
    if code not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
        return exc
    problem = await _cwd_problem(client, cwd)
    if problem is not None:
        return problem
    detail = message.removesuffix(match.group(0)).strip() or os.strerror(code)
    if code == errno.EACCES:
        return CommandNotExecutable(program, detail)
    return CommandNotFound(program, detail)
