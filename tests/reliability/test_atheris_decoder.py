"""Runs the atheris target of the frame decoder (tests/reliability/atheris_frame_decoder.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.reliability.scale import pick
from tests.support.servers import PROJECT_ROOT

RUNS = pick(ci=20_000, full=1_000_000)
SEEDS = [
    b'{"id":1,"method":"initialize","params":{"clientName":"x"}}',
    b'{"id":2,"method":"process/start","params":{"processId":"p","argv":["true"],"cwd":"file:///tmp","env":{},"tty":false}}',
    b'{"id":3,"method":"fs/walk","params":{"path":"file:///tmp","options":{"maxDepth":1,"maxDirectories":1,"maxEntries":1,"followDirectorySymlinks":false}}}',
    b'{"method":"initialized"}',
    b'{"id":4,"result":{}}',
]


def test_frame_decoder_survives_coverage_guided_fuzzing(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for index, seed in enumerate(SEEDS):
        (corpus / f"seed{index}").write_bytes(seed)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability.atheris_frame_decoder",
            f"-runs={RUNS}",
            "-max_len=4096",
            str(corpus),
        ],
        cwd=str(PROJECT_ROOT),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Done {RUNS} runs" in result.stderr
