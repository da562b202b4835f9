"""``execserver patch URL [--cwd DIR] [--token T] [--sandbox S] < patch``: apply a patch read
from stdin to an executor's file system, printing what the reference
``apply_patch`` prints and exiting as it does (0 on success, 1 on failure).
Our own failures exit as ``execserver run`` does (2 usage, 125 bad cwd, 255
connection or authentication; see ``execserver.client.cli_errors``)."""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import sys
from typing import TYPE_CHECKING, Any

from execserver.client.cli_errors import EXIT_INTERRUPTED, explain, report
from execserver.client.cli_options import (
    add_token_option,
    add_verbose_option,
    control_directory,
)
from execserver.client.url import check_url

if TYPE_CHECKING:
    from execserver.client.connection import ExecServerClient
    from execserver.core.apply_patch.engine import PatchOutcome
    from execserver.core.apply_patch.fs import PatchFileSystem

# The client and the patch engine are imported by the functions that use them:
# `execserver patch --help` or a usage error must not load the network stack.

__all__ = ["apply_in_directory", "apply_on", "patch_once", "patch_remote", "register"]


async def patch_remote(
    url: str,
    patch: str,
    cwd: str,
    *,
    token: str | None = None,
    sandbox: dict[str, Any] | None = None,
) -> PatchOutcome:
    """Apply ``patch`` on the executor at ``url``: :func:`apply_on` over a
    connection of its own."""
    from execserver.client.connection import ExecServerClient

    async with await ExecServerClient.connect(url, token=token) as client:
        return await apply_on(client, patch, cwd, sandbox)


async def apply_on(
    client: ExecServerClient, patch: str, cwd: str, sandbox: dict[str, Any] | None
) -> PatchOutcome:
    """Apply ``patch`` through ``client``; relative paths resolve against ``cwd``
    (an absolute path on the executor), which must exist: it is checked before
    anything is touched. ``sandbox``: the FileSystemSandboxContext sent with
    every fs call (None: unsandboxed)."""
    fs = client.fs if sandbox is None else client.fs.with_sandbox(sandbox)
    return await apply_in_directory(client.fs, fs, patch, cwd)


def patch_once(
    url: str,
    patch: str,
    cwd: str,
    *,
    token: str | None = None,
    sandbox: dict[str, Any] | None = None,
) -> PatchOutcome:
    """:func:`patch_remote` without an event loop, for the one-shot command: a
    blocking websocket and plain JSON (``execserver.client.blocking_rpc``), so
    the command does not import asyncio, picows, msgspec or the async client."""
    from execserver.client.blocking_rpc import BlockingRpcSession, run_blocking
    from execserver.core.apply_patch.blocking_fs import BlockingFileSystem

    with BlockingRpcSession.connect(url, token=token) as session:
        work = apply_in_directory(
            BlockingFileSystem(session, None), BlockingFileSystem(session, sandbox), patch, cwd
        )
        return run_blocking(work)


async def apply_in_directory(
    plain_fs: PatchFileSystem, fs: PatchFileSystem, patch: str, cwd: str
) -> PatchOutcome:
    """Check that ``cwd`` is a directory (through ``plain_fs``, unsandboxed, so a
    missing cwd is reported as such whatever the sandbox lets one see), then
    apply ``patch`` through ``fs``."""
    from execserver.client.errors import WorkingDirectoryNotADirectory, WorkingDirectoryNotFound
    from execserver.core.apply_patch.engine import apply_patch

    directory = posixpath.normpath(cwd)
    try:
        meta = await plain_fs.get_metadata(directory)
    except FileNotFoundError as exc:
        raise WorkingDirectoryNotFound(directory) from exc
    if not meta.is_directory:
        raise WorkingDirectoryNotADirectory(directory)
    return await apply_patch(patch, fs, directory)


def _root_read_profile(cwd: str, *, write_cwd: bool) -> dict[str, Any]:
    entries: list[dict[str, Any]] = [
        {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
    ]
    if write_cwd:
        entries.append(
            {
                "path": {"type": "special", "value": {"kind": "current_working_directory"}},
                "access": "write",
            }
        )
    cwd_uri = "file://" + cwd
    return {
        "permissions": {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": entries},
            "network": "restricted",
        },
        "cwd": cwd_uri,
        "workspaceRoots": [cwd_uri],
        "windowsSandboxLevel": "disabled",
    }


def sandbox_option(value: str | None, cwd: str) -> dict[str, Any] | None:
    """``--sandbox``: ``workspace-write`` (read everything, write under cwd),
    ``read-only``, or a FileSystemSandboxContext as JSON text."""
    if value is None:
        return None
    if value in ("workspace-write", "read-only"):
        return _root_read_profile(cwd, write_cwd=value == "workspace-write")
    try:
        context = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"--sandbox is neither a profile name nor JSON: {exc}") from None
    if not isinstance(context, dict):
        raise ValueError("--sandbox JSON must be an object (a FileSystemSandboxContext)")
    return context


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
    parser.add_argument(
        "--sandbox",
        help="apply under the executor's sandbox: 'workspace-write' (write only "
        "under --cwd), 'read-only', or a FileSystemSandboxContext as JSON "
        "(default: no sandbox)",
    )
    parser.add_argument(
        "--persist",
        type=_seconds,
        metavar="SECONDS",
        help="keep the connection to URL open for SECONDS after this command, in a "
        "background process that later `execserver patch --persist` commands with the "
        "same URL and token reuse (as ssh's ControlPersist); they then skip connecting "
        "and most of the start-up",
    )
    add_token_option(parser)
    add_verbose_option(parser)
    parser.set_defaults(func=_cmd_patch)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds > 0")
    return value


def _cmd_patch(args: argparse.Namespace) -> int:
    cwd = args.cwd or os.getcwd()
    if not cwd.startswith("/"):
        cwd = posixpath.join(os.getcwd(), cwd)
    try:
        sandbox = sandbox_option(args.sandbox, posixpath.normpath(cwd))
        check_url(args.url)
    except ValueError as exc:
        report("execserver patch", str(exc))
        return 2
    patch = sys.stdin.read()
    if args.persist is not None:
        return _patch_through_master(args, patch, cwd, sandbox)
    from execserver.client.errors import ExecServerError

    try:
        outcome = patch_once(args.url, patch, cwd, token=args.token, sandbox=sandbox)
    except (ExecServerError, OSError, ValueError) as exc:
        code, message = explain(exc, url=args.url, verbose=args.verbose)
        report("execserver patch", message)
        return code
    except KeyboardInterrupt:
        # One line, not a traceback; what landed before the ^C stays (the
        # engine never rolls back), as with a failure half-way.
        report("execserver patch", "interrupted; files changed before that stay changed")
        return EXIT_INTERRUPTED
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return outcome.exit_code


# The module the control master runs (python -m), see execserver.client.control.
CONTROL_MASTER = "execserver.core.apply_patch.control_master"


def _patch_through_master(
    args: argparse.Namespace, patch: str, cwd: str, sandbox: dict[str, Any] | None
) -> int:
    from execserver.client.control import ControlError, run_through_master

    request = {
        "op": "patch", "patch": patch, "cwd": cwd, "sandbox": sandbox, "verbose": args.verbose,
    }  # fmt: skip
    try:
        reply = run_through_master(
            CONTROL_MASTER,
            args.url,
            args.token,
            args.persist,
            request,
            directory=control_directory(),
        )
    except ControlError as exc:
        report("execserver patch", str(exc))
        return exc.exit_code
    try:
        error = reply.get("error")
        if error is not None:
            report("execserver patch", str(error["message"]))
            return int(error["exit"])
        stdout, stderr, code = str(reply["stdout"]), str(reply["stderr"]), int(reply["exitCode"])
    except (KeyError, TypeError, ValueError, AttributeError):
        unexpected = repr(reply)[:200]
        report("execserver patch", f"unexpected answer from the control master: {unexpected}")
        return 255
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    return code
