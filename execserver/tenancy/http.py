"""http/request of a tenant: refused unless its profile allows it, and then only to
the hosts it lists. The executor's network is not the tenant's: a request from the
daemon reaches 127.0.0.1 (another tenant's dev server, the metrics port) and
whatever the host can, so this is an SSRF primitive that only the operator may open.
"""

from __future__ import annotations

from execserver.tenancy.ceiling import refused
from execserver.tenancy.profile import TenantProfile

__all__ = ["check_http_request"]


def check_http_request(profile: TenantProfile, host: str, *, follow: bool) -> None:
    allowed = profile.http_request
    if allowed is False:
        raise refused(profile, "http/request is not allowed by its profile")
    if allowed is True:
        return
    if host.lower() not in allowed:
        raise refused(profile, f"http/request to host {host} is outside its allow-list")
    if follow:
        # A redirect would leave the allow-list with no check in between.
        raise refused(profile, "http/request may not follow redirects under a host allow-list")
