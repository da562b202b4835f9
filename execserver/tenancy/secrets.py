"""The modes of the daemon's own secrets (token file, JWT shared secret, tenants
file) once tenants run on the host: a secret a tenant's account can read is a
credential of every other tenant (a JWT secret mints any ``sub``). Checked at
start-up and on every reload; a file that fails is refused, never used."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from execserver.sandbox.plan import Credentials

__all__ = ["SecretModeError", "check_private"]


class SecretModeError(ValueError):
    pass


def check_private(path: str, what: str, tenants: Sequence[Credentials] = ()) -> None:
    """Refuse ``path`` when others may read it: world-readable or -writable always;
    group-readable when a tenant is in its group; owned by a tenant."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise SecretModeError(f"{what} {path}: {exc.strerror}") from None
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_IROTH | stat.S_IWOTH):
        raise SecretModeError(
            f"{what} {path} is readable or writable by others (mode {mode:04o}); chmod o-rw it"
        )
    for tenant in tenants:
        if info.st_uid == tenant.uid:
            raise SecretModeError(f"{what} {path} is owned by tenant account {tenant.user}")
        if mode & (stat.S_IRGRP | stat.S_IWGRP) and info.st_gid in tenant.groups:
            raise SecretModeError(
                f"{what} {path} is readable by group {info.st_gid}, which tenant account "
                f"{tenant.user} is in (mode {mode:04o}); chmod g-rw it"
            )
