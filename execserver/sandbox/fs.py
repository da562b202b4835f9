"""Whether an fs/* call must run in a sandboxed helper.

The helper itself, its protocol, its pool and the client that drives them are
the fs service's (``execserver/fs/sandboxed/``); what the sandbox package
offers them is generic: policy resolution (``policy.py``), the plans a helper
is launched with and the one spawn point (``fs_helper/launch.py``), the
private runtime (``fs_helper/runtime.py``), the confinement and mount watch
that run inside a helper, and file identities (``fs_helper/identity.py``).
"""

from __future__ import annotations

from execserver.sandbox.policy import restricts_access
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = ["needs_sandboxed_fs"]


def needs_sandboxed_fs(context: FileSystemSandboxContext, *, write: bool) -> bool:
    """False when the relevant access is unrestricted: the caller
    then runs the operation in-process, as the reference does."""
    return restricts_access(context, write=write)
