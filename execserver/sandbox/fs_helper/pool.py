"""TEMPORARY: kept only because execserver/server/runtime.py still calls
``close_loop_pool()`` at shutdown.

The fs helper pool is the fs service's now (``execserver/fs/sandboxed/pool.py``),
owned by its client in the server's scoped state and closed with it
(``ServerRuntime.aclose`` → ``state.aclose()``), with no module global. Once
runtime.py drops its call, this module goes.
"""

from __future__ import annotations

__all__ = ["close_loop_pool"]


async def close_loop_pool() -> None:
    """Nothing left to close here: the pool closes with the server's state."""
