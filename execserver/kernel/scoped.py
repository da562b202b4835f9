"""Per-session and per-connection state owned by services.

Services (processes, fs handles, watches, http streams) keep their state in
the scope it belongs to (a session's processes outlive its connection)
without the server knowing their types: ``scope.get(ProcessTable, factory)``.
Closing the scope closes every piece of state in reverse creation order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = ["Closeable", "ScopedState"]

log = logging.getLogger(__name__)


class Closeable(Protocol):
    async def aclose(self) -> None: ...


S = TypeVar("S", bound=Closeable)


class ScopedState:
    def __init__(self, name: str) -> None:
        self._name = name
        self._items: dict[type[object], Closeable] = {}
        self._closed = False

    def get(self, cls: type[S], factory: Callable[[], S]) -> S:
        item = self._items.get(cls)
        if item is None:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed")
            item = factory()
            self._items[cls] = item
        return item  # type: ignore[return-value]

    def peek(self, cls: type[S]) -> S | None:
        return self._items.get(cls)  # type: ignore[return-value]

    async def aclose(self) -> None:
        self._closed = True
        for item in reversed(list(self._items.values())):
            try:
                await item.aclose()
            except Exception:
                log.exception("error while closing %s state %r", self._name, item)
        self._items.clear()
