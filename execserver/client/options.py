"""The keywords of ``run``, written once for the async and the blocking client.

``RunOptions`` is a ``TypedDict`` that both ``ExecServerClient.run`` and the
sync twin take as ``**options: Unpack[RunOptions]``: a call keeps its plain
keywords (``client.run(["cat"], cwd=p, stdin="a", text=True)``) and mypy checks
each by name and type, while the overloads are left with the one thing they
must type, ``text`` (``bytes`` or ``str`` output). A frozen dataclass would
have made every caller build an options object; a TypedDict changes no call.
Adding an option is one line here and its parameter (with its default) on
``execserver.client.commands.run_command``, which does the work; mypy checks
that the two agree wherever the options are passed on.
"""

# No ``from __future__ import annotations``: the TypedDict is read at runtime
# too (its required keys, by the test that the clients' keywords agree).
import os
from collections.abc import Callable, Mapping
from typing import Any, Required, TypedDict

from execserver.client.sandbox import Sandbox
from execserver.wire.process import ExecEnvPolicy
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = ["OutputCallback", "RunOptions"]

# on_stdout= / on_stderr=: told each piece of output as it arrives (bytes, or
# str with text=True); its return value is ignored.
OutputCallback = Callable[[Any], object]


class RunOptions(TypedDict, total=False):
    """Every keyword of ``run`` but ``text``; what each means is in ``run``'s docstring."""

    cwd: Required[str | os.PathLike[str]]
    env: Mapping[str, str] | None
    inherit_env: bool
    timeout: float | None
    check: bool
    stdin: bytes | str | None
    tty: bool
    sandbox: Sandbox | FileSystemSandboxContext | Mapping[str, object] | None
    env_policy: ExecEnvPolicy | None
    arg0: str | None
    process_id: str | None
    idle_timeout: float | None
    on_stdout: OutputCallback | None
    on_stderr: OutputCallback | None
