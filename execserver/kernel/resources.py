"""Objects the composition root creates at start-up for the services, found by type.

Like aiohttp's ``app[AppKey]``, but keyed by the object's class (as
:class:`~execserver.kernel.scoped.ScopedState` is): the runner stores e.g. the
per-process cgroups once, and a handler asks for ``resources.get(ProcessCgroups)``.
The kernel never learns those types, and a server built without an object
(no limits configured, a test runtime) answers None.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["Resources"]

T = TypeVar("T")


class Resources:
    def __init__(self) -> None:
        self._items: dict[type[Any], Any] = {}

    def provide(self, cls: type[T], value: T) -> None:
        """Store ``value`` as the one ``cls`` of this server."""
        if cls in self._items:
            raise ValueError(f"a {cls.__name__} is already provided")
        self._items[cls] = value

    def get(self, cls: type[T]) -> T | None:
        """The object stored under ``cls``, or None when the server was built without one."""
        value: T | None = self._items.get(cls)
        return value
