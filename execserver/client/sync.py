"""A blocking facade over the async client, for scripts and notebooks.

    from execserver.client import sync

    with sync.connect("ws://127.0.0.1:8765") as client:
        print(client.run(["uname", "-a"], cwd="/tmp", text=True).stdout)
        client.fs.write_file("/tmp/notes.txt", b"hello\\n")

The names are those of the async client. Every call runs on one background
event loop thread shared by all sync clients of the process (started on first
use), so it also works inside a notebook whose own loop is already running.
A ^C (``KeyboardInterrupt``) while waiting cancels the call, which for ``run``
terminates the remote command, and is then re-raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Literal, TypeVar, Unpack, cast, overload

import msgspec

from execserver.aio.tasks import TaskSet
from execserver.client.calls import Caller
from execserver.client.commands import CompletedRemoteProcess
from execserver.client.connection import ClientState, OnExit, Opener, StateListener
from execserver.client.connection import ExecServerClient as AsyncClient
from execserver.client.errors import ExecServerUnavailable
from execserver.client.events import ExitStatus, ProcessEvent
from execserver.client.expect import ExpectMatch, Pattern, wants_text
from execserver.client.fs import RemoteFileHandle, RemoteFileSystem, RemotePath
from execserver.client.http import HttpResponse, RemoteHttp
from execserver.client.options import RunOptions
from execserver.client.process import RemoteProcess
from execserver.client.rpc import RpcConnection
from execserver.client.transfer import TransferSummary
from execserver.wire.fs import DirectoryEntry, FileMetadata, WalkOutcome
from execserver.wire.lifecycle import EnvironmentInfo
from execserver.wire.process import ExecParams, ReadParams, ReadResponse, WriteStatus

T = TypeVar("T")

# How long a ^C waits for the cancelled call to clean up (terminate the remote
# command) before it is re-raised anyway.
CANCEL_CLEANUP_TIMEOUT = 15.0
SIGNAL_CHECK_INTERVAL = 0.1

__all__ = [
    "ExecServerClient",
    "SyncFileSystem",
    "SyncHttp",
    "SyncRemoteFileHandle",
    "SyncRemotePath",
    "SyncRemoteProcess",
    "connect",
    "serve_local",
]


class _LoopThread:
    """One event loop in a daemon thread; coroutines are submitted to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        # The calls running on the loop: each is awaited by the thread that
        # submitted it, and the set lives as long as the loop.
        self._calls = TaskSet("execserver-sync")

    def loop(self) -> asyncio.AbstractEventLoop:
        return self._running()[0]

    def _running(self) -> tuple[asyncio.AbstractEventLoop, TaskSet]:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=serve, name="execserver-sync", daemon=True).start()
                ready.wait()
                self._loop = loop
                self._calls = TaskSet("execserver-sync")
            return self._loop, self._calls

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            loop, calls = self._running()
            ctrl_c = _CtrlCWhileWaiting()
        except BaseException:
            coro.close()  # never submitted: no "was never awaited" warning
            raise
        with ctrl_c:
            return self._call(loop, calls, coro, ctrl_c)

    def _call(
        self,
        loop: asyncio.AbstractEventLoop,
        calls: TaskSet,
        coro: Coroutine[Any, Any, T],
        ctrl_c: _CtrlCWhileWaiting,
    ) -> T:
        done = threading.Event()
        tasks: list[asyncio.Task[T]] = []

        def start() -> None:
            task = calls.spawn(coro, name="call", log_failures=False)
            task.add_done_callback(lambda _: done.set())
            tasks.append(task)

        loop.call_soon_threadsafe(start)
        try:
            # Short slices: a blocking wait would delay ^C until the call ends
            # (the main thread runs signal handlers between bytecodes).
            while not done.wait(SIGNAL_CHECK_INTERVAL):
                if ctrl_c.pressed:
                    break
        except KeyboardInterrupt:
            # A SIGINT handler of the program's own raised (ours only counts).
            # The interrupt may have landed inside done.wait()'s own locking,
            # so the clean-up waits on a fresh event.
            _cancel_and_wait(loop, tasks, ctrl_c)
            raise
        if not done.is_set():
            _cancel_and_wait(loop, tasks, ctrl_c)
            raise KeyboardInterrupt
        if ctrl_c.pressed:
            # The ^C came after the call had ended: it still stops the program.
            raise KeyboardInterrupt
        return tasks[0].result()


class _CtrlCWhileWaiting:
    """While the main thread waits for a call, a ^C is only counted, and the
    waiting loop acts on it.

    Python's own SIGINT handler raises ``KeyboardInterrupt`` at whatever bytecode
    the main thread runs next, and while it waits that may be code where a raise
    is lost: a finalizer or a gc callback the collector runs on this thread
    (``Exception ignored in ...``), or ``threading.Condition.wait`` between its
    unlock and relock (the raise then turns into ``RuntimeError``). A handler
    that only counts loses nothing. Installed only on the main thread and only
    over Python's default handler: a program's own handler is left alone.
    """

    __slots__ = ("_count", "_installed", "_previous")

    def __init__(self) -> None:
        self._count = 0
        self._installed = False
        self._previous: Any = None

    @property
    def pressed(self) -> bool:
        return self._count > 0

    @property
    def count(self) -> int:
        return self._count

    def _on_sigint(self, signum: int, frame: object) -> None:
        self._count += 1

    def __enter__(self) -> _CtrlCWhileWaiting:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            self._installed = False
            signal.signal(signal.SIGINT, self._previous)


def _cancel_and_wait(
    loop: asyncio.AbstractEventLoop, tasks: list[asyncio.Task[Any]], ctrl_c: _CtrlCWhileWaiting
) -> None:
    """Cancel the call on the loop (run() then terminates the remote command) and
    wait for that clean-up, at most CANCEL_CLEANUP_TIMEOUT; a further ^C stops
    the waiting. The loop runs cancel() after start(): it keeps their order."""
    cleaned = threading.Event()

    def cancel() -> None:
        tasks[0].cancel()
        tasks[0].add_done_callback(lambda _: cleaned.set())

    loop.call_soon_threadsafe(cancel)
    pressed = ctrl_c.count
    deadline = time.monotonic() + CANCEL_CLEANUP_TIMEOUT
    while not cleaned.wait(SIGNAL_CHECK_INTERVAL):
        if ctrl_c.count > pressed or time.monotonic() >= deadline:
            return


_LOOP = _LoopThread()


_Path = str | os.PathLike[str] | RemotePath


class SyncRemoteFileHandle:
    """:class:`~execserver.client.fs.RemoteFileHandle`, blocking."""

    def __init__(self, handle: RemoteFileHandle) -> None:
        self.handle = handle
        self.handle_id = handle.handle_id
        self.path = handle.path

    def read_block(self, offset: int, length: int) -> tuple[bytes, bool]:
        return _LOOP.call(self.handle.read_block(offset, length))

    def write_block(self, offset: int, data: bytes) -> None:
        _LOOP.call(self.handle.write_block(offset, data))

    def close(self) -> None:
        _LOOP.call(self.handle.close())


class SyncFileSystem:
    """:class:`~execserver.client.fs.RemoteFileSystem` (``read_file``,
    ``write_file``, ``get_metadata``, ``remove``, ``path``, ``open``, ...), blocking."""

    def __init__(self, fs: RemoteFileSystem) -> None:
        self.aio = fs
        self.sandbox = fs.sandbox

    @property
    def caller(self) -> Caller:
        return self.aio.caller

    def with_sandbox(self, sandbox: object) -> SyncFileSystem:
        return SyncFileSystem(self.aio.with_sandbox(sandbox))

    def path(self, path: str | os.PathLike[str]) -> SyncRemotePath:
        return SyncRemotePath(self.aio.path(path))

    @contextlib.contextmanager
    def open(
        self, path: str | os.PathLike[str] | RemotePath, mode: Literal["read", "replace"] = "read"
    ) -> Iterator[SyncRemoteFileHandle]:
        manager = self.aio.open(path, mode)
        handle = _LOOP.call(_enter(manager))
        try:
            yield SyncRemoteFileHandle(handle)
        except BaseException as exc:
            if not _LOOP.call(manager.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            _LOOP.call(manager.__aexit__(None, None, None))

    def read_file(self, path: _Path, **options: Any) -> bytes:
        return _LOOP.call(self.aio.read_file(path, **options))

    def write_file(self, path: _Path, data: bytes, **options: Any) -> None:
        _LOOP.call(self.aio.write_file(path, data, **options))

    def create_directory(self, path: _Path, **options: Any) -> None:
        _LOOP.call(self.aio.create_directory(path, **options))

    def get_metadata(self, path: _Path, **options: Any) -> FileMetadata:
        return _LOOP.call(self.aio.get_metadata(path, **options))

    def canonicalize(self, path: _Path) -> str:
        return _LOOP.call(self.aio.canonicalize(path))

    def read_directory(self, path: _Path) -> list[DirectoryEntry]:
        return _LOOP.call(self.aio.read_directory(path))

    def walk(self, path: _Path, **options: Any) -> WalkOutcome:
        return _LOOP.call(self.aio.walk(path, **options))

    def remove(self, path: _Path, **options: Any) -> None:
        _LOOP.call(self.aio.remove(path, **options))

    def copy(self, source: _Path, destination: _Path, **options: Any) -> None:
        _LOOP.call(self.aio.copy(source, destination, **options))

    def upload(
        self, local_dir: str | os.PathLike[str], remote_dir: _Path, **options: Any
    ) -> TransferSummary:
        """:meth:`~execserver.client.fs.RemoteFileSystem.upload`, blocking
        (``progress`` runs on the sync clients' loop thread)."""
        return _LOOP.call(self.aio.upload(local_dir, remote_dir, **options))

    def download(
        self, remote_dir: _Path, local_dir: str | os.PathLike[str], **options: Any
    ) -> TransferSummary:
        return _LOOP.call(self.aio.download(remote_dir, local_dir, **options))


async def _enter(manager: contextlib.AbstractAsyncContextManager[T]) -> T:
    return await manager.__aenter__()


class SyncHttp:
    """:class:`~execserver.client.http.RemoteHttp` (``client.http``), blocking."""

    def __init__(self, http: RemoteHttp) -> None:
        self.aio = http

    def request(self, method: str, url: str, **options: Any) -> HttpResponse:
        return _LOOP.call(self.aio.request(method, url, **options))

    def get(self, url: str, **options: Any) -> HttpResponse:
        return _LOOP.call(self.aio.get(url, **options))

    def post(self, url: str, **options: Any) -> HttpResponse:
        return _LOOP.call(self.aio.post(url, **options))


class SyncRemotePath:
    """:class:`~execserver.client.fs.RemotePath`, blocking; ``/`` joins as in pathlib."""

    __slots__ = ("aio",)

    def __init__(self, path: RemotePath) -> None:
        self.aio = path

    def __repr__(self) -> str:
        return f"SyncRemotePath({self.aio.path!r})"

    def __str__(self) -> str:
        return self.aio.path

    def __fspath__(self) -> str:
        return self.aio.path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SyncRemotePath) and other.aio == self.aio

    def __hash__(self) -> int:
        return hash(self.aio)

    def __truediv__(self, other: str) -> SyncRemotePath:
        return SyncRemotePath(self.aio / other)

    @property
    def fs(self) -> SyncFileSystem:
        return SyncFileSystem(self.aio.fs)

    @property
    def path(self) -> str:
        return self.aio.path

    @property
    def uri(self) -> str:
        return self.aio.uri

    @property
    def name(self) -> str:
        return self.aio.name

    @property
    def parent(self) -> SyncRemotePath:
        return SyncRemotePath(self.aio.parent)

    @property
    def suffix(self) -> str:
        return self.aio.suffix

    def read_bytes(self) -> bytes:
        return _LOOP.call(self.aio.read_bytes())

    def read_text(self, encoding: str = "utf-8") -> str:
        return _LOOP.call(self.aio.read_text(encoding))

    def write_bytes(self, data: bytes) -> None:
        _LOOP.call(self.aio.write_bytes(data))

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        _LOOP.call(self.aio.write_text(text, encoding))

    def stat(self, *, follow_symlinks: bool = True) -> FileMetadata:
        return _LOOP.call(self.aio.stat(follow_symlinks=follow_symlinks))

    def exists(self) -> bool:
        return _LOOP.call(self.aio.exists())

    def is_file(self) -> bool:
        return _LOOP.call(self.aio.is_file())

    def is_dir(self) -> bool:
        return _LOOP.call(self.aio.is_dir())

    def is_symlink(self) -> bool:
        return _LOOP.call(self.aio.is_symlink())

    def mkdir(self, *, parents: bool = False, exist_ok: bool = False) -> None:
        _LOOP.call(self.aio.mkdir(parents=parents, exist_ok=exist_ok))

    def iterdir(self) -> list[SyncRemotePath]:
        return [SyncRemotePath(p) for p in _LOOP.call(self.aio.iterdir())]

    def unlink(self, *, missing_ok: bool = False) -> None:
        _LOOP.call(self.aio.unlink(missing_ok=missing_ok))

    def rmdir(self) -> None:
        _LOOP.call(self.aio.rmdir())

    def rmtree(self) -> None:
        _LOOP.call(self.aio.rmtree())

    def resolve(self) -> SyncRemotePath:
        return SyncRemotePath(_LOOP.call(self.aio.resolve()))

    def copy_to(self, target: SyncRemotePath | str, *, recursive: bool = False) -> SyncRemotePath:
        dest = target.aio if isinstance(target, SyncRemotePath) else target
        return SyncRemotePath(_LOOP.call(self.aio.copy_to(dest, recursive=recursive)))


class SyncRemoteProcess:
    """:class:`~execserver.client.process.RemoteProcess`, blocking. Iterate it
    (``for event in proc``) for its events; as in the async client the iteration
    raises ``ProcessFailed`` when the stream ends without ``Closed``."""

    def __init__(self, process: RemoteProcess) -> None:
        self.aio = process
        self.process_id = process.process_id
        self.tty = process.tty

    def __repr__(self) -> str:
        return f"Sync{self.aio!r}"

    def __iter__(self) -> Iterator[ProcessEvent]:
        return self.events()

    def events(self, *, raise_on_failure: bool = True) -> Iterator[ProcessEvent]:
        stream = self.aio.events(raise_on_failure=raise_on_failure)

        async def step() -> ProcessEvent | None:
            try:
                return await anext(stream)
            except StopAsyncIteration:
                return None

        while (event := _LOOP.call(step())) is not None:
            yield event

    @property
    def sandbox_type(self) -> str:
        return self.aio.sandbox_type

    @property
    def exit_status(self) -> ExitStatus | None:
        return self.aio.exit_status

    @property
    def failure(self) -> str | None:
        return self.aio.failure

    @property
    def finished(self) -> bool:
        return self.aio.finished

    @property
    def is_live(self) -> bool:
        return self.aio.is_live

    @property
    def last_seq(self) -> int:
        return self.aio.last_seq

    @overload
    def expect(
        self, pattern: str | re.Pattern[str], *, timeout: float | None = None
    ) -> ExpectMatch[str]: ...

    @overload
    def expect(
        self, pattern: bytes | re.Pattern[bytes], *, timeout: float | None = None
    ) -> ExpectMatch[bytes]: ...

    def expect(
        self, pattern: Pattern, *, timeout: float | None = None
    ) -> ExpectMatch[str] | ExpectMatch[bytes]:
        """:meth:`~execserver.client.process.RemoteProcess.expect`, blocking."""
        found: ExpectMatch[str] | ExpectMatch[bytes]
        if wants_text(pattern):
            found = _LOOP.call(
                self.aio.expect(cast("str | re.Pattern[str]", pattern), timeout=timeout)
            )
        else:
            found = _LOOP.call(
                self.aio.expect(cast("bytes | re.Pattern[bytes]", pattern), timeout=timeout)
            )
        return found

    def wait(self) -> ExitStatus:
        return _LOOP.call(self.aio.wait())

    def wait_closed(self) -> None:
        _LOOP.call(self.aio.wait_closed())

    def write(self, data: bytes, *, write_id: str | None = None) -> WriteStatus:
        return _LOOP.call(self.aio.write(data, write_id=write_id))

    def signal(self, signal: str = "interrupt") -> None:
        _LOOP.call(self.aio.signal(signal))

    def interrupt(self) -> None:
        _LOOP.call(self.aio.interrupt())

    def terminate(self) -> bool:
        return _LOOP.call(self.aio.terminate())

    def read(
        self,
        after_seq: int | None = None,
        *,
        max_bytes: int | None = None,
        wait_ms: int | None = None,
    ) -> ReadResponse:
        return _LOOP.call(self.aio.read(after_seq, max_bytes=max_bytes, wait_ms=wait_ms))


class ExecServerClient:
    """Blocking twin of :class:`execserver.client.ExecServerClient`; make one
    with :func:`connect` (or :meth:`connect`, :meth:`spawn`). The same names,
    without ``await``; ``aclient`` is the async client underneath."""

    def __init__(self, client: AsyncClient) -> None:
        self.aclient = client
        self.fs = SyncFileSystem(client.fs)
        self.http = SyncHttp(client.http)
        self.processes = client.processes

    # -- construction --------------------------------------------------------

    @classmethod
    def connect(cls, url: str, **options: Any) -> ExecServerClient:
        """:meth:`execserver.client.ExecServerClient.connect`, blocking."""
        return cls(_LOOP.call(AsyncClient.connect(url, **options)))

    @classmethod
    def spawn(cls, argv: Sequence[str], **options: Any) -> ExecServerClient:
        """:meth:`execserver.client.ExecServerClient.spawn`, blocking."""
        return cls(_LOOP.call(AsyncClient.spawn(argv, **options)))

    @classmethod
    def from_opener(cls, opener: Opener, **options: Any) -> ExecServerClient:
        """:meth:`execserver.client.ExecServerClient.from_opener` (``opener`` is
        async and runs on the sync clients' loop thread), blocking."""
        return cls(_LOOP.call(AsyncClient.from_opener(opener, **options)))

    # -- state ---------------------------------------------------------------

    @property
    def url(self) -> str | None:
        return self.aclient.url

    @property
    def session_id(self) -> str:
        return self.aclient.session_id

    @property
    def environment_info(self) -> EnvironmentInfo | None:
        return self.aclient.environment_info

    @property
    def state(self) -> ClientState:
        return self.aclient.state

    @property
    def connection(self) -> RpcConnection | None:
        return self.aclient.connection

    @property
    def tasks(self) -> TaskSet:
        """The async client's own tasks (they run on the sync clients' loop thread)."""
        return self.aclient.tasks

    @property
    def client_name(self) -> str:
        return self.aclient.client_name

    @property
    def auto_reconnect(self) -> bool:
        return self.aclient.auto_reconnect

    @property
    def reconnects(self) -> int:
        return self.aclient.reconnects

    @property
    def on_exit(self) -> OnExit:
        return self.aclient.on_exit

    @property
    def recovery_deadline(self) -> float:
        return self.aclient.recovery_deadline

    @property
    def give_up_when_refused(self) -> bool:
        return self.aclient.give_up_when_refused

    @property
    def unavailable_error(self) -> Callable[[str], ExecServerUnavailable]:
        return self.aclient.unavailable_error

    def add_state_listener(self, listener: StateListener) -> None:
        """As the async client's; ``listener`` runs on the sync clients' loop
        thread and must not block."""
        self.aclient.add_state_listener(listener)

    def remove_state_listener(self, listener: StateListener) -> None:
        self.aclient.remove_state_listener(listener)

    # -- commands and processes ----------------------------------------------

    @overload
    def run(
        self,
        command: str | Sequence[str],
        *,
        text: Literal[False] = False,
        **options: Unpack[RunOptions],
    ) -> CompletedRemoteProcess[bytes]: ...

    @overload
    def run(
        self, command: str | Sequence[str], *, text: Literal[True], **options: Unpack[RunOptions]
    ) -> CompletedRemoteProcess[str]: ...

    def run(
        self, command: str | Sequence[str], *, text: bool = False, **options: Unpack[RunOptions]
    ) -> CompletedRemoteProcess[bytes] | CompletedRemoteProcess[str]:
        """:meth:`execserver.client.ExecServerClient.run`, blocking. ``on_stdout`` /
        ``on_stderr`` run on the sync clients' loop thread and must not block."""
        result: CompletedRemoteProcess[bytes] | CompletedRemoteProcess[str]
        if text:
            result = _LOOP.call(self.aclient.run(command, text=True, **options))
        else:
            result = _LOOP.call(self.aclient.run(command, **options))
        return result

    def start_process(self, argv: Sequence[str], **options: Any) -> SyncRemoteProcess:
        """:meth:`execserver.client.ExecServerClient.start_process` (same keywords), blocking."""
        return SyncRemoteProcess(_LOOP.call(self.aclient.start_process(argv, **options)))

    def start(self, params: ExecParams, **options: Any) -> SyncRemoteProcess:
        return SyncRemoteProcess(_LOOP.call(self.aclient.start(params, **options)))

    def process(self, process_id: str) -> SyncRemoteProcess | None:
        proc = self.aclient.process(process_id)
        return None if proc is None else SyncRemoteProcess(proc)

    def read(self, process_id: str, **options: Any) -> ReadResponse:
        return _LOOP.call(self.aclient.read(process_id, **options))

    def read_params(self, params: ReadParams) -> ReadResponse:
        return _LOOP.call(self.aclient.read_params(params))

    def write(self, process_id: str, data: bytes, *, write_id: str | None = None) -> WriteStatus:
        return _LOOP.call(self.aclient.write(process_id, data, write_id=write_id))

    def terminate_all(self) -> int:
        return _LOOP.call(self.aclient.terminate_all())

    # -- other calls ---------------------------------------------------------

    def environment_status(self) -> str:
        return _LOOP.call(self.aclient.environment_status())

    def get_environment_info(self) -> EnvironmentInfo:
        return _LOOP.call(self.aclient.get_environment_info())

    def call(self, method: str, params: object = None, **options: Any) -> Any:
        """Any request, its result decoded as the contract's result type (as
        :meth:`execserver.client.ExecServerClient.call_any`, which takes plain
        mappings too)."""
        return _LOOP.call(self.aclient.call_any(method, params, **options))

    def call_any(self, method: str, params: object = None, **options: Any) -> Any:
        return _LOOP.call(self.aclient.call_any(method, params, **options))

    def add_notification_listener(
        self, method: str, listener: Callable[[msgspec.Raw], None]
    ) -> None:
        """As the async client's; ``listener`` runs on the sync clients' loop
        thread and must not block."""
        self.aclient.add_notification_listener(method, listener)

    def handle_server_request(
        self, method: str, handler: Callable[[msgspec.Raw], object] | None
    ) -> None:
        """As the async client's; a plain function is called on the loop thread
        (it must not block), a coroutine function is awaited there."""
        if handler is None or asyncio.iscoroutinefunction(handler):
            self.aclient.handle_server_request(method, handler)
            return
        plain = handler

        async def answer(params: msgspec.Raw) -> object:
            return plain(params)

        self.aclient.handle_server_request(method, answer)

    # -- closing -------------------------------------------------------------

    def close(self, *, terminate: bool = False) -> None:
        """:meth:`execserver.client.ExecServerClient.close`, blocking."""
        _LOOP.call(self.aclient.close(terminate=terminate))

    def __enter__(self) -> ExecServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        """As ``async with``: terminate this client's processes unless made with
        ``on_exit="detach"``, then close."""
        self.close(terminate=self.aclient.on_exit == "terminate")


def connect(url: str, **options: Any) -> ExecServerClient:
    """:meth:`execserver.client.ExecServerClient.connect`, blocking (same keywords:
    ``token``, ``wait``, ``on_exit``, ...)."""
    return ExecServerClient.connect(url, **options)


@contextlib.contextmanager
def serve_local(**options: Any) -> Iterator[ExecServerClient]:
    """:func:`execserver.serve_local`, blocking: a private daemon and a client."""
    from execserver.client.local import serve_local as serve_local_async

    manager = serve_local_async(**options)
    client = _LOOP.call(manager.__aenter__())
    try:
        yield ExecServerClient(client)
    except BaseException as exc:
        if not _LOOP.call(manager.__aexit__(type(exc), exc, exc.__traceback__)):
            raise
    else:
        _LOOP.call(manager.__aexit__(None, None, None))
