"""serving_pid against a control socket whose daemon has stopped accepting (it shuts
down, or is overloaded) while someone polls it: the backlog fills, and a Unix
socket's connect with a timeout then fails with EAGAIN at once. It must say
"busy", not raise the BlockingIOError that once killed `execserver supervise`
polling a successor it had just sent SIGTERM to on a loaded machine."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from execserver.server.handover import ControlSocketBusy, control_path, serving_pid


def _listener(state_dir: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(control_path(str(state_dir)))
    sock.listen(1)
    return sock


def test_a_listener_that_does_not_accept_is_busy_not_an_error(tmp_path: Path) -> None:
    listener = _listener(tmp_path)
    pending: list[socket.socket] = []
    try:
        assert serving_pid(str(tmp_path)) == os.getpid()  # room in the backlog: it answers
        with pytest.raises(ControlSocketBusy):
            for _ in range(16):  # polls until the backlog is full
                serving_pid(str(tmp_path), timeout=0.2)
        # Once the daemon accepts again, the same poll finds it.
        listener.setblocking(False)
        while True:
            try:
                pending.append(listener.accept()[0])
            except BlockingIOError:
                break
        assert serving_pid(str(tmp_path)) == os.getpid()
    finally:
        for sock in pending:
            sock.close()
        listener.close()


def test_no_listener_is_nobody(tmp_path: Path) -> None:
    assert serving_pid(str(tmp_path)) is None
    listener = _listener(tmp_path)
    listener.close()  # a socket file a killed daemon left
    assert serving_pid(str(tmp_path)) is None
