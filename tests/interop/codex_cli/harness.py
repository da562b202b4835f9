"""Run ``codex exec`` in an isolated ``$CODEX_HOME`` against one exec-server.

A :class:`Rig` owns a scratch directory (outside /tmp: the reference binary
refuses to create its ``codex-linux-sandbox`` helper alias under a temporary
directory, and the denial scenario needs /tmp to be *outside* the sandbox),
a workspace, and knows how to reach the server under test over websocket
(through the logging proxy) or stdio (through ``stdio_tee``).

A rig given a ``token`` is a client the server authenticates (a tenant of a
daemon started with ``--tenants``, through ``server_args``): the CLI reaches the
server through an ``environments.toml`` entry whose ``auth_bearer_token`` it
sends as ``Authorization: Bearer`` on the websocket upgrade, and the proxy hands
the CLI's own header on upstream (``authorizing_proxy``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts import reference
from tests.interop.codex_cli.frames import FrameLog
from tests.interop.codex_cli.mock_model import MockModel, Turn, serve
from tests.interop.codex_cli.proxy import (
    UPGRADED,
    Handshake,
    authorizing_proxy,
    logging_proxy,
)
from tests.support.servers import (
    PROJECT_ROOT,
    RunningServer,
    execserver_command,
    reference_command,
    start_server,
    stop_process,
)

SCRATCH_ROOT = reference.cache_root().parent / "execserver-interop"
TEE = Path(__file__).with_name("stdio_tee.py")
CLI_TIMEOUT_S = 90
LOG_WAIT_STEPS = 100  # x 0.1 s: how long the stdio tee may outlive the CLI
FrameSource = Callable[[], Awaitable[FrameLog]]
MODEL_SLUG = "gpt-5.5"  # has bundled model metadata, so the CLI offers apply_patch


@dataclass
class CliResult:
    returncode: int
    events: list[dict[str, Any]]
    stderr: str
    model: MockModel
    frames: FrameLog
    handshakes: list[Handshake] = field(default_factory=list)  # with a token only

    def items(self, kind: str) -> list[dict[str, Any]]:
        """Completed thread items of one type (command_execution, file_change, ...)."""
        return [
            e["item"]
            for e in self.events
            if e.get("type") == "item.completed" and e["item"].get("type") == kind
        ]

    def describe(self) -> str:
        """Everything useful for a failing assertion."""
        return (
            f"exit status {self.returncode}\n--- events\n"
            + "\n".join(json.dumps(e)[:600] for e in self.events)
            + f"\n--- stderr (tail)\n{self.stderr[-3000:]}\n--- frames\n{self.frames.dump()}"
            + "".join(f"\n--- upgrade: {h.status}" for h in self.handshakes)
        )


@dataclass
class Rig:
    server: str  # "execserver" | "reference"
    transport: str  # "websocket" | "stdio"
    root: Path
    codex: str  # path of the codex CLI binary
    workspace: Path = field(init=False)
    home: Path = field(init=False)
    token: str | None = None  # the environment's auth_bearer_token (websocket only)
    include_local: bool = True  # with a token: may the CLI also run tools on its own host
    server_args: list[str] = field(default_factory=list)  # appended to the server's argv
    workspace_dir: Path | None = None  # an existing workspace (default: a new one in root)
    # The websocket servers started for the runs, in order (a test may kill one).
    servers: list[RunningServer] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.workspace_dir is None:
            self.workspace = self.root / "workspace"
            self.workspace.mkdir()
        else:
            self.workspace = self.workspace_dir
        self.home = self.root / "codex-home"
        self.home.mkdir()
        if self.token is not None and self.transport != "websocket":
            raise ValueError("a bearer token needs the websocket transport")

    def server_command(self) -> list[str]:
        listen = ["--listen", "stdio", *self.server_args]
        if self.server == "execserver":
            return execserver_command(listen)
        return reference_command(listen)

    def _write_config(self, model_url: str, extra: str) -> None:
        (self.home / "config.toml").write_text(
            f"""
model = "{MODEL_SLUG}"
model_provider = "mock"
approval_policy = "never"

[model_providers.mock]
name = "mock"
base_url = "{model_url}"
wire_api = "responses"
env_key = "MOCK_MODEL_API_KEY"
request_max_retries = 0
stream_max_retries = 0

# Everything that would reach the internet stays off.
[analytics]
enabled = false

[features]
plugins = false
remote_plugin = false
apps = false
{extra}
"""
        )

    def _write_stdio_environment(self, frame_log: Path) -> None:
        # The CLI spawns the program itself and speaks JSON-RPC on its stdio.
        argv = [str(TEE), str(frame_log), str(PROJECT_ROOT), "--", *self.server_command()]
        (self.home / "environments.toml").write_text(
            f'default = "remote"\n\n[[environments]]\nid = "remote"\n'
            f"program = {json.dumps(sys.executable)}\nargs = {json.dumps(argv)}\n"
        )

    def _write_websocket_environment(self, url: str) -> None:
        # How codex 0.169.0 authenticates to a remote exec-server: a url entry's
        # auth_bearer_token goes out as `Authorization: Bearer <token>`.
        path = self.home / "environments.toml"
        include_local = "true" if self.include_local else "false"
        path.write_text(
            f'default = "remote"\ninclude_local = {include_local}\n\n'
            f'[[environments]]\nid = "remote"\n'
            f"url = {json.dumps(url)}\nauth_bearer_token = {json.dumps(self.token)}\n"
        )
        path.chmod(0o600)

    def cli_env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "CODEX_HOME": str(self.home),
            "MOCK_MODEL_API_KEY": "mock-key",
            "LANG": "C.UTF-8",
            "RUST_LOG": os.environ.get("CODEX_INTEROP_RUST_LOG", "warn"),
        }

    async def run(
        self,
        turns: list[Turn],
        *,
        sandbox: str = "workspace-write",
        config: str = "",
        prompt: str = "do the scripted thing",
    ) -> CliResult:
        """One ``codex exec`` turn: the model plays ``turns``, tools run on the server."""
        async with serve(turns) as model, self._server() as (env, frames, handshakes):
            self._write_config(model.url, config)
            cmd = [
                self.codex,
                "exec",
                "--skip-git-repo-check",
                "--json",
                "-s",
                sandbox,
                "-C",
                str(self.workspace),
                prompt,
            ]
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**self.cli_env(), **env, **_proxy_env(model.origin)},
                cwd=str(self.workspace),
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT_S)
            except TimeoutError:
                await stop_process(proc)
                log = await frames()
                raise AssertionError(
                    f"codex exec did not finish in {CLI_TIMEOUT_S}s\n{log.dump()}"
                ) from None
        log = await frames()
        events = [json.loads(ln) for ln in out.decode().splitlines() if ln.startswith("{")]
        stderr = err.decode(errors="replace")
        return CliResult(proc.returncode or 0, events, stderr, model, log, list(handshakes))

    @contextlib.asynccontextmanager
    async def _server(
        self,
    ) -> AsyncIterator[tuple[dict[str, str], FrameSource, list[Handshake]]]:
        """Yield (extra CLI environment, how to get the frame log after the run,
        the upgrades the authorizing proxy saw)."""
        if self.transport == "stdio":
            log_path = self.root / f"frames-{len(list(self.root.glob('frames-*')))}.jsonl"
            self._write_stdio_environment(log_path)
            yield {}, lambda: _complete_log(log_path), []
            return
        (self.home / "environments.toml").unlink(missing_ok=True)
        # Same environment as a stdio server spawned by the CLI would inherit.
        async with start_server(self.server, self.server_args, env=self.cli_env()) as running:
            self.servers.append(running)
            if self.token is None:
                async with logging_proxy(running.url) as (url, log):

                    async def frames() -> FrameLog:
                        return log

                    yield {"CODEX_EXEC_SERVER_URL": url}, frames, []
                return
            async with authorizing_proxy(running.url) as (url, log, handshakes):
                self._write_websocket_environment(url)

                async def authorized_frames() -> FrameLog:
                    return log

                yield {}, authorized_frames, handshakes


def _proxy_env(origin: str) -> dict[str, str]:
    """Send every non-loopback HTTP(S) request of the CLI to the mock, which records it."""
    env = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = origin
    return env


def _tee_alive(path: Path) -> bool:
    """True while ``stdio_tee`` still holds its flock on the log."""
    if not path.exists():
        return False
    with path.open("rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


async def _complete_log(path: Path) -> FrameLog:
    """The stdio frame log, once the tee is gone: the CLI kills it on exit
    without waiting, so it may outlive the CLI by a moment."""
    for _ in range(LOG_WAIT_STEPS):
        if not _tee_alive(path):
            break
        await asyncio.sleep(0.1)
    return FrameLog.from_jsonl(path)


@contextlib.asynccontextmanager
async def rig(
    server: str,
    transport: str,
    codex: str,
    *,
    token: str | None = None,
    include_local: bool = True,
    server_args: list[str] | None = None,
    workspace_dir: Path | None = None,
) -> AsyncIterator[Rig]:
    SCRATCH_ROOT.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"{server}-{transport}-", dir=SCRATCH_ROOT))
    try:
        yield Rig(
            server,
            transport,
            root,
            codex,
            token=token,
            include_local=include_local,
            server_args=server_args or [],
            workspace_dir=workspace_dir,
        )
    finally:
        if not os.environ.get("CODEX_INTEROP_KEEP"):  # keep the scratch dir for debugging
            shutil.rmtree(root, ignore_errors=True)


__all__ = ["PROJECT_ROOT", "UPGRADED", "CliResult", "Handshake", "Rig", "authorizing_proxy", "rig"]
