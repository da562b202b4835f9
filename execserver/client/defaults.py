"""The client's defaults, shared by the async client (``connection.py``) and the
blocking session of the one-shot commands (``blocking_rpc.py``), which must not
import the async client to read them."""

from __future__ import annotations

from typing import Final

from execserver.wire.process import ExecEnvPolicy

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_CLIENT_NAME",
    "INHERIT_ENV_POLICY",
    "INITIALIZE_TIMEOUT",
    "REQUEST_TIMEOUT",
    "env_policy_for",
]

# The name a client gives in initialize.
DEFAULT_CLIENT_NAME: Final = "execserver-client"
CONNECT_TIMEOUT: Final = 10.0
INITIALIZE_TIMEOUT: Final = 10.0
REQUEST_TIMEOUT: Final = 60.0

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
