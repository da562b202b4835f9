"""A ^C reaches a blocking ``execserver.client.sync`` call wherever it lands.

While a sync call waits, the main thread may be running code where a raised
``KeyboardInterrupt`` is lost: a finalizer or a gc callback (``Exception ignored
in ...``). These tests put the ^C exactly there: a gc callback, armed once the
remote command runs, interrupts the main thread from inside itself and then runs
bytecode, so the SIGINT handler runs inside the callback.
"""

from __future__ import annotations

import _thread
import asyncio
import gc
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execserver.client import sync
from tests.integration.test_client_run import marker, processes_with, wait_until


class _CtrlCInsideGc:
    """Once armed, the next collection the main thread runs sends it a ^C from
    inside the gc callback."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.sent = threading.Event()

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if (
            phase == "start"
            and self.armed.is_set()
            and not self.sent.is_set()
            and threading.current_thread() is threading.main_thread()
        ):
            self.sent.set()
            _thread.interrupt_main()
            for _ in range(100):  # bytecode: the pending SIGINT handler runs in here
                pass


@pytest.fixture
def ctrl_c_inside_gc() -> Iterator[_CtrlCInsideGc]:
    hook = _CtrlCInsideGc()
    threshold = gc.get_threshold()
    # Collect on almost every allocation, so the waiting main thread collects too.
    gc.set_threshold(1)
    gc.callbacks.append(hook)
    try:
        yield hook
    finally:
        gc.callbacks.remove(hook)
        gc.set_threshold(*threshold)


def test_a_ctrl_c_inside_a_gc_callback_interrupts_run_and_terminates_the_command(
    tmp_path: Path, ctrl_c_inside_gc: _CtrlCInsideGc
) -> None:
    mark = marker()
    with sync.serve_local() as client:
        arm = threading.Timer(1.0, ctrl_c_inside_gc.armed.set)
        arm.start()
        began = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                client.run(["sleep", mark], cwd=str(tmp_path))
        finally:
            arm.cancel()
        assert ctrl_c_inside_gc.sent.is_set()
        # Interrupted at once, not when the command would have ended.
        assert time.monotonic() - began < 20
        assert asyncio.run(wait_until(lambda: not processes_with(mark), 5))


def test_a_ctrl_c_inside_a_gc_callback_interrupts_a_plain_call(
    ctrl_c_inside_gc: _CtrlCInsideGc,
) -> None:
    threading.Timer(0.3, ctrl_c_inside_gc.armed.set).start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sync._LOOP.call(asyncio.sleep(30))
    assert ctrl_c_inside_gc.sent.is_set()
    assert time.monotonic() - began < 10


def test_python_s_sigint_handler_is_back_after_a_call() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert sync._LOOP.call(asyncio.sleep(0, "done")) == "done"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_program_s_own_sigint_handler_is_left_in_place() -> None:
    seen: list[int] = []

    def own(signum: int, frame: object) -> None:
        seen.append(signum)

    previous = signal.signal(signal.SIGINT, own)
    try:

        async def interrupted_meanwhile() -> str:
            _thread.interrupt_main()
            await asyncio.sleep(0.3)
            return "finished"

        assert sync._LOOP.call(interrupted_meanwhile()) == "finished"
        assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == [signal.SIGINT]
