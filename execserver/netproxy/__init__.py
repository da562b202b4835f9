"""Executor-side managed network: a per-process egress proxy.

``process/start`` with ``networkProxy`` starts a :class:`ProcessNetworkProxy`
(``launch.py``) that listens on loopback for HTTP (CONNECT and absolute-form)
and optionally SOCKS5, decides each destination with the request's policy
(``policy.py``, ``engine.py``), asks the client with ``network/policyRequest``
about undecided hosts, reports every decision with ``network/policyDecision``,
and answers blocked requests with 403. A sandboxed child reaches it only
through a bridge inside its network namespace (``sandbox.py``, ``bridge.py``).
See docs/managed-network.md.
"""

__all__: list[str] = []
