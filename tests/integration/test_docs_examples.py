"""Every code block of README.md, docs/cli.md, docs/client.md and docs/core.md runs as written.

Blocks run against an execserver with the default flags: the documented URL
``ws://127.0.0.1:8765`` is replaced by the test server's, and ``execserver``
resolves to this interpreter's console script. A block that must not run is
preceded by ``<!-- doc-test: skip (reason) -->``; there are few of them and
each says why.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.servers import PROJECT_ROOT, RunningServer

DOCUMENTS = ("README.md", "docs/cli.md", "docs/client.md", "docs/core.md")
DOCUMENTED_URL = "ws://127.0.0.1:8765"
RUNNERS = {"python": [sys.executable, "-c"], "sh": ["bash", "-e", "-c"]}
# Blocks that start a server or run the whole suite; keep this small.
MAX_SKIPPED = 2
_FENCE = re.compile(r"^```(\S*)")
_SKIP = re.compile(r"^<!-- doc-test: skip \((.+)\) -->$")


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    language: str
    code: str
    skip_reason: str | None

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"


def code_blocks(document: str) -> list[Block]:
    lines = (PROJECT_ROOT / document).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        start = index
        end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
        previous = lines[start - 1] if start else ""
        skip = _SKIP.match(previous)
        code = "\n".join(lines[start + 1 : end]) + "\n"
        blocks.append(
            Block(document, start + 1, fence.group(1), code, skip.group(1) if skip else None)
        )
        index = end + 1
    return blocks


ALL_BLOCKS = [block for document in DOCUMENTS for block in code_blocks(document)]
RUNNABLE = [block for block in ALL_BLOCKS if block.skip_reason is None]


def test_every_document_has_blocks_and_few_are_skipped() -> None:
    for document in DOCUMENTS:
        assert any(block.document == document for block in RUNNABLE), document
    skipped = [block.id for block in ALL_BLOCKS if block.skip_reason is not None]
    assert len(skipped) <= MAX_SKIPPED, skipped


def test_every_runnable_block_has_a_language_we_can_run() -> None:
    unknown = [(block.id, block.language) for block in RUNNABLE if block.language not in RUNNERS]
    assert not unknown, "tag these blocks python or sh, or skip them with a reason"


def needs_fresh_daemon(block: Block) -> bool:
    """A block that resumes or detaches from a session needs the default session TTL;
    the worker's shared daemon ends a session with its connection
    (tests/support/shared_daemon.py), which isolates every other block as a daemon
    of its own would, without its start (~0.3 s of CPU each, for ~30 blocks). A
    resuming block this misses fails here: it cannot pass unchecked."""
    return "resume" in block.code or "detach" in block.code


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(
            block,
            id=block.id,
            marks=[pytest.mark.fresh_daemon] if needs_fresh_daemon(block) else [],
        )
        for block in RUNNABLE
    ],
)
async def test_code_block_runs(block: Block, execserver: RunningServer, tmp_path: Path) -> None:
    code = block.code.replace(DOCUMENTED_URL, execserver.url)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    env.pop("EXECSERVER_TOKEN", None)
    proc = await asyncio.create_subprocess_exec(
        *RUNNERS[block.language], code,
        cwd=tmp_path, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode == 0, (
        f"{block.id} exited {proc.returncode}\n--- stdout\n{out.decode()}\n--- stderr\n"
        f"{err.decode()}"
    )
