"""Tests of the sandbox test helpers (tests/support/sandbox.py), so a broken
helper cannot hide failures in the tests that use it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.support.sandbox import context, make_tree, run_sandboxed, without_user_namespaces


async def test_run_plan_reports_exit_code_and_output(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    outcome = await run_sandboxed(
        context({"type": "disabled"}), "echo hello; echo oops >&2; exit 3", tree
    )
    assert outcome.exit_code == 3
    assert "hello" in outcome.output and "oops" in outcome.output
    assert outcome.denied is False


def test_make_tree_builds_the_documented_layout(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    assert (tree.ws / ".git" / "HEAD").read_text() == "ref\n"
    assert os.path.realpath(tree.ws / "link_out") == str(tree.outside)
    assert tree.secret_file.read_text() == "FILESECRET\n"


async def test_no_userns_wrapper_blocks_namespaces(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        *without_user_namespaces(["unshare", "-r", "true"]),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode != 0, out
