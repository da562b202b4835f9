"""serde_json's syntax error texts (``expected value at line 1 column 5``) for a
frame that is not JSON, translated from Python's ``json`` error and position."""

from __future__ import annotations

import json

__all__ = ["serde_syntax_error"]


def _line_col(text: str, pos: int, at_eof: bool) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    line_start = text.rfind("\n", 0, pos) + 1
    col_bytes = len(text[line_start:pos].encode("utf-8"))
    return line, col_bytes if at_eof else col_bytes + 1


def serde_syntax_error(text: str, exc: json.JSONDecodeError) -> str:
    """Translate Python's JSON error into serde_json's wording and position."""
    pos = exc.pos
    at_eof = text[pos:].strip() == ""
    msg = exc.msg
    if msg.startswith("Expecting value"):
        reason = "EOF while parsing a value" if at_eof else "expected value"
        if not at_eof and text[pos] in "]}" and text[:pos].rstrip().endswith(","):
            reason = "trailing comma"
    elif msg.startswith("Extra data"):
        reason = "trailing characters"
    elif msg.startswith("Expecting ',' delimiter"):
        in_object = _innermost_container(text, pos) == "{"
        if at_eof:
            reason = "EOF while parsing an object" if in_object else "EOF while parsing a list"
        else:
            reason = "expected `,` or `}`" if in_object else "expected `,` or `]`"
    elif msg.startswith("Expecting ':' delimiter"):
        reason = "EOF while parsing an object" if at_eof else "expected `:`"
    elif msg.startswith("Expecting property name"):
        if at_eof:
            reason = "EOF while parsing an object"
        elif text[pos] == "}":
            reason = "trailing comma"
        else:
            reason = "key must be a string"
    elif msg.startswith("Unterminated string"):
        reason = "EOF while parsing a string"
        pos, at_eof = len(text), True
    elif msg.startswith("Invalid control character"):
        reason = "control character (\\u0000-\\u001F) found while parsing a string"
    elif msg.startswith("Invalid \\escape") or msg.startswith("Invalid \\uXXXX"):
        reason = "invalid escape"
    else:
        reason = "expected value"
    line, col = _line_col(text, pos, at_eof)
    return f"{reason} at line {line} column {col}"


def _innermost_container(text: str, pos: int) -> str:
    """Best-effort: which bracket encloses ``pos`` (ignores brackets inside strings)."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append(ch)
        elif ch in "]}" and stack:
            stack.pop()
    return stack[-1] if stack else "{"
