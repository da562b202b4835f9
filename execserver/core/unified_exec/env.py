"""Environment pins for unified-exec processes.

They make command output plain and non-interactive (no colour, no pager,
UTF-8) and override whatever the executor's environment says; they travel as
the ``env`` overlay next to the ``envPolicy`` that builds the rest.
"""

from __future__ import annotations

from collections.abc import Mapping

from execserver.wire.process import ExecEnvPolicy

__all__ = ["DEFAULT_ENV_POLICY", "UNIFIED_EXEC_ENV", "unified_exec_env"]

UNIFIED_EXEC_ENV: Mapping[str, str] = {
    "NO_COLOR": "1",
    "TERM": "dumb",
    "LANG": "C.UTF-8",
    "LC_CTYPE": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "COLORTERM": "",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GH_PAGER": "cat",
    "CODEX_CI": "1",
}

# The executor builds the child's environment from its own (as a login shell
# would see it); only the pins are layered on top.
DEFAULT_ENV_POLICY = ExecEnvPolicy(
    inherit="all", ignore_default_excludes=False, exclude=[], set={}, include_only=[]
)


def unified_exec_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The overlay: the caller's additions, then the pins, which always win."""
    env = dict(extra or {})
    env.update(UNIFIED_EXEC_ENV)
    return env
