"""The real codex 0.169.0 CLI runs its turns on an exec-server.

Each scenario scripts a mock model, runs ``codex exec`` with the server under
test as its remote environment, and checks three things: the files on disk,
the tool output the CLI sent back to the model, and the JSON-RPC frames
between CLI and server (recorded by a websocket proxy, or a tee on stdio).
Every scenario runs against execserver and the reference, over websocket and
stdio.

The frame checks matter beyond detail: when the remote environment fails, the
CLI quietly runs tools on the local host instead, so disk and model checks
alone would pass without the server doing anything.
"""

from __future__ import annotations

import re
import secrets
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.codex_cli.frames import FrameLog
from tests.interop.codex_cli.harness import CliResult, Rig, rig
from tests.interop.codex_cli.mock_model import (
    Item,
    MockModel,
    Turn,
    apply_patch,
    exec_command,
    message,
    write_stdin,
)
from tests.support.servers import reference_binary

# Under pytest-xdist (`make test`) the CLI's turns run one at a time, on one worker:
# its workspace-write sandbox makes /tmp writable, and two daemons sandboxing /tmp
# at once race on its protected-name mount points (one daemon removed /tmp/.codex
# as another's bwrap bound it: "Can't bind mount /oldroot/tmp/.codex").
pytestmark = [pytest.mark.interop, pytest.mark.xdist_group("codex-cli")]

SERVERS = ["execserver", "reference"]
TRANSPORTS = ["websocket", "stdio"]


@pytest.fixture(scope="session")
def codex_binary() -> str:
    """The codex 0.169.0 CLI (installed from npm on first use, once per session)."""
    return reference_binary()


@pytest.fixture(params=[(s, t) for s in SERVERS for t in TRANSPORTS], ids=lambda p: "-".join(p))
async def cli(request: pytest.FixtureRequest, codex_binary: str) -> AsyncIterator[Rig]:
    server, transport = request.param
    async with rig(server, transport, codex_binary) as r:
        yield r


def started(result: CliResult, cmd: str, sandbox_type: str = "linuxSeccomp") -> str:
    """The processId the server gave the CLI's ``process/start`` for ``cmd``."""
    for params, reply in result.frames.calls("process/start"):
        if params["argv"][-1] == cmd:
            assert "result" in reply, f"process/start failed: {reply}\n{result.describe()}"
            assert reply["result"]["sandboxType"] == sandbox_type, reply
            process_id: str = reply["result"]["processId"]
            return process_id
    raise AssertionError(f"no process/start for {cmd!r} reached the server\n{result.describe()}")


def start_params(frames: FrameLog, cmd: str) -> dict[str, Any]:
    return next(p for p, _ in frames.calls("process/start") if p["argv"][-1] == cmd)


def output(result: CliResult, call_id: str) -> str:
    outputs = result.model.tool_outputs()
    assert call_id in outputs, f"no tool output for {call_id}\n{result.describe()}"
    return outputs[call_id]


def finished(result: CliResult) -> None:
    """The turn ran to the model's final message and the CLI exited 0."""
    assert result.returncode == 0, result.describe()
    assert [m["text"] for m in result.items("agent_message")] == ["done"], result.describe()
    assert result.model.stray == [], "the CLI sent traffic beyond the model turns"


async def test_plain_command(cli: Rig) -> None:
    cmd = "mkdir -p out && printf plain > out/made.txt"
    result = await cli.run([[exec_command("c1", cmd=cmd)], [message("done")]])
    finished(result)
    assert (cli.workspace / "out" / "made.txt").read_text() == "plain"
    assert "Process exited with code 0" in output(result, "c1")
    pid = started(result, cmd)
    params = start_params(result.frames, cmd)
    assert params["cwd"] == cli.workspace.as_uri()
    assert params["tty"] is False
    assert result.frames.process_exit(pid) == {"exitCode": 0, "sandboxDenied": False}


async def test_command_output_reaches_the_model(cli: Rig) -> None:
    token = secrets.token_hex(8)
    (cli.workspace / "seed.txt").write_text(f"seed {token}\n")
    cmd = "cat seed.txt; echo second-line"
    result = await cli.run([[exec_command("c1", cmd=cmd)], [message("done")]])
    finished(result)
    text = output(result, "c1")
    assert f"seed {token}\nsecond-line\n" in text, text
    # ...and it travelled through the server, not some local fallback.
    assert f"seed {token}".encode() in result.frames.process_output(started(result, cmd))


async def test_failing_command(cli: Rig) -> None:
    cmd = "echo oops >&2; exit 3"
    result = await cli.run([[exec_command("c1", cmd=cmd)], [message("done")]])
    finished(result)
    text = output(result, "c1")
    assert "Process exited with code 3" in text and "oops" in text, text
    assert result.frames.process_exit(started(result, cmd)) == {
        "exitCode": 3,
        "sandboxDenied": False,
    }
    [item] = result.items("command_execution")
    assert (item["exit_code"], item["status"]) == (3, "failed")


def _patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"]) + "\n"


async def test_apply_patch_add_update_move_delete(cli: Rig) -> None:
    ws = cli.workspace
    seen: list[dict[str, str | None]] = []

    def snapshot() -> None:
        # Runs when the next model request arrives, i.e. after the previous patch.
        seen.append(
            {
                p: (ws / p).read_text() if (ws / p).exists() else None
                for p in ("notes.txt", "moved/notes.md")
            }
        )

    def after_previous(item: Item) -> Turn:
        def turn(_: MockModel) -> list[Item]:
            snapshot()
            return [item]

        return turn

    add = _patch("*** Add File: notes.txt", "+alpha", "+beta")
    update = _patch("*** Update File: notes.txt", "@@", " alpha", "-beta", "+gamma")
    move = _patch(
        "*** Update File: notes.txt", "*** Move to: moved/notes.md", "@@", " alpha", "+delta"
    )
    delete = _patch("*** Delete File: moved/notes.md")
    result = await cli.run(
        [
            [apply_patch("p1", add)],
            after_previous(apply_patch("p2", update)),
            after_previous(apply_patch("p3", move)),
            after_previous(apply_patch("p4", delete)),
            after_previous(message("done")),
        ]
    )
    finished(result)
    assert seen == [
        {"notes.txt": "alpha\nbeta\n", "moved/notes.md": None},
        {"notes.txt": "alpha\ngamma\n", "moved/notes.md": None},
        {"notes.txt": None, "moved/notes.md": "alpha\ndelta\ngamma\n"},
        {"notes.txt": None, "moved/notes.md": None},
    ], result.describe()
    assert (ws / "moved").is_dir()
    for call_id, summary in [
        ("p1", "A notes.txt"),
        ("p2", "M notes.txt"),
        ("p3", "M moved/notes.md"),
        ("p4", "D moved/notes.md"),
    ]:
        text = output(result, call_id)
        assert "Success. Updated the following files:" in text and summary in text, text
    # The edits went through the server's filesystem methods.
    writes = [p["path"] for p, r in result.frames.calls("fs/writeFile") if "result" in r]
    removes = [p["path"] for p, r in result.frames.calls("fs/remove") if "result" in r]
    assert (ws / "notes.txt").as_uri() in writes, result.describe()
    assert (ws / "moved" / "notes.md").as_uri() in writes, result.describe()
    assert removes == [(ws / "notes.txt").as_uri(), (ws / "moved" / "notes.md").as_uri()]


EXCLUDE_TMP = """
[sandbox_workspace_write]
exclude_slash_tmp = true
exclude_tmpdir_env_var = true
"""


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory in /tmp: outside the workspace, and excluded from writable roots."""
    with tempfile.TemporaryDirectory(prefix="codex-cli-denied-", dir="/tmp") as path:
        yield Path(path)


async def test_sandbox_denies_a_write_outside_the_workspace(cli: Rig, outside: Path) -> None:
    denied_cmd = f"echo escaped > {outside}/denied.txt"
    allowed_cmd = "echo inside > allowed.txt"
    result = await cli.run(
        [
            [exec_command("c1", cmd=denied_cmd)],
            [exec_command("c2", cmd=allowed_cmd)],
            [message("done")],
        ],
        sandbox="workspace-write",
        config=EXCLUDE_TMP,
    )
    finished(result)
    assert not (outside / "denied.txt").exists()
    assert (cli.workspace / "allowed.txt").read_text() == "inside\n"
    denied = output(result, "c1")
    assert "Read-only file system" in denied, denied
    assert not re.search(r"Process exited with code 0\b", denied), denied
    assert "Process exited with code 0" in output(result, "c2")
    assert start_params(result.frames, denied_cmd)["sandbox"] is not None
    denied_exit = result.frames.process_exit(started(result, denied_cmd))
    assert denied_exit == {"exitCode": 1, "sandboxDenied": True}, result.describe()


async def test_read_only_run(cli: Rig) -> None:
    token = secrets.token_hex(8)
    (cli.workspace / "seed.txt").write_text(token)
    read_cmd = "cat seed.txt"
    write_cmd = "echo nope > new.txt"
    result = await cli.run(
        [
            [exec_command("c1", cmd=read_cmd)],
            [exec_command("c2", cmd=write_cmd)],
            [message("done")],
        ],
        sandbox="read-only",
    )
    finished(result)
    assert token in output(result, "c1")
    assert "Read-only file system" in output(result, "c2")
    assert not (cli.workspace / "new.txt").exists()
    assert result.frames.process_exit(started(result, read_cmd)) == {
        "exitCode": 0,
        "sandboxDenied": False,
    }
    write_exit = result.frames.process_exit(started(result, write_cmd))
    assert write_exit == {"exitCode": 1, "sandboxDenied": True}, result.describe()


SESSION_ID = re.compile(r"Process running with session ID (\d+)")


async def test_tty_command_driven_with_write_stdin(cli: Rig) -> None:
    cmd = "read -r line; echo got:$line"

    def answer(model: MockModel) -> list[Item]:
        # The session id is chosen by the CLI, so it comes from the first tool output.
        match = SESSION_ID.search(model.tool_outputs().get("c1", ""))
        if match is None:
            return [message("no session id")]
        return [write_stdin("c2", session_id=int(match[1]), chars="ping\n", yield_time_ms=5000)]

    result = await cli.run(
        [
            [exec_command("c1", cmd=cmd, tty=True, yield_time_ms=1000)],
            answer,
            [message("done")],
        ]
    )
    finished(result)
    assert SESSION_ID.search(output(result, "c1")), output(result, "c1")
    text = output(result, "c2")
    assert "got:ping" in text and "Process exited with code 0" in text, text
    pid = started(result, cmd)
    assert start_params(result.frames, cmd)["tty"] is True
    writes = [p for p, r in result.frames.calls("process/write") if p["processId"] == pid]
    assert [w["chunk"] for w in writes] == ["cGluZwo="], result.describe()  # "ping\n"
    assert b"got:ping" in result.frames.process_output(pid)
    assert result.frames.process_exit(pid) == {"exitCode": 0, "sandboxDenied": False}
