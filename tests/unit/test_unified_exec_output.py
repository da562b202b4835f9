"""Parameters, output text, truncation and environment pins of unified exec."""

from __future__ import annotations

import pytest

from execserver.core.policy import SandboxPermissions
from execserver.core.unified_exec.env import UNIFIED_EXEC_ENV, unified_exec_env
from execserver.core.unified_exec.output import ExecCommandToolOutput, build_output
from execserver.core.unified_exec.params import (
    ExecCommandArgs,
    ParamError,
    WriteStdinArgs,
    clamp_exec_yield,
    clamp_write_yield,
)
from execserver.core.unified_exec.truncation import (
    approx_token_count,
    format_truncated,
    truncate_middle,
)


def test_exec_command_defaults() -> None:
    args = ExecCommandArgs.from_json({"cmd": "ls"})
    assert (args.login, args.tty, args.yield_time_ms, args.max_output_tokens) == (
        None,
        False,
        10_000,
        10_000,
    )
    assert args.sandbox_permissions is SandboxPermissions.USE_DEFAULT


def test_exec_command_rejects_missing_command_and_wrong_types() -> None:
    with pytest.raises(ParamError, match="missing command line for unified exec request"):
        ExecCommandArgs.from_json({})
    with pytest.raises(ParamError, match="`tty` must be a boolean"):
        ExecCommandArgs.from_json({"cmd": "ls", "tty": "yes"})
    with pytest.raises(ParamError, match="`yield_time_ms` must be an integer"):
        ExecCommandArgs.from_json({"cmd": "ls", "yield_time_ms": True})


def test_write_stdin_args() -> None:
    args = WriteStdinArgs.from_json({"session_id": 1234})
    assert (args.chars, args.yield_time_ms) == ("", None)
    with pytest.raises(ParamError):
        WriteStdinArgs.from_json({"session_id": "1234"})


def test_initial_exec_yield_time_has_no_platform_floor() -> None:
    assert clamp_exec_yield(10) == 250
    assert clamp_exec_yield(1_000_000) == 30_000
    assert clamp_exec_yield(1234) == 1234


def test_initial_exec_yield_time_uses_windows_floor() -> None:
    assert clamp_exec_yield(10, windows=True) == 2000


def test_write_yield_clamps() -> None:
    assert clamp_write_yield(None, empty=False) == 250
    assert clamp_write_yield(100_000, empty=False) == 30_000
    assert clamp_write_yield(None, empty=True) == 5000
    assert clamp_write_yield(10, empty=True) == 5000
    assert clamp_write_yield(10**9, empty=True) == 300_000
    assert clamp_write_yield(10**9, empty=True, max_background_terminal_timeout_ms=1) == 5000


def test_render_of_a_finished_and_a_running_process() -> None:
    done = ExecCommandToolOutput("3fa9c1", 0.15234, "hi\n", 1, exit_code=0)
    assert done.render() == (
        "Chunk ID: 3fa9c1\nWall time: 0.1523 seconds\nProcess exited with code 0\n"
        "Original token count: 1\nOutput:\nhi\n"
    )
    running = ExecCommandToolOutput("abcdef", 1.0, "", 0, session_id=48213)
    assert "Process running with session ID 48213\n" in running.render()
    assert "exited" not in running.render()


def test_build_output_counts_tokens_of_the_raw_bytes() -> None:
    out = build_output(
        b"12345", wall_time_seconds=0.0, max_output_tokens=100, exit_code=0, session_id=None
    )
    assert out.original_token_count == 2
    assert len(out.chunk_id) == 6 and int(out.chunk_id, 16) >= 0


def test_truncate_with_token_budget_returns_original_when_under_limit() -> None:
    assert truncate_middle("short output", 100) == ("short output", False)


def test_truncate_with_token_budget_reports_truncation_at_zero_limit() -> None:
    assert truncate_middle("abcdef", 0) == ("…2 tokens truncated…", True)


def test_truncate_middle_tokens_handles_utf8_content() -> None:
    text = "😀" * 10 + "\nsecond line with text\n"
    assert truncate_middle(text, 8) == ("😀😀😀😀…8 tokens truncated… line with text\n", True)


def test_truncated_text_gets_the_warning_lines() -> None:
    text = "".join(f"line {i}\n" for i in range(100))
    out = format_truncated(text, 10)
    original = approx_token_count(len(text))
    assert out.startswith(
        f"Warning: truncated output (original token count: {original})\nTotal output lines: 100\n\n"
    )
    assert format_truncated("small", 10) == "small"


def test_unified_exec_env_injects_defaults() -> None:
    env = unified_exec_env()
    assert env == dict(UNIFIED_EXEC_ENV)
    assert env["NO_COLOR"] == "1" and env["TERM"] == "dumb" and env["CODEX_CI"] == "1"
    assert env["LANG"] == env["LC_CTYPE"] == env["LC_ALL"] == "C.UTF-8"
    assert env["PAGER"] == env["GIT_PAGER"] == env["GH_PAGER"] == "cat"
    assert env["COLORTERM"] == ""


def test_unified_exec_env_overrides_existing_values() -> None:
    env = unified_exec_env({"TERM": "xterm", "PAGER": "less", "KEEP": "1"})
    assert (env["TERM"], env["PAGER"], env["KEEP"]) == ("dumb", "cat", "1")
