"""A relative PATH entry is resolved against the request's cwd, with and without a
sandbox, pipes and tty alike: the same argv finds the same program either way.

Judged against the reference 0.169.0. The daemon runs in one directory and the
request in another, each with its own ``rel/`` holding a program only it has;
the child's PATH is ``rel:/usr/bin:/bin``. Measured on the reference: the
request directory's program runs, the daemon directory's is "No such file or
directory" (a -32603 spawn error unsandboxed, exit 101 from the sandbox helper
sandboxed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.rpc import RpcFailure, connect
from tests.support.sandbox import ROOT_READ, context_json, managed, uri
from tests.support.servers import start_server

ENV = {"PATH": "rel:/usr/bin:/bin"}


def _program(directory: Path, name: str) -> None:
    (directory / "rel").mkdir(parents=True)
    program = directory / "rel" / name
    program.write_text(f"#!/bin/sh\necho {name} ran\n")
    program.chmod(0o755)


@pytest.mark.parametrize("kind", ["execserver", "reference"])
async def test_a_relative_path_entry_is_searched_in_the_request_cwd(
    kind: str, tmp_path: Path
) -> None:
    daemon_dir, request_dir = tmp_path / "daemon", tmp_path / "request"
    _program(daemon_dir, "indaemondir")
    _program(request_dir, "inrequestdir")
    sandbox = context_json(managed([ROOT_READ]), cwd=uri(request_dir))
    async with start_server(kind, cwd=daemon_dir) as server, connect(server.url) as client:
        n = 0
        for sandboxed in (False, True):
            for tty in (False, True):
                extra: dict[str, Any] = {"cwd": uri(request_dir), "tty": tty}
                if sandboxed:
                    extra["sandbox"] = sandbox
                case = f"sandboxed={sandboxed} tty={tty}"
                n += 1
                found = await client.run(f"found{n}", ["inrequestdir"], env=ENV, **extra)
                assert b"inrequestdir ran" in found.output(), case
                exited = found.exited()
                assert exited is not None and exited["exitCode"] == 0, case
                if not sandboxed:
                    with pytest.raises(RpcFailure) as failure:
                        await client.start(f"missing{n}", ["indaemondir"], env=ENV, **extra)
                    assert failure.value.code == -32603, case
                    continue
                missing = await client.run(f"missing{n}", ["indaemondir"], env=ENV, **extra)
                output = missing.output()
                assert b"indaemondir ran" not in output, case
                assert b"No such file or directory (os error 2)" in output, case
                exited = missing.exited()
                assert exited is not None and exited["exitCode"] == 101, case
