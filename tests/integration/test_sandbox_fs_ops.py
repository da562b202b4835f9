"""Operations the sandboxed fs helper runs in test_sandbox_fs (imported by name inside
the sandbox, so only stdlib and execserver.wire.errors are imported here)."""

from __future__ import annotations

import os
import subprocess
import time

from execserver.wire.errors import PARSE_OR_INVALID_REQUEST, RpcError


def write_text(path: str, text: str) -> int:
    with open(path, "w") as f:
        return f.write(text)


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def raise_rpc(message: str) -> None:
    raise RpcError(PARSE_OR_INVALID_REQUEST, message)


def list_dir(path: str) -> list[str]:
    return sorted(os.listdir(path))


def sleep_forever(marker: str, seconds: str) -> None:
    # A grandchild with a unique command line, findable from the host.
    subprocess.Popen(["sleep", seconds])
    with open(marker, "w") as f:  # a FIFO: the test waits for this open
        f.write("started")
    time.sleep(3600)


def test_operations_work_unsandboxed(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "f")
    assert write_text(path, "abc") == 3
    assert read_text(path) == "abc"
    assert list_dir(str(tmp_path)) == ["f"]
    try:
        raise_rpc("m")
    except RpcError as exc:
        assert (exc.code, exc.message) == (PARSE_OR_INVALID_REQUEST, "m")
    else:
        raise AssertionError("raise_rpc did not raise")
