"""One simulated agent of benchmarks/scale.py: its own websocket session doing
an agent's mix of calls in a loop, each operation timed from its first request
to its last answer.

The mix, one iteration:

* ``spawn``: a sandboxed ``true`` (workspace-write), from ``process/start`` to
  its ``process/closed``;
* ``poll``: one ``process/read`` of a long-running command started once per
  agent (it printed 200 lines and then sleeps), the cursor advancing 1 KiB at a
  time and starting over when caught up;
* ``readFile`` and ``writeFile``: 4 KiB each, sandboxed with the context the
  codex CLI sends when its profile denies reading a path (workspace-write plus
  one deny-read entry; benchmarks/sandboxed_fs.py says why the deny entry makes
  both servers go through their sandboxed helper);
* ``patch10``: a 10-file update as the library's apply_patch does it
  (execserver/core/apply_patch/applier.py: per file ``fs/getMetadata``,
  ``fs/readFile``, ``fs/writeFile``), with the same sandbox;
* ``tty``: a round trip to a REPL on a pseudo-terminal started once per agent
  (``cat``): ``process/write`` of a marker line until the terminal's echo and
  the program's answer (two copies of the marker) arrive as ``process/output``.

Each agent works in its own workspace directory, as agents on a shared devbox do.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import random
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.client import BenchClient
from benchmarks.sandboxed_fs import deny_read_context

__all__ = ["OPERATIONS", "Agent", "AgentStats", "Window", "prepare_workspace"]

OPERATIONS = ("spawn", "poll", "readFile", "writeFile", "patch10", "tty")
FILE_SIZE = 4096
PATCH_FILES = 10
ENV = {"PATH": "/usr/bin:/bin", "TERM": "dumb"}
# A long command's output: 200 lines at once, then silence (no fork per line,
# so 1,000 of them do not load the machine by themselves).
LONG_COMMAND = ["sh", "-c", "seq 1 200; exec sleep 3600"]
OP_TIMEOUT_S = 120.0
# The longest pause that spreads the agents after their first pass (Agent._stagger):
# below the fs helper pool's idle timeout (execserver/fs/sandboxed/pool.py, 30 s).
STAGGER_MAX_S = 20.0


def _uri(path: Path) -> str:
    return "file://" + str(path)


def prepare_workspace(root: Path) -> None:
    """A fresh workspace: 16 files to read and the 10 files the patch updates."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for i in range(16):
        (root / f"f{i}.txt").write_bytes(os.urandom(FILE_SIZE))
    text = "".join(f"line {n}\n" for n in range(40))
    for i in range(PATCH_FILES):
        (root / f"src{i}.py").write_text(text)


@dataclass
class AgentStats:
    """Latencies (seconds) of the operations that succeeded, and failures by operation."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in OPERATIONS})
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPERATIONS, 0))
    # Operations cut off when the level's time ran out (seconds so far).
    unfinished: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in OPERATIONS})
    first_errors: list[str] = field(default_factory=list)
    # Failures of operations that started before the window (the warm-up): not in
    # the figures, but a failure all the same (first_errors names them).
    warmup_errors: int = 0
    # Operations that started before the window and were still under way when the
    # level's time ran out: what each was waiting for.
    stuck_in_warmup: list[str] = field(default_factory=list)


class Agent:
    def __init__(self, url: str, index: int, workspace: Path, secret: Path) -> None:
        self.url = url
        self.index = index
        self.workspace = workspace
        self.box = deny_read_context(workspace, secret)
        self.spawn_box = {
            "permissions": self.box["permissions"],
            "cwd": self.box["cwd"],
            "workspaceRoots": self.box["workspaceRoots"],
            "windowsSandboxLevel": "disabled",
        }
        self.payload = base64.b64encode(os.urandom(FILE_SIZE)).decode()
        self.client: BenchClient | None = None
        self._closed: dict[str, asyncio.Future[None]] = {}
        self._tty_output = bytearray()
        self._tty_changed = asyncio.Event()
        self._ids = itertools.count()
        self._cursor = 0
        self.stats = AgentStats()
        # (operation, its start, recorded?) while one is under way.
        self.in_flight: tuple[str, float, bool] | None = None
        # What the operation under way waits for, for its failure's message.
        self.waiting_for = ""

    # -- set-up -------------------------------------------------------------

    async def connect(self) -> None:
        self.client = await BenchClient.connect(self.url)
        self.client.on_notification = self._on_notification
        await self._call(
            "process/start",
            {
                "processId": "long",
                "argv": LONG_COMMAND,
                "cwd": _uri(self.workspace),
                "env": ENV,
                "tty": False,
            },
        )
        await self._call(
            "process/start",
            {
                "processId": "repl",
                "argv": ["cat"],
                "cwd": _uri(self.workspace),
                "env": ENV,
                "tty": True,
            },
        )

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "process/output" and params.get("processId") == "repl":
            self._tty_output += base64.b64decode(params["chunk"])
            self._tty_changed.set()
        elif method == "process/closed":
            future = self._closed.pop(params["processId"], None)
            if future is not None and not future.done():
                future.set_result(None)

    async def _call(self, method: str, params: Any) -> Any:
        assert self.client is not None
        return await self.client.call(method, params)

    # -- the operations -------------------------------------------------------

    async def spawn(self) -> None:
        pid = f"s{next(self._ids)}"
        closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closed[pid] = closed
        self.waiting_for = f"process/start of {pid}"
        await self._call(
            "process/start",
            {
                "processId": pid,
                "argv": ["true"],
                "cwd": _uri(self.workspace),
                "env": ENV,
                "tty": False,
                "sandbox": self.spawn_box,
            },
        )
        self.waiting_for = f"process/closed of {pid}"
        await closed

    async def poll(self) -> None:
        self.waiting_for = f"process/read after {self._cursor}"
        result = await self._call(
            "process/read", {"processId": "long", "afterSeq": self._cursor, "maxBytes": 1024}
        )
        if result["failure"] or result["closed"]:
            raise RuntimeError(f"the long command ended: {result['failure']}")
        self._cursor = result["nextSeq"] - 1 if result["chunks"] else 0

    async def read_file(self) -> None:
        path = self.workspace / f"f{random.randrange(16)}.txt"
        self.waiting_for = f"fs/readFile of {path.name}"
        result = await self._call("fs/readFile", {"path": _uri(path), "sandbox": self.box})
        if len(base64.b64decode(result["dataBase64"])) != FILE_SIZE:
            raise RuntimeError("short read")

    async def write_file(self) -> None:
        path = self.workspace / f"w{random.randrange(16)}.txt"
        self.waiting_for = f"fs/writeFile of {path.name}"
        params = {"path": _uri(path), "dataBase64": self.payload, "sandbox": self.box}
        await self._call("fs/writeFile", params)

    async def patch10(self) -> None:
        for i in range(PATCH_FILES):
            path = _uri(self.workspace / f"src{i}.py")
            self.waiting_for = f"fs/getMetadata of src{i}.py"
            meta = await self._call("fs/getMetadata", {"path": path, "sandbox": self.box})
            if not meta["isFile"]:
                raise RuntimeError(f"{path} is not a file")
            self.waiting_for = f"fs/readFile of src{i}.py"
            old = base64.b64decode(
                (await self._call("fs/readFile", {"path": path, "sandbox": self.box}))["dataBase64"]
            )
            # The hunk flips one line back and forth, so the file keeps its size.
            new = (
                old.replace(b"line 20\n", b"line XX\n")
                if b"line 20\n" in old
                else old.replace(b"line XX\n", b"line 20\n")
            )
            if new == old:
                raise RuntimeError(f"{path}: the hunk's context is gone")
            params = {"path": path, "dataBase64": base64.b64encode(new).decode()}
            self.waiting_for = f"fs/writeFile of src{i}.py"
            await self._call("fs/writeFile", {**params, "sandbox": self.box})

    async def tty(self) -> None:
        marker = f"ping-{next(self._ids)}".encode()
        self._tty_output.clear()
        chunk = base64.b64encode(marker + b"\n").decode()
        self.waiting_for = f"process/write of {marker.decode()}"
        result = await self._call(
            "process/write",
            {"processId": "repl", "chunk": chunk, "writeId": marker.decode()},
        )
        if result["status"] != "accepted":
            raise RuntimeError(f"process/write: {result['status']}")
        # The terminal's echo and cat's copy of the line.
        self.waiting_for = f"the echo of {marker.decode()}"
        while self._tty_output.count(marker) < 2:
            self._tty_changed.clear()
            await self._tty_changed.wait()

    def operations(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("spawn", self.spawn),
            ("poll", self.poll),
            ("readFile", self.read_file),
            ("writeFile", self.write_file),
            ("patch10", self.patch10),
            ("tty", self.tty),
        ]

    # -- the loop -------------------------------------------------------------

    async def _one_pass(self, window: Window) -> None:
        """One pass over the mix. A pass under way when the window closes
        finishes and counts (within the level's grace), so that every operation
        of the mix is measured even when one pass outlasts the window."""
        for name, operation in self.operations():
            start = time.perf_counter()
            record = window.records(start)
            self.in_flight = (name, start, record)
            try:
                # Not asyncio.wait_for: on Python 3.11 it returns the operation's
                # result when the operation ends just as the agent is cancelled,
                # and the agent, its cancellation lost, went on with its pass.
                async with asyncio.timeout(OP_TIMEOUT_S):
                    await operation()
            except Exception as exc:  # counted, and the agent goes on
                if record:
                    self.stats.errors[name] += 1
                else:
                    self.stats.warmup_errors += 1
                if len(self.stats.first_errors) < 3:
                    self.stats.first_errors.append(
                        f"{name}{'' if record else ' (warm-up)'}: {type(exc).__name__}: "
                        f"{exc} (waiting for {self.waiting_for})"
                    )
                continue
            finally:
                self.in_flight = None
            if record:
                self.stats.latencies[name].append(time.perf_counter() - start)

    async def run(
        self, window: Window, think_s: float, warmed: asyncio.Event | None = None
    ) -> None:
        """Passes over the mix, with a random pause of mean ``think_s`` between
        them (the model thinking). Operations that start before the window opens
        are the warm-up and are not recorded; ``warmed`` is set after the first
        whole pass and a random pause (``_stagger``). The agent stops once the
        window has closed and it has made one whole pass inside it: every
        operation of every agent is measured at least once (or, cut off by the
        level's grace, counted unfinished)."""
        passes_inside = 0
        while not (window.closed() and passes_inside):
            started = time.perf_counter()
            inside = window.records(started)
            await self._one_pass(window)
            passes_inside += inside
            if warmed is not None and not warmed.is_set():
                await self._stagger(window, time.perf_counter() - started)
                warmed.set()
            if think_s and not window.closed():
                await asyncio.sleep(random.uniform(0, 2 * think_s))

    @staticmethod
    async def _stagger(window: Window, first_pass_s: float) -> None:
        """After the first pass, before the window opens: a random pause of up to
        that pass's length. Agents that start together otherwise stay in
        lock-step (a pass is mostly waiting in the same queues, and half a
        second of thinking spreads nothing over a pass of twenty): at N = 1,000
        all of them started their sandboxed command within a few seconds, then
        all sent their fs/readFile at once, and that read waited 5.5 s at the
        median against 0.8 s for the fs/writeFile right after it (docs/scale.md).
        Real agents do not take turns in step; the pause spreads them over a
        pass. At most STAGGER_MAX_S: a longer pause outlasts the fs helper pool's
        idle timeout, and the agent's helper would be retired and started again
        in the window (a first pass at N = 1,000 takes about 70 s)."""
        if not window.records(time.perf_counter()):
            await asyncio.sleep(random.uniform(0, min(first_pass_s, STAGGER_MAX_S)))

    def censor(self, now: float) -> None:
        """The operation still under way when the level's time ran out: recorded as
        unfinished, its time so far a lower bound of its latency."""
        if self.in_flight is None:
            return
        name, start, record = self.in_flight
        if record:
            self.stats.unfinished[name].append(now - start)
        else:
            self.stats.stuck_in_warmup.append(
                f"{name}: {now - start:.1f} s, waiting for {self.waiting_for}"
            )


class Window:
    """The measured window of a level (time.perf_counter), shared by its agents:
    an operation is recorded when it starts inside it."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.end: float | None = None

    def open(self, duration: float) -> None:
        self.start = time.perf_counter()
        self.end = self.start + duration

    def records(self, at: float) -> bool:
        return self.start is not None and at >= self.start

    def closed(self) -> bool:
        return self.end is not None and time.perf_counter() >= self.end
