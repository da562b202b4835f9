"""``run``'s keywords are written once (``execserver.client.options.RunOptions``):
the async and the blocking ``run`` take exactly that set, with the same overloads,
and ``run_command``, which does the work, takes each of them with its default."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, get_overloads

from execserver.client import sync
from execserver.client.commands import run_command
from execserver.client.connection import ExecServerClient
from execserver.client.options import RunOptions


def _shape(function: Callable[..., Any]) -> list[tuple[str, object, object, object]]:
    """Each parameter's name, kind, annotation (as written) and default."""
    return [
        (p.name, p.kind, p.annotation, p.default)
        for p in inspect.signature(function).parameters.values()
    ]


def test_the_async_and_the_sync_run_take_the_same_keywords() -> None:
    assert _shape(sync.ExecServerClient.run) == _shape(ExecServerClient.run)
    async_overloads = [_shape(f) for f in get_overloads(ExecServerClient.run)]
    sync_overloads = [_shape(f) for f in get_overloads(sync.ExecServerClient.run)]
    assert sync_overloads == async_overloads
    # Only text picks an overload (bytes or str output); the rest is RunOptions.
    assert len(async_overloads) == 2
    for shape in [*async_overloads, _shape(ExecServerClient.run)]:
        assert [name for name, *_ in shape] == ["self", "command", "text", "options"]
        assert shape[-1][1] is inspect.Parameter.VAR_KEYWORD
        assert shape[-1][2] == "Unpack[RunOptions]"


def test_run_command_takes_every_run_option_and_no_other() -> None:
    parameters = inspect.signature(run_command).parameters
    keywords = {n for n, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == set(RunOptions.__annotations__) | {"text"}
    required = {
        n
        for n, p in parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    }
    assert required == set(RunOptions.__required_keys__) == {"cwd"}
