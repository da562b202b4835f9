"""Serialise a TOML document the way the reference (Rust ``toml`` crate) does.

Used for the projected ``toml`` text of environmentConfig/read layers. In each
table the plain values come first (key order kept), then sub-tables as
``[a.b]`` sections and arrays of tables as ``[[a.b]]``; a table holding only
sub-tables gets no header of its own; sections are separated by a blank line.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

__all__ = ["dumps"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _basic(key)


def _basic(text: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _has_controls(text: str, allowed: str = "") -> bool:
    return any((ord(c) < 0x20 or ord(c) == 0x7F) and c not in allowed for c in text)


def _string(text: str) -> str:
    if "\n" in text and not _has_controls(text, "\n\t"):
        body = text.replace("\\", "\\\\").replace('"""', '""\\"')
        return '"""\n' + body + '"""'
    if '"' in text and "'" not in text and not _has_controls(text, "\t"):
        return "'" + text + "'"
    return _basic(text)


def _float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(value)
    return text if any(c in text for c in ".en") else text + ".0"


def _datetime(value: dt.datetime | dt.date | dt.time) -> str:
    if isinstance(value, dt.datetime):
        text = value.replace(tzinfo=None).isoformat()
        offset = value.utcoffset()
        if offset is None:
            return text
        if offset == dt.timedelta(0):
            return text + "Z"
        return text + value.isoformat()[-6:]
    return value.isoformat()


def value_repr(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return _datetime(value)
    if isinstance(value, list):
        return "[" + ", ".join(value_repr(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_key(k)} = {value_repr(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"not a TOML value: {type(value).__name__}")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def dumps(document: dict[str, Any]) -> str:
    sections: list[str] = []
    _emit_table(document, [], sections, top=True)
    return "\n".join(sections)


def _emit_table(table: dict[str, Any], path: list[str], sections: list[str], *, top: bool) -> None:
    plain = [(k, v) for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)]
    header = ".".join(_key(p) for p in path)
    lines = [f"{_key(k)} = {value_repr(v)}\n" for k, v in plain]
    has_children = any(isinstance(v, dict) or _is_table_array(v) for v in table.values())
    if top:
        if lines:
            sections.append("".join(lines))
    elif lines or not has_children:
        sections.append(f"[{header}]\n" + "".join(lines))
    for key, value in table.items():
        if isinstance(value, dict):
            _emit_table(value, [*path, key], sections, top=False)
        elif _is_table_array(value):
            for item in value:
                _emit_array_item(item, [*path, key], sections)


def _emit_array_item(item: dict[str, Any], path: list[str], sections: list[str]) -> None:
    header = ".".join(_key(p) for p in path)
    plain = [(k, v) for k, v in item.items() if not isinstance(v, dict) and not _is_table_array(v)]
    sections.append(f"[[{header}]]\n" + "".join(f"{_key(k)} = {value_repr(v)}\n" for k, v in plain))
    for key, value in item.items():
        if isinstance(value, dict):
            _emit_table(value, [*path, key], sections, top=False)
        elif _is_table_array(value):
            for sub in value:
                _emit_array_item(sub, [*path, key], sections)
