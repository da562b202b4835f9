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
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from execserver.client.commands import CompletedRemoteProcess
from execserver.client.connection import ExecServerClient as AsyncClient
from execserver.client.fs import RemoteFileSystem
from execserver.client.sandbox import Sandbox
from execserver.wire.lifecycle import EnvironmentInfo
from execserver.wire.process import ExecEnvPolicy
from execserver.wire.sandbox import FileSystemSandboxContext

T = TypeVar("T")

# How long a ^C waits for the cancelled call to clean up (terminate the remote
# command) before it is re-raised anyway.
CANCEL_CLEANUP_TIMEOUT = 15.0
SIGNAL_CHECK_INTERVAL = 0.1

__all__ = ["ExecServerClient", "SyncFileSystem", "connect", "serve_local"]


class _LoopThread:
    """One event loop in a daemon thread; coroutines are submitted to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
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
            return self._loop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self.loop()
        done = threading.Event()
        tasks: list[asyncio.Task[T]] = []

        def start() -> None:
            task = loop.create_task(coro)
            task.add_done_callback(lambda _: done.set())
            tasks.append(task)

        loop.call_soon_threadsafe(start)
        try:
            # Short slices: a blocking wait would delay ^C until the call ends
            # (the main thread runs signal handlers between bytecodes).
            while not done.wait(SIGNAL_CHECK_INTERVAL):
                pass
        except KeyboardInterrupt:
            # Cancel on the loop (run() then terminates the remote command) and
            # wait for that clean-up before handing the ^C back. The interrupt
            # may have landed inside done.wait()'s own locking, so wait on a
            # fresh event. The loop runs cancel() after start(): it keeps order.
            cleaned = threading.Event()

            def cancel() -> None:
                tasks[0].cancel()
                tasks[0].add_done_callback(lambda _: cleaned.set())

            loop.call_soon_threadsafe(cancel)
            cleaned.wait(CANCEL_CLEANUP_TIMEOUT)
            raise
        return tasks[0].result()


_LOOP = _LoopThread()


def _blocking(function: Callable[..., Awaitable[T]]) -> Callable[..., T]:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> T:
        async def run() -> T:
            return await function(*args, **kwargs)

        return _LOOP.call(run())

    return call


class SyncFileSystem:
    """The methods of :class:`RemoteFileSystem` (``read_file``, ``write_file``,
    ``get_metadata``, ``remove``, ...), blocking."""

    def __init__(self, fs: RemoteFileSystem) -> None:
        self._fs = fs

    def with_sandbox(self, sandbox: object) -> SyncFileSystem:
        return SyncFileSystem(self._fs.with_sandbox(sandbox))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attribute = getattr(self._fs, name)
        if not callable(attribute) or not asyncio.iscoroutinefunction(attribute):
            raise AttributeError(f"SyncFileSystem has no blocking method {name!r}")
        return _blocking(attribute)


class ExecServerClient:
    """Blocking twin of :class:`execserver.client.ExecServerClient`; make one
    with :func:`connect`."""

    def __init__(self, client: AsyncClient) -> None:
        self.aclient = client
        self.fs = SyncFileSystem(client.fs)

    @property
    def url(self) -> str | None:
        return self.aclient.url

    @property
    def session_id(self) -> str:
        return self.aclient.session_id

    @property
    def environment_info(self) -> EnvironmentInfo | None:
        return self.aclient.environment_info

    @overload
    def run(
        self,
        command: str | Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        timeout: float | None = None,
        check: bool = False,
        stdin: bytes | str | None = None,
        tty: bool = False,
        sandbox: Sandbox | FileSystemSandboxContext | Mapping[str, object] | None = None,
        text: Literal[False] = False,
        env_policy: ExecEnvPolicy | None = None,
    ) -> CompletedRemoteProcess[bytes]: ...

    @overload
    def run(
        self,
        command: str | Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        timeout: float | None = None,
        check: bool = False,
        stdin: bytes | str | None = None,
        tty: bool = False,
        sandbox: Sandbox | FileSystemSandboxContext | Mapping[str, object] | None = None,
        text: Literal[True],
        env_policy: ExecEnvPolicy | None = None,
    ) -> CompletedRemoteProcess[str]: ...

    def run(
        self,
        command: str | Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        timeout: float | None = None,
        check: bool = False,
        stdin: bytes | str | None = None,
        tty: bool = False,
        sandbox: Sandbox | FileSystemSandboxContext | Mapping[str, object] | None = None,
        text: bool = False,
        env_policy: ExecEnvPolicy | None = None,
    ) -> CompletedRemoteProcess[bytes] | CompletedRemoteProcess[str]:
        """:meth:`execserver.client.ExecServerClient.run`, blocking."""
        if text:
            return _LOOP.call(
                self.aclient.run(
                    command, cwd=cwd, env=env, inherit_env=inherit_env, timeout=timeout,
                    check=check, stdin=stdin, tty=tty, sandbox=sandbox, text=True,
                    env_policy=env_policy,
                )
            )  # fmt: skip
        return _LOOP.call(
            self.aclient.run(
                command, cwd=cwd, env=env, inherit_env=inherit_env, timeout=timeout,
                check=check, stdin=stdin, tty=tty, sandbox=sandbox, env_policy=env_policy,
            )
        )  # fmt: skip

    def environment_status(self) -> str:
        return _LOOP.call(self.aclient.environment_status())

    def get_environment_info(self) -> EnvironmentInfo:
        return _LOOP.call(self.aclient.get_environment_info())

    def call(self, method: str, params: object = None) -> Any:
        """Any request, its result decoded as the contract's result type (as
        :meth:`execserver.client.ExecServerClient.call_any`)."""
        return _LOOP.call(self.aclient.call_any(method, params))

    def close(self) -> None:
        _LOOP.call(self.aclient.close())

    def __enter__(self) -> ExecServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(url: str, **options: Any) -> ExecServerClient:
    """:meth:`execserver.client.ExecServerClient.connect`, blocking (same keywords:
    ``token``, ``wait``, ...)."""
    return ExecServerClient(_LOOP.call(AsyncClient.connect(url, **options)))


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
