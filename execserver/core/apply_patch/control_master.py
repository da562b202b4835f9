"""The control master that ``execserver patch --persist SECONDS`` starts
(:mod:`execserver.client.control`): it applies the patches the commands hand it
over one shared connection, exactly as ``execserver patch`` would."""

from __future__ import annotations

import sys
from typing import Any

from execserver.client.connection import ExecServerClient
from execserver.client.control_master import serve_master
from execserver.core.apply_patch.cli import apply_on

__all__ = ["handle"]


async def handle(client: ExecServerClient, request: dict[str, Any]) -> dict[str, Any]:
    """One ``{"op": "patch", "patch", "cwd", "sandbox"}`` request -> the command's
    exit code and output (errors are turned into lines by the master)."""
    if request.get("op") != "patch":
        return {"error": {"exit": 2, "message": f"unknown request {request.get('op')!r}"}}
    outcome = await apply_on(client, request["patch"], request["cwd"], request.get("sandbox"))
    return {"exitCode": outcome.exit_code, "stdout": outcome.stdout, "stderr": outcome.stderr}


if __name__ == "__main__":
    sys.exit(serve_master(sys.argv[1:], handle, "execserver patch"))
