"""Pieces of the persistent fs helper that need no sandbox: frames, the ELF
loader lookup, the exit-status text and the operation runner."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from execserver.fs.sandboxed import frames, program
from execserver.fs.sandboxed.helper import exit_status_text
from execserver.fs.sandboxed.program import OPERATIONS, Request, decode_request, run
from execserver.fs.sandboxed.protocol import HEADER, OK, OS_ERROR, RPC_ERROR
from execserver.sandbox.fs_helper.runtime import PRIVATE_DIR, elf_interpreter, helper_runtime


def test_frame_carries_bytes_raw_with_a_length_prefix() -> None:
    data = bytes(range(256))
    # The daemon's request (msgspec), read by the helper (pure Python)...
    encoded = frames.frame(frames.Request(7, "write_file", {"path": "/x", "data": data}))
    (size,) = HEADER.unpack(encoded[: HEADER.size])
    assert size == len(encoded) - HEADER.size
    assert data in encoded  # not base64
    decoded = decode_request(encoded[HEADER.size :])
    assert (decoded.id, decoded.op, decoded.args["data"]) == (7, "write_file", data)
    # ...and the helper's answer, read by the daemon.
    answer = program.frame(program.Response(7, OK, data))
    (size,) = HEADER.unpack(answer[: HEADER.size])
    assert size == len(answer) - HEADER.size
    reply = frames.response_decoder.decode(answer[HEADER.size :])
    assert (reply.id, reply.kind, reply.value) == (7, OK, data)


def test_elf_interpreter_of_this_python_and_of_a_non_elf(tmp_path: Path) -> None:
    loader = elf_interpreter(os.path.realpath(sys.executable))
    assert loader is not None and os.path.exists(loader)
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    assert elf_interpreter(str(script)) is None
    assert elf_interpreter(str(tmp_path / "missing")) is None


def test_runtime_lives_under_the_private_directory_only() -> None:
    runtime = helper_runtime(program.__name__)
    assert runtime is not None
    assert all(target.startswith(PRIVATE_DIR + "/") for _, target in runtime.binds)
    assert runtime.argv[0].startswith(PRIVATE_DIR + "/")
    assert runtime.argv[-1] == PRIVATE_DIR
    assert all(
        v.startswith(PRIVATE_DIR)
        for k, v in runtime.env.items()
        if k.startswith("PYTHON") and "/" in v
    )


def test_exit_status_text_as_rust_prints_it() -> None:
    assert exit_status_text(1) == "exit status: 1"
    assert exit_status_text(-9) == "signal: 9 (SIGKILL)"


def test_run_maps_results_and_errors(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"hi")
    ok = run(Request(1, "read_file", {"path": str(tmp_path / "f")}))
    assert (ok.kind, ok.value) == (OK, b"hi")
    missing = run(Request(2, "read_file", {"path": str(tmp_path / "nope")}))
    assert (missing.kind, missing.code) == (OS_ERROR, 2)
    not_file = run(Request(3, "read_file", {"path": str(tmp_path)}))
    assert not_file.kind == RPC_ERROR and not_file.message == f"path `{tmp_path}` is not a file"
    unknown = run(Request(4, "exec", {}))
    assert "unknown fs helper operation" in unknown.message
    assert "exec" not in OPERATIONS
