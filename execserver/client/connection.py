"""ExecServerClient: handshake, typed calls, notification routing, session state.

Lifecycle::

    connected --transport lost--> recovering --resume ok + catch-up--> connected
                                       |
                                       +--deadline / not retryable--> failed
    any state --close()--> closed

While recovering, every call waits for the one shared recovery attempt and
then runs on the new connection. Of the calls that were in flight when the
transport died, ``process/read`` is sent again (once), and so is any call the
server did not execute: one it left unanswered when it closed with 1012 (a
take-over), and one of which nothing was sent (the socket had closed before the
reader saw it). Everything else fails with ``ExecServerTransportClosed``,
because a start, write or fs change may or may not have happened. The resume
loop itself (retries, deadline) is ``execserver.client.recovery``; the client
keeps the connection and the calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, Final, Literal, Self, Unpack, overload

import msgspec

from execserver.aio.tasks import TaskSet
from execserver.client.calls import TypedCalls
from execserver.client.defaults import (
    CONNECT_TIMEOUT,
    DEFAULT_CLIENT_NAME,
    INITIALIZE_TIMEOUT,
    REQUEST_TIMEOUT,
)
from execserver.client.env_defaults import env_policy_for
from execserver.client.errors import (
    ExecServerConnectError,
    ExecServerError,
    ExecServerRpcError,
    ExecServerSessionMismatch,
    ExecServerTimeout,
    ExecServerTransportClosed,
    ExecServerUnavailable,
    SessionAttached,
)
from execserver.client.fs import RemoteFileSystem
from execserver.client.http import RemoteHttp
from execserver.client.params import (
    DEFAULT_TIMEOUT,
    DefaultTimeout,
    Timeout,
    decode_result,
    result_type_of,
)
from execserver.client.process import RemoteProcess
from execserver.client.recovery import RECOVERY_DEADLINE, SESSION_TTL, SessionRecovery
from execserver.client.router import ProcessRouter
from execserver.client.rpc import NOT_HANDLED, RpcConnection
from execserver.client.sandbox import NULL_SANDBOX, sandbox_param, to_uri
from execserver.client.transport import (
    QUIET,
    QuietStderr,
    StdioTransport,
    Transport,
    WebSocketTransport,
)
from execserver.client.url import check_url
from execserver.wire import methods
from execserver.wire.base import Empty
from execserver.wire.lifecycle import (
    EnvironmentInfo,
    InitializeParams,
    InitializeResponse,
)
from execserver.wire.process import (
    ExecEnvPolicy,
    ExecParams,
    ReadParams,
    ReadResponse,
    WriteStatus,
)

if TYPE_CHECKING:
    # Running a command to completion (``run``) is imported when first used: a
    # short-lived client such as ``execserver patch`` never needs it.
    from execserver.client.commands import CompletedRemoteProcess
    from execserver.client.options import RunOptions

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_CLIENT_NAME",
    "DEFAULT_TIMEOUT",
    "INITIALIZE_TIMEOUT",
    "RECOVERY_DEADLINE",
    "REQUEST_TIMEOUT",
    "SESSION_TTL",
    "ClientState",
    "ExecServerClient",
    "OnExit",
    "Opener",
    "StateListener",
    "Timeout",
    "check_url",
]

log = logging.getLogger(__name__)

# A long-poll read may legitimately take waitMs; allow that plus this much.
READ_TIMEOUT_SLACK: Final = 10.0
CONNECT_RETRY_DELAY: Final = 0.05
CONNECT_RETRY_DELAY_MAX: Final = 1.0


# close(terminate=True): how long the terminates and the streams' ends may take.
CLOSE_TERMINATE_TIMEOUT: Final = 10.0

OnExit = Literal["terminate", "detach"]


class ClientState(enum.Enum):
    CONNECTED = "connected"
    RECOVERING = "recovering"
    FAILED = "failed"
    CLOSED = "closed"


Opener = Callable[[], Awaitable[Transport]]
# Told (state, reason) on every change of ClientState; called on the loop, must not block.
StateListener = Callable[["ClientState", "str | None"], None]


class ExecServerClient(TypedCalls):
    """A connection to one exec-server (ours or the reference), with session resume.

    Create it with :meth:`connect` (websocket URL) or :meth:`spawn` (a program
    speaking stdio); use it as an async context manager or call :meth:`close`.
    ``call(method, params)`` sends any request of the contract
    (``execserver.wire.contract``) and returns its typed result.
    """

    def __init__(
        self,
        opener: Opener,
        *,
        client_name: str = DEFAULT_CLIENT_NAME,
        auto_reconnect: bool = True,
        initialize_timeout: float | None = INITIALIZE_TIMEOUT,
        request_timeout: float | None = REQUEST_TIMEOUT,
        recovery_deadline: float = RECOVERY_DEADLINE,
        on_exit: OnExit = "terminate",
    ) -> None:
        if on_exit not in ("terminate", "detach"):
            raise ValueError(f"on_exit must be 'terminate' or 'detach', not {on_exit!r}")
        self._opener = opener
        self.on_exit: OnExit = on_exit
        self.client_name = client_name
        self.auto_reconnect = auto_reconnect
        self._initialize_timeout = initialize_timeout
        self._request_timeout = request_timeout
        # Keep resuming for this long after a loss (default: the server's session TTL).
        self.recovery_deadline = recovery_deadline
        # A refused connection during recovery ends it at once (set by ExecutorPool:
        # a pod that refuses connections no longer holds the session).
        self.give_up_when_refused = False
        # What calls raise once the client gave up (ExecutorPool: ReplicaUnavailable).
        self.unavailable_error: Callable[[str], ExecServerUnavailable] = ExecServerUnavailable
        self._state_listeners: list[StateListener] = []
        self._ids = itertools.count(1)
        self._conn: RpcConnection | None = None
        self._state = ClientState.CLOSED
        self._failure: str | None = None
        self._recovery = SessionRecovery(_Resumer(self))
        # What a call leaves running past its caller (a start being settled, a
        # shielded clean-up, see commands.py): it ends with the client.
        self.tasks = TaskSet("execserver-client", logger=log)
        self.processes = ProcessRouter()
        # Server->client requests (network/policyRequest) and notifications the
        # client does not route itself (network/policyDecision).
        self._request_handlers: dict[str, Callable[[msgspec.Raw], Awaitable[object]]] = {}
        self._listeners: dict[str, list[Callable[[msgspec.Raw], None]]] = {}
        self.session_id: str = ""
        # The websocket URL (None for stdio and custom transports).
        self.url: str | None = None
        self.environment_info: EnvironmentInfo | None = None
        self.reconnects = 0
        self.fs = RemoteFileSystem(self)
        self.http = RemoteHttp(self)

    # -- construction --------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        token: str | Callable[[], str | None] | None = None,
        client_name: str = DEFAULT_CLIENT_NAME,
        resume_session_id: str | None = None,
        auto_reconnect: bool = True,
        connect_timeout: float | None = CONNECT_TIMEOUT,
        initialize_timeout: float | None = INITIALIZE_TIMEOUT,
        request_timeout: float | None = REQUEST_TIMEOUT,
        recovery_deadline: float = RECOVERY_DEADLINE,
        wait: float = 0.0,
        on_exit: OnExit = "terminate",
    ) -> ExecServerClient:
        """Open a websocket to ``url`` (``ws://host:port``) and do the handshake.

        ``token`` goes in ``Authorization: Bearer``; a callable is asked again on
        every (re)connect (rotated token files, short-lived JWTs).
        ``resume_session_id`` attaches a detached session instead of creating one.
        ``wait``: keep retrying for up to this many seconds while nothing answers
        yet (a server still starting), and, when resuming, while the session is
        still attached to a connection that just closed (the server detaches it
        only once it has seen that connection end, which can come after our
        ``close()`` returned); a refusal (e.g. HTTP 401) is not retried.
        ``on_exit``: what leaving ``async with`` does to the processes this client
        started: ``"terminate"`` them (the default), or ``"detach"`` and leave
        them to a client that resumes the session.
        """
        check_url(url)

        async def opener() -> Transport:
            bearer = token() if callable(token) else token
            return await WebSocketTransport.connect(url, token=bearer, timeout=connect_timeout)

        client = cls(
            opener,
            client_name=client_name,
            auto_reconnect=auto_reconnect,
            initialize_timeout=initialize_timeout,
            request_timeout=request_timeout,
            recovery_deadline=recovery_deadline,
            on_exit=on_exit,
        )
        client.url = url
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        delay = CONNECT_RETRY_DELAY
        while True:
            try:
                await client._start(resume_session_id)
            except (ExecServerConnectError, ExecServerTimeout, SessionAttached) as exc:
                refused = isinstance(exc, ExecServerConnectError) and exc.status is not None
                if refused or loop.time() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, CONNECT_RETRY_DELAY_MAX)
                continue
            return client

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        client_name: str = DEFAULT_CLIENT_NAME,
        initialize_timeout: float | None = INITIALIZE_TIMEOUT,
        request_timeout: float | None = REQUEST_TIMEOUT,
        stderr: IO[Any] | int | QuietStderr | None = QUIET,
        on_exit: OnExit = "terminate",
    ) -> ExecServerClient:
        """Start ``argv`` (e.g. ``codex exec-server --listen stdio``) and speak stdio to it.

        The child lives as long as the client; there is no reconnect (a new child
        would be a new server). ``stderr``: the child's log stays out of ours by
        default (its last lines go into the error if it fails to start); pass
        ``None`` to let it through, or a file to keep it.
        """
        transports: list[StdioTransport] = []

        async def opener() -> Transport:
            transport = await StdioTransport.spawn(argv, env=env, stderr=stderr)
            transports.append(transport)
            return transport

        client = cls(
            opener,
            client_name=client_name,
            auto_reconnect=False,
            initialize_timeout=initialize_timeout,
            request_timeout=request_timeout,
            on_exit=on_exit,
        )
        try:
            await client._start(None)
        except (ExecServerTransportClosed, ExecServerTimeout) as exc:
            said = await transports[-1].stderr_tail() if transports else ""
            if not said:
                raise
            raise ExecServerConnectError(
                f"the stdio server {argv[0]!r} ended during the handshake ({exc}); "
                f"its stderr ends with:\n{said}"
            ) from exc
        return client

    @classmethod
    async def from_opener(
        cls,
        opener: Opener,
        *,
        resume_session_id: str | None = None,
        **options: Any,
    ) -> Self:
        """Connect over any transport ``opener`` returns (called again to reconnect).
        ``options`` are the constructor's keywords (client_name, auto_reconnect, ...)."""
        client = cls(opener, **options)
        try:
            await client._start(resume_session_id)
        except BaseException:
            await client.close()
            raise
        return client

    async def _start(self, resume_session_id: str | None) -> None:
        conn, init = await self._open(resume_session_id)
        self._conn = conn
        self.session_id = init.session_id
        self.environment_info = init.environment_info
        self._set_state(ClientState.CONNECTED)

    async def _open(
        self, resume_session_id: str | None
    ) -> tuple[RpcConnection, InitializeResponse]:
        transport = await self._opener()
        conn = RpcConnection(
            transport,
            ids=self._ids,
            on_notification=self._on_notification,
            on_lost=self._on_lost,
            on_request=self._on_server_request,
        )
        conn.start()
        try:
            try:
                raw = await conn.request(
                    methods.INITIALIZE,
                    InitializeParams(
                        client_name=self.client_name, resume_session_id=resume_session_id
                    ),
                    timeout=self._initialize_timeout,
                )
            except ExecServerTimeout as exc:
                raise ExecServerTimeout("initialize", "timed out waiting for initialize") from exc
            init = decode_result(raw, InitializeResponse)
            if resume_session_id is not None and init.session_id != resume_session_id:
                raise ExecServerSessionMismatch(
                    f"exec-server initialized an unexpected session {init.session_id!r} "
                    f"(asked to resume {resume_session_id!r})"
                )
            await conn.notify(methods.INITIALIZED, {})
        except BaseException:
            await conn.close()
            raise
        return conn, init

    async def __aenter__(self) -> ExecServerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Leaving ``async with`` closes the client and, unless it was made with
        ``on_exit="detach"``, terminates every process it started first."""
        await self.close(terminate=self.on_exit == "terminate")

    async def close(self, *, terminate: bool = False) -> None:
        """Close the connection.

        ``terminate=True``: first terminate every process this client started
        that is still running (``process/terminate``, bounded) and wait briefly
        for their ends, so nothing of this client's work outlives it.
        Otherwise the server keeps the session and its processes for a while
        (80 s on both servers), so another client may resume it with
        :attr:`session_id`. The protocol has no way to end a session itself.
        """
        if self._state is ClientState.CLOSED:
            return
        if terminate:
            await self.terminate_all()
        self._set_state(ClientState.CLOSED, "client closed")
        self._failure = "client closed"
        await self._recovery.aclose()
        self.processes.fail_all("exec-server client closed")
        if self._conn is not None:
            await self._conn.close()
        await self.tasks.aclose()

    async def terminate_all(self) -> int:
        """``process/terminate`` every process this client started that has not
        finished, then wait (bounded) for their streams to end. Returns how many
        were asked to stop; errors (a connection gone for good) are logged."""
        procs = self.processes.live()
        if not procs or self._state in (ClientState.FAILED, ClientState.CLOSED):
            return 0

        async def stop(proc: RemoteProcess) -> None:
            try:
                await proc.terminate()
            except ExecServerError as exc:
                log.warning("could not terminate remote process %s: %s", proc.process_id, exc)
                return
            with contextlib.suppress(ExecServerError):
                await proc.wait_closed()

        try:
            async with asyncio.timeout(CLOSE_TERMINATE_TIMEOUT):
                await asyncio.gather(*(stop(proc) for proc in procs))
        except TimeoutError:
            log.warning("terminating %d remote processes did not finish in time", len(procs))
        return len(procs)

    # -- state ---------------------------------------------------------------

    @property
    def state(self) -> ClientState:
        return self._state

    @property
    def connection(self) -> RpcConnection | None:
        """The current JSON-RPC connection (for diagnostics and tests)."""
        return self._conn

    async def _ready(self) -> RpcConnection:
        while True:
            if self._state is ClientState.CLOSED:
                raise ExecServerUnavailable("exec-server client is closed")
            if self._state is ClientState.FAILED:
                raise self.unavailable_error(f"exec-server connection failed: {self._failure}")
            if self._state is ClientState.RECOVERING:
                if not self._recovery.running:
                    # Defence: no attempt will change the state, so waiting would spin.
                    raise self.unavailable_error("exec-server session recovery stopped")
                await self._recovery.wait()
                continue
            conn = self._conn
            assert conn is not None
            if conn.is_lost:
                # The reader has not reported the loss yet; it will, and the
                # state changes then. Wait for that instead of failing the call.
                await conn.wait_reader()
                if self._conn is conn and self._state is ClientState.CONNECTED:
                    # Reported, but not to us (e.g. closing): nothing will change.
                    raise ExecServerTransportClosed(
                        f"JSON-RPC transport closed: {conn.lost_reason}"
                    )
                continue
            return conn

    def _on_lost(self, conn: RpcConnection, reason: str) -> None:
        if conn is not self._conn or self._state is not ClientState.CONNECTED:
            return
        log.info("exec-server connection lost: %s", reason)
        if self.auto_reconnect and self.session_id:
            self._set_state(ClientState.RECOVERING, reason)
            self._recovery.start(reason)
        else:
            self._fail(f"JSON-RPC transport closed: {reason}")

    def _fail(self, message: str) -> None:
        self._failure = message
        self._set_state(ClientState.FAILED, message)
        self.processes.fail_all(message)

    def add_state_listener(self, listener: StateListener) -> None:
        """Be told ``(state, reason)`` on every change: RECOVERING (why the
        connection was lost), CONNECTED (resumed), FAILED (why it gave up),
        CLOSED. Called on the event loop; it must not block."""
        self._state_listeners.append(listener)

    def remove_state_listener(self, listener: StateListener) -> None:
        self._state_listeners.remove(listener)

    def _set_state(self, state: ClientState, reason: str | None = None) -> None:
        if state is self._state:
            return
        self._state = state
        for listener in list(self._state_listeners):
            try:
                listener(state, reason)
            except Exception:
                log.exception("exec-server state listener failed")

    # -- calls ---------------------------------------------------------------

    def _timeout_for(self, method: str, params: object, timeout: Timeout) -> float | None:
        if not isinstance(timeout, DefaultTimeout):
            return timeout
        if method == methods.PROCESS_READ and isinstance(params, ReadParams) and params.wait_ms:
            return params.wait_ms / 1000 + READ_TIMEOUT_SLACK
        return self._request_timeout

    async def call_any(
        self, method: str, params: object = None, *, timeout: Timeout = DEFAULT_TIMEOUT
    ) -> Any:
        """Send any request, also one outside the contract, and decode its result
        as the contract's result type (plain JSON values for an unknown method).
        Typed code uses :meth:`call`, which checks the params type as well."""
        seconds = self._timeout_for(method, params, timeout)
        conn = await self._ready()
        try:
            raw = await conn.request(method, params, timeout=seconds)
        except ExecServerTransportClosed as exc:
            # Safe to repeat: a read (it changes nothing on the server), or any call a
            # restarting server never executed (it closed with 1012; the next daemon
            # serves the resumed session).
            if not self.auto_reconnect or not (method == methods.PROCESS_READ or exc.unexecuted):
                raise
            conn = await self._ready()
            raw = await conn.request(method, params, timeout=seconds)
        return decode_result(raw, result_type_of(method))

    async def get_environment_info(self) -> EnvironmentInfo:
        return await self.call(methods.ENVIRONMENT_INFO, Empty())

    async def environment_status(self) -> str:
        result = await self.call(methods.ENVIRONMENT_STATUS, Empty())
        return result.status

    # -- processes -----------------------------------------------------------

    async def start_process(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        env_policy: ExecEnvPolicy | None = None,
        tty: bool = False,
        pipe_stdin: bool = False,
        arg0: str | None = None,
        sandbox: object = None,
        process_id: str | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT,
        inherit_env: bool = True,
    ) -> RemoteProcess:
        """``process/start``. The route for its events exists before the request is sent.

        Environment, as for :meth:`run`: the executor's own (names containing
        KEY, SECRET or TOKEN left out) with ``env`` on top; ``inherit_env=False``
        gives exactly ``env``; ``env_policy`` is sent as given. ``cwd`` defaults
        to the server's cwd; ``sandbox`` is a :class:`Sandbox` or a
        ``FileSystemSandboxContext``. :meth:`start` sends ready-made params as
        they are (there a missing ``envPolicy`` means exactly ``env``).
        """
        if cwd is None:
            if self.environment_info is None or self.environment_info.cwd is None:
                raise ValueError("cwd is required: the server did not report its cwd")
            cwd_uri = self.environment_info.cwd
        else:
            cwd_uri = to_uri(cwd)
        params = ExecParams(
            process_id=process_id or f"proc-{uuid.uuid4().hex}",
            argv=list(argv),
            cwd=cwd_uri,
            env=dict(env or {}),
            tty=tty,
            pipe_stdin=pipe_stdin,
            arg0=arg0,
            env_policy=env_policy_for(env_policy, inherit_env),
            sandbox=sandbox_param(sandbox),
        )
        return await self.start(params, timeout=timeout)

    async def start(
        self, params: ExecParams, *, timeout: Timeout = DEFAULT_TIMEOUT
    ) -> RemoteProcess:
        """``process/start`` from ready-made params (``sandbox`` must be raw JSON or null)."""
        if self._state in (ClientState.FAILED, ClientState.CLOSED):
            await self._ready()  # raises ExecServerUnavailable
        if not params.sandbox:
            params.sandbox = NULL_SANDBOX
        # Route first: events can arrive before the start response.
        proc = self.processes.open(self, params.process_id, tty=params.tty, argv=params.argv)
        try:
            result = await self.call(methods.PROCESS_START, params, timeout=timeout)
        except BaseException:
            self.processes.discard(proc)
            raise
        proc.mark_started(result.sandbox_type)
        return proc

    @overload
    async def run(
        self,
        command: str | Sequence[str],
        *,
        text: Literal[False] = False,
        **options: Unpack[RunOptions],
    ) -> CompletedRemoteProcess[bytes]: ...

    @overload
    async def run(
        self, command: str | Sequence[str], *, text: Literal[True], **options: Unpack[RunOptions]
    ) -> CompletedRemoteProcess[str]: ...

    async def run(
        self, command: str | Sequence[str], *, text: bool = False, **options: Unpack[RunOptions]
    ) -> CompletedRemoteProcess[bytes] | CompletedRemoteProcess[str]:
        """Run a command to completion and collect its output.

        ``command``: an argv list, or a string run by the executor's shell
        (``<shell> -c <string>``). ``cwd``: an absolute directory on the executor.

        Environment: the executor's own environment (``inherit_env=True``; names
        containing KEY, SECRET or TOKEN are left out, as codex does), with ``env``
        added on top. ``inherit_env=False`` gives exactly ``env``. ``env_policy``
        replaces the inherited part with a hand-made ``ExecEnvPolicy``.

        ``timeout`` (seconds) covers the whole command: when it expires the remote
        process is terminated and ``CommandTimeout`` (carrying the output so far)
        is raised. Cancelling the call terminates the remote process too.
        ``idle_timeout`` (seconds) ends it the same way when it prints nothing
        for that long, raising ``CommandIdleTimeout`` (a ``CommandTimeout``).
        ``check=True`` raises ``CommandFailed`` on a non-zero exit code.

        ``on_stdout`` / ``on_stderr`` are called on the event loop with each
        piece of output as it arrives, in order (``bytes``; ``str`` with
        ``text=True``); a tty's output goes to ``on_stdout``. They must not
        block; an exception from one terminates the command and is raised.

        ``stdin``: without a tty the protocol cannot close a pipe, so the bytes
        (at most 64 MiB) are written to a temporary file on the executor and the
        command runs as ``/bin/sh -c 'exec <file; rm file; exec "$@"'`` (a missing
        program then exits 127, as in a shell). With ``tty=True`` they are typed
        into the terminal followed by ^D (end of input); the terminal echoes them.

        ``tty=True``: one pseudo-terminal (24x80); the output is in ``.pty``.
        ``sandbox``: a :class:`Sandbox` (or a ``FileSystemSandboxContext``).
        ``text=True``: decode output as UTF-8, invalid bytes replaced with U+FFFD
        (and accept ``stdin`` as ``str``).

        Raises ``CommandNotFound`` / ``CommandNotExecutable`` for the program,
        ``FileNotFoundError`` / ``NotADirectoryError`` for the cwd.
        """
        from execserver.client.commands import run_command

        return await run_command(self, command, text=text, **options)

    async def read(
        self,
        process_id: str,
        *,
        after_seq: int | None = None,
        max_bytes: int | None = None,
        wait_ms: int | None = None,
    ) -> ReadResponse:
        return await self.read_params(
            ReadParams(
                process_id=process_id, after_seq=after_seq, max_bytes=max_bytes, wait_ms=wait_ms
            )
        )

    async def read_params(self, params: ReadParams) -> ReadResponse:
        return await self.call(methods.PROCESS_READ, params)

    async def write(
        self, process_id: str, data: bytes, *, write_id: str | None = None
    ) -> WriteStatus:
        proc = self.processes.get(process_id)
        if proc is not None:
            return await proc.write(data, write_id=write_id)
        return await RemoteProcess(self, process_id, tty=False).write(data, write_id=write_id)

    def process(self, process_id: str) -> RemoteProcess | None:
        """The live process with this id, if this client started it."""
        return self.processes.get(process_id)

    # -- notifications -------------------------------------------------------

    def _on_notification(self, method: str, params: msgspec.Raw) -> None:
        if self.processes.route(method, params):
            return
        if method in self._listeners:
            for listener in list(self._listeners[method]):
                listener(params)
        else:
            log.debug("ignoring notification %s", method)

    # -- server -> client requests ------------------------------------------

    def handle_server_request(
        self, method: str, handler: Callable[[msgspec.Raw], Awaitable[object]] | None
    ) -> None:
        """Answer the server's ``method`` requests (e.g. ``network/policyRequest``)
        with ``handler``'s result; a raised error is answered as a JSON-RPC error.
        ``None`` removes it (the request is then refused, which the server treats
        as a deny for policy requests)."""
        if handler is None:
            self._request_handlers.pop(method, None)
        else:
            self._request_handlers[method] = handler

    def add_notification_listener(
        self, method: str, listener: Callable[[msgspec.Raw], None]
    ) -> None:
        """Also see notifications the client does not route itself (e.g.
        ``network/policyDecision``); called from the reader, must not block."""
        self._listeners.setdefault(method, []).append(listener)

    async def _on_server_request(self, method: str, params: msgspec.Raw) -> object:
        handler = self._request_handlers.get(method)
        if handler is None:
            return NOT_HANDLED
        return await handler(params)


class _Resumer:
    """The client as its recovery sees it (``execserver.client.recovery.Resumable``),
    kept apart so these hooks are not part of the client's public API."""

    __slots__ = ("_client",)

    def __init__(self, client: ExecServerClient) -> None:
        self._client = client

    @property
    def session_id(self) -> str:
        return self._client.session_id

    @property
    def recovery_deadline(self) -> float:
        return self._client.recovery_deadline

    @property
    def give_up_when_refused(self) -> bool:
        return self._client.give_up_when_refused

    async def open_resumed(self) -> RpcConnection:
        conn, _ = await self._client._open(self._client.session_id)
        return conn

    async def adopt(self, conn: RpcConnection) -> None:
        client = self._client
        old, client._conn = client._conn, conn
        # Counted when the new connection is adopted, not after the catch-up: the
        # catch-up's reads can complete a waiting call before it returns.
        client.reconnects += 1
        if old is not None:
            await old.close()

    async def catch_up(self, conn: RpcConnection) -> None:
        client = self._client

        async def read(params: ReadParams) -> ReadResponse:
            raw = await conn.request(methods.PROCESS_READ, params, timeout=client._request_timeout)
            return decode_result(raw, ReadResponse)

        for proc in client.processes.live():
            try:
                await proc.catch_up(read, always=True)
            except ExecServerRpcError as exc:
                proc.fail(f"cannot recover process {proc.process_id}: {exc}")

    def resumed(self) -> None:
        self._client._set_state(ClientState.CONNECTED)

    def give_up(self, message: str) -> None:
        self._client._fail(message)
