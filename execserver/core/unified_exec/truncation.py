"""What the model gets to read of a command's output.

Tokens are approximated as 4 bytes. Over budget, the middle is cut on UTF-8
character boundaries and replaced by ``…N tokens truncated…``; the start and
the end of the output are usually what matters (the command echo, the error
at the bottom).
"""

from __future__ import annotations

__all__ = ["approx_token_count", "format_truncated", "truncate_middle"]

BYTES_PER_TOKEN = 4


def approx_token_count(byte_count: int) -> int:
    return -(-byte_count // BYTES_PER_TOKEN)


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def truncate_middle(text: str, max_tokens: int) -> tuple[str, bool]:
    """``(text, truncated)`` with at most about ``max_tokens`` tokens kept."""
    data = text.encode("utf-8")
    budget = max(0, max_tokens) * BYTES_PER_TOKEN
    if len(data) <= budget:
        return text, False
    left = budget // 2
    right = len(data) - (budget - left)
    while left > 0 and _is_continuation(data[left]):
        left -= 1
    while right < len(data) and _is_continuation(data[right]):
        right += 1
    removed = approx_token_count(len(data) - budget)
    head = data[:left].decode("utf-8")
    tail = data[right:].decode("utf-8")
    return f"{head}…{removed} tokens truncated…{tail}", True


def format_truncated(text: str, max_tokens: int) -> str:
    """The model-visible text: truncated text with the warning lines in front
    when anything was cut, the text unchanged otherwise."""
    out, truncated = truncate_middle(text, max_tokens)
    if not truncated:
        return text
    original = approx_token_count(len(text.encode("utf-8")))
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return (
        f"Warning: truncated output (original token count: {original})\n"
        f"Total output lines: {lines}\n\n{out}"
    )
