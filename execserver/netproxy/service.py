"""Server registration: advertise the executor-launched proxy.

``process/start`` itself (processes/service.py) starts the proxy; this module
only flips the capabilities once that works (a server that cannot
launch it must advertise ``networkProxyLaunch: false``).
"""

from __future__ import annotations

from execserver.kernel.methods import MethodTable

__all__ = ["register"]


def register(table: MethodTable) -> None:
    table.capabilities.add("network_proxy_launch")
    table.capabilities.add("network_proxy_review_domains")
    # credentialMasking / credentialProviders (netproxy.credentials), as advertised
    # by the reference.
    table.capabilities.add("credential_masking")
    table.capabilities.add("credential_masking_custom_providers")
