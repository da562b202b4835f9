"""Answers to a burst of pipelined requests leave in one TCP segment.

Pipelined requests arrive several per segment, and the websocket transport
answers most of them inline, one after the other, while it goes through the
frames of one read. Written one by one, each answer would be its own
segment, and on loopback each segment runs the receiver's network stack
inside our ``write``: that was half of the daemon's CPU per pipelined
``fs/getMetadata`` (py-spy). So while more frames of the same read are
waiting, the socket is corked (TCP_CORK), and it is uncorked after the last
one, when the kernel sends the answers together. A lone request (the last
frame of its read) is written at once and pays one flag test. Order is
unchanged: every frame is still written in sequence; only the kernel's
segmenting differs. Frames written from elsewhere (process output from its
reader task) never wait on the cork: it is only held inside one read.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

__all__ = ["Cork"]


class Cork:
    """TCP_CORK on one socket; does nothing on other kinds of socket."""

    def __init__(self, sock: Any) -> None:
        tcp = sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6)
        self._sock = sock if tcp else None
        self.held = False

    def hold(self) -> None:
        if self._sock is not None and not self.held:
            with contextlib.suppress(OSError):  # the peer is gone
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                self.held = True

    def release(self) -> None:
        if self.held and self._sock is not None:
            self.held = False
            with contextlib.suppress(OSError):
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
