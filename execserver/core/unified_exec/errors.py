"""Failures that go back to the model as the tool's error text; the turn goes on."""

from __future__ import annotations

__all__ = ["RespondToModel", "stdin_closed", "unknown_process"]


class RespondToModel(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def unknown_process(process_id: int) -> RespondToModel:
    return RespondToModel(f"Unknown process id {process_id}")


def stdin_closed() -> RespondToModel:
    return RespondToModel(
        "stdin is closed for this session; rerun exec_command with tty=true to keep stdin open"
    )
