"""The environment a child gets by default from ``run()`` and
``start_process()``: the executor's own, minus the names codex filters.

Apart from ``defaults.py`` because it needs the wire types (msgspec), which the
one-shot commands' blocking session must not load just to read a timeout."""

from __future__ import annotations

from typing import Final

from execserver.wire.process import ExecEnvPolicy

__all__ = ["INHERIT_ENV_POLICY", "env_policy_for"]

# The executor's own environment, minus the names codex filters by default
# (KEY, SECRET, TOKEN): what run() and start_process() give a child by default.
INHERIT_ENV_POLICY: Final = ExecEnvPolicy(
    inherit="all", ignore_default_excludes=False, exclude=[], set={}, include_only=[]
)


def env_policy_for(env_policy: ExecEnvPolicy | None, inherit_env: bool) -> ExecEnvPolicy | None:
    """The ``envPolicy`` a request sends: the caller's own, else inherit (the
    default), else none (the child gets exactly ``env``)."""
    if env_policy is not None:
        return env_policy
    return INHERIT_ENV_POLICY if inherit_env else None
