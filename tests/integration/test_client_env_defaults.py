"""``run`` and ``start_process`` give the child the same environment by default:
the executor's own (minus KEY/SECRET/TOKEN names), with ``env`` on top;
``inherit_env=False`` gives exactly ``env``; an explicit ``env_policy`` is sent
as given."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import ExecEnvPolicy, ExecServerClient, Output
from execserver.client.process import RemoteProcess
from tests.support.servers import RunningServer


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


async def names(proc: RemoteProcess) -> set[str]:
    out = b"".join([e.data async for e in proc if isinstance(e, Output) and e.stream == "stdout"])
    return {line.split("=", 1)[0] for line in out.decode().splitlines() if "=" in line}


async def test_start_process_inherits_the_executor_environment_like_run(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(["/usr/bin/env"], cwd=tmp_path, env={"GREETING": "hi"})
    started = await names(proc)
    ran = await client.run(["/usr/bin/env"], cwd=tmp_path, env={"GREETING": "hi"}, text=True)
    run_names = {line.split("=", 1)[0] for line in ran.stdout.splitlines() if "=" in line}
    assert {"PATH", "HOME", "GREETING"} <= started
    assert started == run_names


async def test_start_process_inherit_env_false_gives_exactly_env(
    client: ExecServerClient, tmp_path: Path
) -> None:
    proc = await client.start_process(
        ["/usr/bin/env"], cwd=tmp_path, env={"ONLY": "1"}, inherit_env=False
    )
    assert await names(proc) == {"ONLY"}


async def test_start_process_explicit_env_policy_is_sent_as_given(
    client: ExecServerClient, tmp_path: Path
) -> None:
    policy = ExecEnvPolicy(
        inherit="none", ignore_default_excludes=False, exclude=[], set={"SET": "1"},
        include_only=[],
    )  # fmt: skip
    proc = await client.start_process(
        ["/usr/bin/env"], cwd=tmp_path, env={"OVER": "2"}, env_policy=policy
    )
    assert {"SET", "OVER"} <= await names(proc)
    assert "HOME" not in await names(await client.start_process(
        ["/usr/bin/env"], cwd=tmp_path, env_policy=policy
    ))  # fmt: skip
