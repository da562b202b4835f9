"""A helper program of the tests' own: the sandboxed fs helper program
(execserver/fs/sandboxed/program.py) serving these operations, for
test_sandbox_fs and test_sandbox_parity (``python -m`` this module inside the
sandbox; only stdlib and execserver.wire.errors are imported here until it runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

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


OPERATIONS: dict[str, Callable[..., Any]] = {
    "write_text": write_text,
    "read_text": read_text,
    "raise_rpc": raise_rpc,
    "list_dir": list_dir,
    "sleep_forever": sleep_forever,
}


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


if __name__ == "__main__":
    from execserver.fs.sandboxed import program

    sys.exit(program.main(OPERATIONS))
