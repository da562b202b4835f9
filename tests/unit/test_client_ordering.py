"""SeqOrderer: events published strictly by seq, exactly once, holes filled from reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from execserver.client.events import Closed, Exited, Output, SeqEvent
from execserver.client.ordering import SeqOrderer
from execserver.wire.process import ProcessOutputChunk, ReadResponse


def out(seq: int, data: bytes = b"x") -> Output:
    return Output(seq, "stdout", data)


def read(
    chunks: list[tuple[int, bytes]],
    next_seq: int,
    *,
    exited: bool = False,
    exit_code: int | None = None,
    closed: bool = False,
    sandbox_denied: bool = False,
) -> ReadResponse:
    return ReadResponse(
        chunks=[ProcessOutputChunk(seq, "stdout", data) for seq, data in chunks],
        next_seq=next_seq,
        exited=exited,
        exit_code=exit_code,
        closed=closed,
        failure=None,
        sandbox_denied=sandbox_denied,
    )


def test_in_order_events_are_published_at_once() -> None:
    o = SeqOrderer()
    assert o.push(out(1)) == [out(1)]
    assert o.push(Exited(2, 0, False)) == [Exited(2, 0, False)]
    assert o.push(Closed(3)) == [Closed(3)]
    assert o.closed_published


def test_process_events_are_delivered_in_seq_order_when_notifications_are_reordered() -> None:
    o = SeqOrderer()
    assert o.push(Exited(3, 0, False)) == []
    assert o.push(out(2)) == []
    assert o.has_gap
    assert o.push(out(1)) == [out(1), out(2), Exited(3, 0, False)]
    assert not o.has_gap


def test_duplicates_are_dropped() -> None:
    o = SeqOrderer()
    o.push(out(1))
    assert o.push(out(1)) == []
    o.push(out(3))
    assert o.push(out(3)) == []


def test_nothing_is_published_after_closed() -> None:
    o = SeqOrderer()
    o.push(Closed(1))
    assert o.push(out(2)) == []
    assert o.push(Exited(2, 0, False)) == []


def test_reconcile_fills_output_holes_from_chunks() -> None:
    o = SeqOrderer()
    o.push(out(1, b"a"))
    o.push(out(4, b"d"))
    result = o.reconcile(read([(2, b"b"), (3, b"c"), (4, b"d")], next_seq=5))
    assert result.unexplained == []
    assert result.events == [out(2, b"b"), out(3, b"c"), out(4, b"d")]


def test_reconcile_synthesises_missed_exit_and_close() -> None:
    o = SeqOrderer()
    o.push(out(1))
    result = o.reconcile(
        read([(2, b"y")], next_seq=5, exited=True, exit_code=7, closed=True, sandbox_denied=True)
    )
    assert result.events == [out(2, b"y"), Exited(3, 7, True), Closed(4)]
    assert o.closed_published


def test_reconcile_places_exit_between_output_when_it_took_the_middle_seq() -> None:
    # exited got seq 2 and trailing output seq 3.
    o = SeqOrderer()
    o.push(out(1))
    o.push(out(3))
    result = o.reconcile(read([(1, b"x"), (3, b"x")], next_seq=4, exited=True, exit_code=0))
    assert result.events == [Exited(2, 0, False), out(3)]


def test_reconcile_does_not_synthesise_a_seen_exit_twice() -> None:
    o = SeqOrderer()
    o.push(out(1))
    o.push(Exited(2, 0, False))
    result = o.reconcile(read([], next_seq=4, exited=True, exit_code=0, closed=True))
    assert result.events == [Closed(3)]


def test_reconcile_reports_output_the_server_no_longer_retains() -> None:
    o = SeqOrderer()
    o.push(out(1))
    result = o.reconcile(read([(5, b"e")], next_seq=6))
    assert result.unexplained == [2, 3, 4]
    assert o.last_published == 1


def test_reconcile_waits_when_an_unexplained_seq_may_still_arrive() -> None:
    # Seq 2 is neither a returned chunk nor a reported exit: not publishable yet.
    o = SeqOrderer()
    o.push(out(1))
    o.push(out(3))
    result = o.reconcile(read([(3, b"x")], next_seq=4))
    assert result.unexplained == [2]
    assert o.push(Exited(2, 1, False)) == [Exited(2, 1, False), out(3)]


@given(st.permutations(list(range(1, 12))), st.lists(st.integers(1, 11), max_size=5))
def test_any_arrival_order_publishes_each_event_once_in_order(
    order: list[int], dups: list[int]
) -> None:
    def event(seq: int) -> SeqEvent:
        if seq == 11:
            return Closed(seq)
        if seq == 7:
            return Exited(seq, 0, False)
        return out(seq)

    o = SeqOrderer()
    published: list[SeqEvent] = []
    for seq in [*order[:5], *dups, *order[5:]]:
        published += o.push(event(seq))
    assert [e.seq for e in published] == list(range(1, 12))
