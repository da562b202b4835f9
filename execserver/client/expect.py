"""Matching a process's output against a pattern (``RemoteProcess.expect``).

What pexpect's ``expect`` and asyncssh's ``readuntil`` do, over the event
stream: output events are held while they are searched; on a match the output
up to the end of the match is consumed and everything after it stays held, so
the next ``expect`` or ``async for event in proc`` sees it (an event split by
the match is given back as a shorter ``Output`` with the same seq).

``str`` and ``bytes`` patterns are literal text (as ``readuntil``: a prompt
such as ``"$ "`` must not be read as a regex); a compiled ``re.Pattern`` is a
regular expression. ``str`` patterns see the output decoded as UTF-8; bytes
that are not UTF-8 are carried as surrogate escapes, so offsets map back to
the exact bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import AnyStr, Generic

from execserver.client.events import Output, ProcessEvent

__all__ = ["ExpectMatch", "Pattern", "find", "held_output", "split_at", "wants_text"]

Pattern = str | bytes | re.Pattern[str] | re.Pattern[bytes]


@dataclass(frozen=True)
class ExpectMatch(Generic[AnyStr]):
    """What :meth:`RemoteProcess.expect` found: ``before`` is the output before
    the match, ``after`` the matched text, ``match`` the ``re.Match`` itself
    (``str`` for a ``str`` pattern, else ``bytes``)."""

    match: re.Match[AnyStr]
    before: AnyStr

    @property
    def after(self) -> AnyStr:
        return self.match.group(0)


def _compiled(pattern: Pattern) -> re.Pattern[str] | re.Pattern[bytes]:
    if isinstance(pattern, str):
        return re.compile(re.escape(pattern))
    if isinstance(pattern, bytes):
        return re.compile(re.escape(pattern))
    if isinstance(pattern, re.Pattern):
        return pattern
    raise TypeError(f"expect() takes str, bytes or re.Pattern, not {type(pattern).__name__}")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _readable(text: str) -> str:
    """A surrogate-escaped text as a caller should see it (invalid bytes -> U+FFFD)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def find(
    pattern: Pattern, held: Sequence[ProcessEvent]
) -> tuple[ExpectMatch[str] | ExpectMatch[bytes], int] | None:
    """Search the held output; the match and how many bytes it consumes (up to
    the match's end), or None. (A match's groups may hold surrogate escapes
    where the output was not UTF-8; ``before`` has U+FFFD there.)"""
    compiled = _compiled(pattern)
    data = _joined(held)
    if isinstance(compiled.pattern, str):
        text_pattern: re.Pattern[str] = compiled
        text = _decode(data)
        found = text_pattern.search(text)
        if found is None:
            return None
        end = len(text[: found.end()].encode("utf-8", "surrogateescape"))
        return ExpectMatch(found, _readable(text[: found.start()])), end
    bytes_pattern: re.Pattern[bytes] = compiled
    found_bytes = bytes_pattern.search(data)
    if found_bytes is None:
        return None
    return ExpectMatch(found_bytes, data[: found_bytes.start()]), found_bytes.end()


def _joined(held: Sequence[ProcessEvent]) -> bytes:
    return b"".join(event.data for event in held if isinstance(event, Output))


def split_at(held: Sequence[ProcessEvent], consumed: int) -> list[ProcessEvent]:
    """What remains held after the first ``consumed`` bytes of output are taken
    (events without data, such as ``Exited``, stay where they are)."""
    remaining: list[ProcessEvent] = []
    for event in held:
        if not isinstance(event, Output):
            remaining.append(event)
            continue
        if consumed >= len(event.data):
            consumed -= len(event.data)
            continue
        if consumed:
            event = Output(event.seq, event.stream, event.data[consumed:])
            consumed = 0
        remaining.append(event)
    return remaining


def held_output(held: Sequence[ProcessEvent], text: bool) -> bytes | str:
    data = _joined(held)
    return data.decode("utf-8", "replace") if text else data


def wants_text(pattern: Pattern) -> bool:
    return isinstance(_compiled(pattern).pattern, str)
