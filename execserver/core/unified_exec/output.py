"""The tool result of exec_command / write_stdin."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from execserver.core.unified_exec.truncation import approx_token_count, format_truncated

__all__ = ["ExecCommandToolOutput", "build_output", "new_chunk_id"]


def new_chunk_id() -> str:
    return secrets.token_hex(3)


@dataclass(frozen=True)
class ExecCommandToolOutput:
    chunk_id: str
    wall_time_seconds: float
    output: str  # what the model reads, possibly truncated
    original_token_count: int
    exit_code: int | None = None  # only when the process finished during this call
    session_id: int | None = None  # only when it is still running
    # Messages for the host to record as model warnings (process limit).
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def render(self) -> str:
        lines = [
            f"Chunk ID: {self.chunk_id}",
            f"Wall time: {self.wall_time_seconds:.4f} seconds",
        ]
        if self.exit_code is not None:
            lines.append(f"Process exited with code {self.exit_code}")
        if self.session_id is not None:
            lines.append(f"Process running with session ID {self.session_id}")
        lines.append(f"Original token count: {self.original_token_count}")
        lines.append("Output:")
        return "\n".join(lines) + "\n" + self.output


def build_output(
    data: bytes,
    *,
    wall_time_seconds: float,
    max_output_tokens: int,
    exit_code: int | None,
    session_id: int | None,
    warnings: tuple[str, ...] = (),
) -> ExecCommandToolOutput:
    text = data.decode("utf-8", errors="replace")
    return ExecCommandToolOutput(
        chunk_id=new_chunk_id(),
        wall_time_seconds=wall_time_seconds,
        output=format_truncated(text, max_output_tokens),
        original_token_count=approx_token_count(len(data)),
        exit_code=exit_code,
        session_id=session_id,
        warnings=warnings,
    )
