"""A tenant's Unix account, from the account database (NSS: /etc/passwd, LDAP,
sssd...): uid, primary gid, supplementary groups and HOME, as login(1) would give
them. Looked up when the tenants file is (re)loaded, never per request."""

from __future__ import annotations

import os
import pwd

from execserver.sandbox.plan import Credentials

__all__ = ["AccountError", "lookup_account"]


class AccountError(ValueError):
    """The account does not exist (or cannot be used): the text says why."""


def lookup_account(user: str) -> Credentials:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise AccountError(f"no such user {user!r} in the account database") from None
    if entry.pw_uid == 0:
        # A tenant running as root is no tenant: every boundary below is a uid check.
        raise AccountError(f"user {user!r} is uid 0; a tenant must not run as root")
    groups = tuple(sorted(set(os.getgrouplist(user, entry.pw_gid))))
    return Credentials(
        user=user, uid=entry.pw_uid, gid=entry.pw_gid, groups=groups, home=entry.pw_dir
    )
