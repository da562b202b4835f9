"""fs/watchMissing: one one-shot watch per connection.

A call whose ``watchId`` is above every id seen on the connection replaces the
current watch (even when the new one ends up inactive); any other call answers
``watching: false`` and changes nothing. An armed watch fires
``fs/missingChanged`` once, when a missing path or one of its missing
ancestors is created (or moved in), or when ``present`` is modified,
has its attributes changed, or is removed/moved away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field

from execserver.aio.tasks import TaskSet
from execserver.fs import inotify

__all__ = ["MissingWatch"]

log = logging.getLogger(__name__)

_APPEAR = inotify.IN_CREATE | inotify.IN_MOVED_TO
_CHANGE = inotify.IN_MODIFY | inotify.IN_ATTRIB | inotify.IN_DELETE_SELF | inotify.IN_MOVE_SELF

Notify = Callable[[int], Coroutine[object, object, None]]


@dataclass
class _Armed:
    """An inotify instance watching for the first relevant event."""

    fd: int
    # wd of an existing ancestor directory -> names whose appearance fires the watch
    appear: dict[int, set[str]] = field(default_factory=dict)
    present_wd: int | None = None
    already_changed: bool = False

    def matches(self, wd: int, mask: int, name: str) -> bool:
        if name:
            # An event about an entry inside a watched directory: only an
            # appearing missing name counts (a directory watch also reports
            # IN_MODIFY/IN_ATTRIB of its children, which must not fire
            # ``present``).
            return bool(mask & _APPEAR) and name in self.appear.get(wd, ())
        return wd == self.present_wd and bool(mask & _CHANGE)


def _first_missing_step(path: str) -> tuple[str, str]:
    """The deepest existing directory above ``path`` and the next name below it."""
    child = path
    parent = os.path.dirname(child)
    while parent != child and not os.path.isdir(parent):
        child, parent = parent, os.path.dirname(parent)
    return parent, os.path.basename(child)


def arm(missing: list[str], present: str | None) -> _Armed | None:
    """Blocking: check the preconditions and set up inotify, or None (not watching)."""
    if not missing or any(os.path.exists(p) for p in missing):
        return None
    if present is not None and not os.path.exists(present):
        return None
    armed = _Armed(inotify.inotify_init())
    try:
        for path in missing:
            directory, name = _first_missing_step(path)
            wd = inotify.add_watch(armed.fd, directory, _APPEAR | inotify.IN_MASK_ADD)
            armed.appear.setdefault(wd, set()).add(name)
        if present is not None:
            armed.present_wd = inotify.add_watch(armed.fd, present, _CHANGE | inotify.IN_MASK_ADD)
        # Something may have appeared between the checks and the watches.
        armed.already_changed = any(os.path.exists(p) for p in missing)
    except BaseException:
        os.close(armed.fd)
        raise
    return armed


class MissingWatch:
    """Connection-scoped state of fs/watchMissing."""

    def __init__(self, notify: Notify) -> None:
        self._notify = notify
        self._high_water = 0
        self._armed: _Armed | None = None
        self._armed_id = 0
        # The fired watch's notification; closing the connection cancels it.
        self._tasks = TaskSet("fs-watch-missing")

    async def watch(self, watch_id: int, missing: list[str], present: str | None) -> bool:
        if watch_id == 0 or watch_id <= self._high_water:
            return False
        self._high_water = watch_id
        self._disarm()
        armed = await asyncio.to_thread(arm, missing, present)
        if armed is None:
            return False
        if watch_id != self._high_water:  # replaced while we were arming
            os.close(armed.fd)
            return False
        self._armed, self._armed_id = armed, watch_id
        if armed.already_changed:
            self._fire()
        else:
            asyncio.get_running_loop().add_reader(armed.fd, self._on_readable)
        return True

    def _on_readable(self) -> None:
        armed = self._armed
        if armed is None:
            return
        try:
            events = list(inotify.read_events(armed.fd))
        except OSError:
            log.exception("reading inotify events failed")
            self._disarm()
            return
        if any(armed.matches(wd, mask, name) for wd, mask, name in events):
            self._fire()

    def _fire(self) -> None:
        watch_id = self._armed_id
        self._disarm()
        if not self._tasks.closed:
            self._tasks.spawn(self._notify(watch_id), name=f"missing-changed-{watch_id}")

    def _disarm(self) -> None:
        armed, self._armed = self._armed, None
        if armed is None:
            return
        with contextlib.suppress(ValueError, RuntimeError):
            asyncio.get_running_loop().remove_reader(armed.fd)
        os.close(armed.fd)

    async def aclose(self) -> None:
        self._disarm()
        await self._tasks.aclose()
