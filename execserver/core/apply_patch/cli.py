"""``execserver patch URL [--cwd DIR] [--token T] < patch``: apply a patch read
from stdin to an executor's file system, printing what the reference
``apply_patch`` prints and exiting as it does (0 on success, 1 on failure).
Our own failures exit as ``execserver run`` does (2 usage, 125 bad cwd, 255
connection or authentication; see ``execserver.client.cli_errors``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import posixpath
import sys

from execserver.client.cli_errors import explain, report
from execserver.client.cli_tools import add_token_option, add_verbose_option
from execserver.client.connection import ExecServerClient, check_url
from execserver.client.errors import (
    ExecServerError,
    WorkingDirectoryNotADirectory,
    WorkingDirectoryNotFound,
)
from execserver.core.apply_patch.engine import PatchOutcome, apply_patch

__all__ = ["patch_remote", "register"]


async def patch_remote(url: str, patch: str, cwd: str, *, token: str | None = None) -> PatchOutcome:
    """Apply ``patch`` on the executor at ``url``; relative paths resolve
    against ``cwd`` (an absolute path on the executor), which must exist: it
    is checked before anything is touched."""
    directory = posixpath.normpath(cwd)
    async with await ExecServerClient.connect(url, token=token) as client:
        try:
            meta = await client.fs.get_metadata(directory)
        except FileNotFoundError as exc:
            raise WorkingDirectoryNotFound(directory) from exc
        if not meta.is_directory:
            raise WorkingDirectoryNotADirectory(directory)
        return await apply_patch(patch, client.fs, directory)


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
    add_token_option(parser)
    add_verbose_option(parser)
    parser.set_defaults(func=_cmd_patch)


def _cmd_patch(args: argparse.Namespace) -> int:
    cwd = args.cwd or os.getcwd()
    if not cwd.startswith("/"):
        cwd = posixpath.join(os.getcwd(), cwd)
    patch = sys.stdin.read()
    try:
        check_url(args.url)
        outcome = asyncio.run(patch_remote(args.url, patch, cwd, token=args.token))
    except (ExecServerError, OSError, ValueError) as exc:
        code, message = explain(exc, url=args.url, verbose=args.verbose)
        report("execserver patch", message)
        return code
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return outcome.exit_code
