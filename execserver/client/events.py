"""What a consumer of a remote process sees: output, exit, close, or failure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Closed", "ExitStatus", "Exited", "Failed", "Output", "ProcessEvent", "SeqEvent"]

Stream = Literal["stdout", "stderr", "pty"]


@dataclass(frozen=True, slots=True)
class Output:
    seq: int
    stream: Stream
    data: bytes


@dataclass(frozen=True, slots=True)
class Exited:
    seq: int
    exit_code: int
    sandbox_denied: bool


@dataclass(frozen=True, slots=True)
class Closed:
    """Always the last event of a process: it exited and its output reached EOF."""

    seq: int


@dataclass(frozen=True, slots=True)
class Failed:
    """The stream cannot be completed (output lost, transport gone for good)."""

    message: str


SeqEvent = Output | Exited | Closed
ProcessEvent = Output | Exited | Closed | Failed


@dataclass(frozen=True, slots=True)
class ExitStatus:
    exit_code: int
    sandbox_denied: bool
