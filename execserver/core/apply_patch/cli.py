"""``execserver patch URL [--cwd DIR] < patch``: apply a patch read from stdin to
an executor's file system, printing what the reference ``apply_patch`` prints
and exiting as it does (0 on success, 1 on failure)."""

from __future__ import annotations

import argparse
import asyncio
import os
import posixpath
import sys

from execserver.client.connection import ExecServerClient
from execserver.client.errors import ExecServerError
from execserver.core.apply_patch.engine import PatchOutcome, apply_patch

__all__ = ["patch_remote", "register"]


async def patch_remote(url: str, patch: str, cwd: str) -> PatchOutcome:
    """Apply ``patch`` on the executor at ``url``; relative paths resolve
    against ``cwd`` (an absolute path on the executor)."""
    async with await ExecServerClient.connect(url) as client:
        return await apply_patch(patch, client.fs, posixpath.normpath(cwd))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "patch",
        help="apply a patch (apply_patch format) from stdin on an exec-server",
        description="Read a patch from stdin and apply it to the file system of the "
        "exec-server at URL, as the reference apply_patch would.",
    )
    parser.add_argument("url", help="ws://HOST:PORT of the exec-server")
    parser.add_argument(
        "--cwd",
        help="directory on the executor that relative paths resolve against "
        "(default: the current directory, taken as a path on the executor)",
    )
    parser.set_defaults(func=_cmd_patch)


def _cmd_patch(args: argparse.Namespace) -> int:
    cwd = args.cwd or os.getcwd()
    if not cwd.startswith("/"):
        cwd = posixpath.join(os.getcwd(), cwd)
    patch = sys.stdin.read()
    try:
        outcome = asyncio.run(patch_remote(args.url, patch, cwd))
    except (ExecServerError, OSError) as exc:
        sys.stderr.write(f"execserver patch: {exc}\n")
        return 2
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return outcome.exit_code
