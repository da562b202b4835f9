"""The daemon's kernel keyring: a fresh, empty session keyring of its own.

Every child inherits the daemon's session keyring. The one the daemon was
started with belongs to whoever started it (a login session, a service
manager) and may hold credentials (kerberos tickets, fscrypt keys, tokens
added with ``keyctl``). Joining a new anonymous session keyring at start-up
means no child — sandboxed or not — *possesses* those keys; sandboxed
children additionally cannot call ``keyctl``/``add_key``/``request_key`` at all
(seccomp) and see no ``/proc/keys`` under bwrap.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Final

__all__ = ["isolate_session_keyring"]

_LOG = logging.getLogger(__name__)
_KEYCTL: Final = {"x86_64": 250, "aarch64": 219}
_KEYCTL_JOIN_SESSION_KEYRING: Final = 1


def isolate_session_keyring() -> bool:
    """Join a new anonymous session keyring; False when the kernel refuses (no
    keyrings, or keyctl filtered by a container runtime: nothing to isolate)."""
    number = _KEYCTL.get(os.uname().machine)
    if number is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(number, _KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        _LOG.info("session keyring not isolated: %s", os.strerror(ctypes.get_errno()))
        return False
    return True
