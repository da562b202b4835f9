"""Typed slots for objects the composition root creates at start-up for one service.

Like aiohttp's ``app[AppKey]``: the service that needs an object declares its
key, the runner stores the object under it once, and handlers read it back
typed. The kernel itself never learns those objects' types.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

__all__ = ["ResourceKey", "Resources"]

T = TypeVar("T")


class ResourceKey(Generic[T]):
    """The name and (through its type parameter) the type of one start-up object."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"ResourceKey({self.name!r})"


class Resources:
    def __init__(self) -> None:
        self._items: dict[ResourceKey[Any], Any] = {}

    def set(self, key: ResourceKey[T], value: T) -> None:
        self._items[key] = value

    def get(self, key: ResourceKey[T], default: T) -> T:
        """The stored object, or ``default`` when the server was built without it."""
        value: T = self._items.get(key, default)
        return value
