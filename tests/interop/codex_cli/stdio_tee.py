"""Run an exec-server on stdio and log every JSON-RPC line in both directions.

The codex CLI starts this as the ``program`` of a stdio environment:
``python stdio_tee.py LOGFILE CWD -- SERVER-COMMAND...`` (the server runs in
CWD, the project root, like the websocket servers of ``tests.support.servers``). Lines pass through
unchanged; each one is first appended to LOGFILE as ``{"dir", "line"}`` JSON.

The CLI kills this process when it exits (it does not close stdin and wait),
so completeness cannot be signalled by a last record: instead we hold an
exclusive ``flock`` on LOGFILE for our whole life, which the kernel releases
however we die. Our death closes the server's stdin, which makes it exit.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import threading
from typing import IO


def _pump(src: IO[bytes], dst: IO[bytes], log: IO[str], lock: threading.Lock, tag: str) -> None:
    for line in iter(src.readline, b""):
        with lock:
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            log.write(json.dumps({"dir": tag, "line": text}) + "\n")
            log.flush()
        dst.write(line)
        dst.flush()
    dst.close()


def main(argv: list[str]) -> int:
    log_path, cwd, sep, *command = argv
    if sep != "--" or not command:
        sys.stderr.write("usage: stdio_tee.py LOGFILE CWD -- COMMAND...\n")
        return 2
    with open(log_path, "a", encoding="utf-8") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd)
        assert child.stdin is not None and child.stdout is not None
        lock = threading.Lock()
        with lock:
            log.write(json.dumps({"dir": "pid", "line": str(child.pid)}) + "\n")
            log.flush()
        up = threading.Thread(
            target=_pump, args=(sys.stdin.buffer, child.stdin, log, lock, "C->S"), daemon=True
        )
        up.start()
        _pump(child.stdout, sys.stdout.buffer, log, lock, "S->C")
        return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
