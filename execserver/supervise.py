"""``execserver supervise serve ARGS``: keep a daemon serving where nothing else
would start it again, and keep its ``--state-dir`` keepers alive while it does.

In a container the daemon's keepers are processes of the container: whatever
ends the container ends them, and with tini as PID 1 the container ends when the
daemon does. ``supervise`` stands between them (``tini -- execserver supervise
serve ...``) and outlives the daemon:

* the daemon crashed, was OOM-killed or SIGKILLed: it is started again with the
  same arguments and re-adopts the keepers (a second later; one that fails
  within ``QUICK_EXIT_S`` of its start ``QUICK_EXITS`` times in a row is given
  up on, its status returned: a bad flag is not retried for ever);
* the daemon handed over to a successor (``serve --take-over``, started with
  ``kubectl exec`` or ``podman exec``) and exited 0: the supervisor stays as
  long as that successor serves the state directory, and starts a daemon again
  if it stops serving without being told to;
* SIGTERM or SIGINT (the container is stopped): passed on to the daemon serving
  (its child, or the successor), and the supervisor exits with it.

A daemon that exits 0 with no successor (a plain shutdown) ends the supervisor.
Stdlib only and no asyncio: it only waits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

from execserver.server.handover import ControlSocketBusy, control_path, serving_pid

__all__ = ["add_supervise_parser", "supervise"]

# A daemon that exits non-zero this soon after its start, this many times in a row,
# cannot start (a bad flag, a port taken): give up instead of looping.
QUICK_EXIT_S = 3.0
QUICK_EXITS = 3
RESTART_DELAY_S = 1.0
# How often a successor (not our child: no exit to wait for) is looked at.
SUCCESSOR_POLL_S = 1.0
# How long a successor may take to serve after its predecessor exited (it
# re-adopts every keeper first).
HANDOVER_WAIT_S = 30.0


class _Stop:
    """SIGTERM/SIGINT: what to pass on, once, to whoever serves."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.child: subprocess.Popen[bytes] | None = None

    def requested(self) -> int | None:
        """The signal received, if any (a call: a handler may set it at any time)."""
        return self.signal

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        del frame
        self.signal = signum
        if self.child is not None and self.child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.send_signal(signum)


def _state_dir(serve_args: Sequence[str]) -> str | None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--state-dir")
    known, _ = parser.parse_known_args(list(serve_args))
    state: str | None = known.state_dir
    return state


def _say(text: str) -> None:
    sys.stderr.write(f"execserver supervise: {text}\n")
    sys.stderr.flush()


def _serving(state_dir: str, busy: int | None) -> int | None:
    """serving_pid, with ``busy`` for a daemon that listens but does not accept."""
    try:
        return serving_pid(state_dir)
    except ControlSocketBusy:
        return busy


def _stop_successor(pid: int, signum: int, state_dir: str) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)
    # A busy control socket while it shuts down: still the successor's.
    while _serving(state_dir, busy=pid) == pid:
        time.sleep(0.1)


def _successor(state_dir: str, stop: _Stop) -> int | None:
    """After the daemon exited 0: the pid of the daemon it handed over to, if it
    did. A daemon that shuts down removes its control socket; one that hands over
    leaves it to its successor, which serves on it once it has re-adopted the
    keepers (waited for, up to ``HANDOVER_WAIT_S``)."""
    if not os.path.exists(control_path(state_dir)):
        return None  # a plain shutdown
    deadline = time.monotonic() + HANDOVER_WAIT_S
    while stop.requested() is None and time.monotonic() < deadline:
        pid = _serving(state_dir, busy=None)  # busy: not known yet, look again
        if pid is not None:
            return pid
        time.sleep(0.1)
    return None


def supervise(serve_args: Sequence[str]) -> int:
    state_dir = _state_dir(serve_args)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    quick = 0
    while stop.requested() is None:
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "execserver", "serve", *serve_args])
        stop.child = child
        code = child.wait()
        stop.child = None
        if stop.requested() is not None:
            return code
        successor = _successor(state_dir, stop) if code == 0 and state_dir is not None else None
        if successor is not None and state_dir is not None:
            _say(f"the daemon handed over to pid {successor}; staying while it serves")
            while stop.requested() is None and _serving(state_dir, busy=successor) == successor:
                time.sleep(SUCCESSOR_POLL_S)
            if stop.requested() is not None:
                _stop_successor(successor, stop.requested() or signal.SIGTERM, state_dir)
                return 0
            _say(f"pid {successor} no longer serves {state_dir}; starting a daemon")
            quick = 0
            continue
        if code == 0:
            return 0  # a plain shutdown
        quick = quick + 1 if time.monotonic() - started < QUICK_EXIT_S else 0
        if quick >= QUICK_EXITS:
            _say(f"the daemon cannot start (exit status {code}, {quick} times); giving up")
            return code
        _say(f"the daemon exited with status {code}; starting it again")
        time.sleep(RESTART_DELAY_S)
    return 0


def add_supervise_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    p = subparsers.add_parser(
        "supervise",
        help="run `serve` and start it again when it dies (for containers: keeps "
        "--state-dir keepers alive)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("serve", choices=["serve"], help="the command supervised")
    p.add_argument("serve_args", nargs=argparse.REMAINDER, help="serve's arguments")
    p.set_defaults(func=lambda args: supervise(args.serve_args))
