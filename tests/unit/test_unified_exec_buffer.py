"""The head/tail output buffer (cases ported from the Codex buffer tests)."""

from __future__ import annotations

from execserver.core.unified_exec.buffer import DEFAULT_MAX_BYTES, HeadTailBuffer


def test_head_tail_buffer_default_preserves_prefix_and_suffix() -> None:
    buf = HeadTailBuffer()
    assert buf.max_bytes == DEFAULT_MAX_BYTES == 1024 * 1024
    buf.push(b"BEGIN" + b"x" * DEFAULT_MAX_BYTES)
    buf.push(b"END")
    data = buf.contents()
    assert data.startswith(b"BEGIN") and data.endswith(b"END")
    assert len(data) == DEFAULT_MAX_BYTES
    assert buf.omitted == 5 + 3


def test_push_chunk_preserves_prefix_and_suffix() -> None:
    buf = HeadTailBuffer(10)
    buf.push(b"0123456789abcdef")
    assert buf.contents() == b"01234bcdef"
    assert buf.omitted == 6


def test_keeps_prefix_and_suffix_when_over_budget() -> None:
    buf = HeadTailBuffer(8)
    for chunk in (b"aaaa", b"bbbb", b"cccc", b"dddd"):
        buf.push(chunk)
    assert buf.render() == b"aaaa\n... 8 bytes omitted ...\ndddd"


def test_max_bytes_zero_drops_everything() -> None:
    buf = HeadTailBuffer(0)
    buf.push(b"anything")
    assert buf.contents() == b""
    assert buf.omitted == 8


def test_head_budget_zero_keeps_only_last_byte_in_tail() -> None:
    buf = HeadTailBuffer(1)
    buf.push(b"abc")
    buf.push(b"de")
    assert buf.contents() == b"e"
    assert buf.omitted == 4


def test_draining_resets_state() -> None:
    buf = HeadTailBuffer(4)
    buf.push(b"123456")
    assert buf.drain() == (b"12\n... 2 bytes omitted ...\n56", 2)
    assert (len(buf), buf.omitted, buf.contents()) == (0, 0, b"")
    buf.push(b"xy")
    assert buf.drain() == (b"xy", 0)


def test_chunk_larger_than_tail_budget_keeps_only_tail_end() -> None:
    buf = HeadTailBuffer(6)
    buf.push(b"hea")
    buf.push(b"t1")
    buf.push(b"0123456789")
    assert buf.contents() == b"hea789"
    assert buf.omitted == 2 + 7


def test_fills_head_then_tail_across_multiple_chunks() -> None:
    buf = HeadTailBuffer(6)
    buf.push(b"ab")
    buf.push(b"cd")
    assert buf.contents() == b"abcd"
    buf.push(b"ef")
    buf.push(b"gh")
    assert buf.contents() == b"abcfgh"
    assert buf.omitted == 2


def test_empty_and_tiny_chunks_have_bounded_metadata() -> None:
    buf = HeadTailBuffer(64 * 1024)
    for _ in range(200_000):
        buf.push(b"")
        buf.push(b"x")
    assert len(buf) == 64 * 1024
    assert buf.total_seen == 200_000
    assert buf.tail_chunks <= 16
