"""exec_command / write_stdin parameters: a typed struct, and a strict decoder
for the dict a tool call hands in (an unknown key is an error naming it, not
silently ignored)."""

from __future__ import annotations

import dataclasses

import pytest

from execserver.core.policy import SandboxPermissions
from execserver.core.unified_exec import ExecCommandParams, WriteStdinParams
from execserver.core.unified_exec.params import ParamError


@pytest.mark.parametrize("typo", ["yeild_time_ms", "work_dir", "Cmd", "timeout"])
def test_exec_command_refuses_an_unknown_key_and_names_it(typo: str) -> None:
    with pytest.raises(ParamError) as info:
        ExecCommandParams.from_json({"cmd": "ls", typo: 500})
    message = str(info.value)
    assert f"unknown field `{typo}`" in message
    assert "exec_command" in message
    # The model learns what it may send instead.
    assert "`yield_time_ms`" in message and "`workdir`" in message


@pytest.mark.parametrize("typo", ["session", "char", "yield_ms"])
def test_write_stdin_refuses_an_unknown_key_and_names_it(typo: str) -> None:
    with pytest.raises(ParamError) as info:
        WriteStdinParams.from_json({"session_id": 1000, typo: 1})
    message = str(info.value)
    assert f"unknown field `{typo}`" in message
    assert "write_stdin" in message
    assert "`chars`" in message


def test_every_field_of_the_struct_is_a_key_the_decoder_accepts() -> None:
    exec_keys: dict[str, object] = {
        "cmd": "ls",
        "workdir": "sub",
        "shell": "/bin/sh",
        "login": False,
        "tty": True,
        "yield_time_ms": 500,
        "max_output_tokens": 100,
        "sandbox_permissions": "require_escalated",
        "additional_permissions": None,
        "justification": "why",
        "prefix_rule": ["ls"],
    }
    assert set(exec_keys) == {f.name for f in dataclasses.fields(ExecCommandParams)}
    params = ExecCommandParams.from_json(exec_keys)
    assert params == ExecCommandParams(
        cmd="ls",
        workdir="sub",
        shell="/bin/sh",
        login=False,
        tty=True,
        yield_time_ms=500,
        max_output_tokens=100,
        sandbox_permissions=SandboxPermissions.REQUIRE_ESCALATED,
        justification="why",
        prefix_rule=("ls",),
    )
    stdin_keys: dict[str, object] = {
        "session_id": 1000,
        "chars": "x",
        "yield_time_ms": 300,
        "max_output_tokens": 5,
    }
    assert set(stdin_keys) == {f.name for f in dataclasses.fields(WriteStdinParams)}
    assert WriteStdinParams.from_json(stdin_keys) == WriteStdinParams(1000, "x", 300, 5)


def test_the_typed_form_is_frozen_and_refuses_a_typo_at_construction() -> None:
    params = ExecCommandParams(cmd="ls")
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.cmd = "rm"  # type: ignore[misc]
    with pytest.raises(TypeError, match="yeild_time_ms"):
        ExecCommandParams(cmd="ls", yeild_time_ms=1)  # type: ignore[call-arg]
