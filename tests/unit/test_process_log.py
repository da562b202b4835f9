"""The output log: seq numbering, cursor reads, retention cap, eviction as seq gaps."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from execserver.processes.log import OutputLog

# An operation is an output chunk (stream, size) or a non-output event (exit/close).
_ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["stdout", "stderr", "pty"]), st.integers(0, 9000)),
        st.just(("event", 0)),
    ),
    max_size=120,
)


def _fill(log: OutputLog, ops: list[tuple[str, int]]) -> dict[int, bytes]:
    """Apply ops; returns every output chunk ever appended by seq."""
    written: dict[int, bytes] = {}
    for stream, size in ops:
        if stream == "event":
            log.reserve()
        else:
            data = bytes([len(written) % 256]) * size
            written[log.append(stream, data)] = data
    return written


@settings(max_examples=300, deadline=None)
@given(ops=_ops, cap=st.integers(1, 64 * 1024), budget=st.none() | st.integers(0, 40000))
def test_cursor_reads_never_duplicate_or_skip_retained_chunks(
    ops: list[tuple[str, int]], cap: int, budget: int | None
) -> None:
    log = OutputLog(cap)
    written = _fill(log, ops)
    retained = log.since(0)
    seqs = [c.seq for c in retained]
    # Seq strictly increasing; retained bytes within the cap.
    assert seqs == sorted(set(seqs))
    assert log.retained_bytes == sum(len(c.data) for c in retained) <= cap
    # What is retained is exactly the newest chunks: anything missing is a seq gap,
    # and every retained chunk is byte-for-byte what was appended.
    newest = sorted(written)[len(written) - len(seqs) :] if seqs else []
    assert seqs == newest
    assert all(c.data == written[c.seq] for c in retained)
    # Following nextSeq visits every retained chunk exactly once, in order.
    visited: list[int] = []
    after = 0
    for _ in range(len(retained) + 2):
        chunks, next_seq = log.read(after, budget)
        if not chunks:
            assert next_seq == log.next_seq
            break
        assert chunks[0].seq > after
        visited.extend(c.seq for c in chunks)
        if budget is not None and len(chunks) > 1:
            assert sum(len(c.data) for c in chunks) <= budget
        after = next_seq - 1
    assert visited == seqs


def test_seq_is_shared_by_output_and_events() -> None:
    log = OutputLog()
    assert log.append("stdout", b"a") == 1
    assert log.reserve() == 2  # exit
    assert log.append("stdout", b"late") == 3
    assert log.reserve() == 4  # close
    chunks, next_seq = log.read(0, None)
    assert [c.seq for c in chunks] == [1, 3] and next_seq == 5


def test_first_chunk_is_returned_even_over_budget_and_cuts_next_seq() -> None:
    log = OutputLog()
    for word in (b"one\n", b"two\n", b"three\n"):
        log.append("stdout", word)
    log.reserve()
    log.reserve()
    assert [(c.seq, c.data) for c in log.read(0, 1)[0]] == [(1, b"one\n")]
    assert log.read(0, 1)[1] == 2
    assert log.read(0, 8)[1] == 3
    # With a budget the reference reports last-returned + 1 even when nothing was cut.
    assert log.read(2, 100) == ([log.since(2)[0]], 4)
    assert log.read(0, None)[1] == 6
    assert log.read(3, 100) == ([], 6)


def test_eviction_drops_whole_oldest_chunks() -> None:
    log = OutputLog(cap_bytes=10)
    for i in range(5):
        log.append("stdout", bytes([i]) * 4)
    assert [c.seq for c in log.since(0)] == [4, 5]
    assert log.retained_bytes == 8
    assert log.has_after(4) and not log.has_after(5)


@settings(max_examples=200)
@given(_ops, st.integers(0, 9000), st.integers(0, 130))
def test_evicts_after_says_exactly_whether_an_append_would_drop_a_kept_chunk(
    ops: list[tuple[str, int]], size: int, kept_from: int
) -> None:
    log = OutputLog(64 * 1024)
    _fill(log, ops)
    before = {c.seq for c in log.since(0)}
    predicted = log.evicts_after(size, kept_from)
    log.append("stdout", b"x" * size)
    dropped = before - {c.seq for c in log.since(0)}
    assert predicted == (kept_from > 0 and any(seq >= kept_from for seq in dropped))
