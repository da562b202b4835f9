"""A client cannot hold a connection open by never finishing a request head.

aiohttp reads a request head for as long as the client takes, and so does the
reference: a head sent a line at a time kept a connection (and its fd) for as
long as the client liked. The daemon gives each head ``--http-head-timeout``
(30 s by default): the first one from the connection's start (whether it is
sniffed by the listener or handed to aiohttp unfinished because it is long), each
later one on a kept-alive connection from the previous answer. The four clients
here run at once, against one real daemon started with a timeout of
``HEAD_TIMEOUT_S``, so the test takes about that long.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import pytest

from execserver.cli import build_parser, config_from_args
from execserver.config import DEFAULT_HTTP_HEAD_TIMEOUT_S
from execserver.server.transport_ws import SNIFF_LIMIT
from tests.support.servers import RunningServer, start_server

PROBE = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
# The daemon's --http-head-timeout here: short, so that the test does not wait out
# the default's 30 s, and still several of the trickling clients' lines long (a
# bound re-armed by every line received would never close their connections).
HEAD_TIMEOUT_S = 4.0
# Well past the timeout: a connection still open by then was never going to close.
GIVE_UP_S = HEAD_TIMEOUT_S + 15
LINE_EVERY_S = 0.5


async def _open(server: RunningServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    address = urlsplit(server.url)
    assert address.hostname is not None and address.port is not None
    return await asyncio.open_connection(address.hostname, address.port)


async def _seconds_until_closed(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, trickle: bytes | None
) -> float:
    """Seconds until the daemon closes the connection, sending ``trickle`` (one more
    header line) every LINE_EVERY_S meanwhile; GIVE_UP_S if it never does."""
    started = time.monotonic()
    try:
        while time.monotonic() - started < GIVE_UP_S:
            try:
                data = await asyncio.wait_for(reader.read(65536), LINE_EVERY_S)
            except TimeoutError:
                if trickle is not None:
                    writer.write(trickle)
                    await writer.drain()
                continue
            if not data:
                break
            raise AssertionError(f"the daemon answered an unfinished head: {data[:80]!r}")
    except ConnectionError:
        pass  # aborted: closed all the same
    finally:
        writer.close()
    return time.monotonic() - started


async def _long_head_never_finished(server: RunningServer) -> float:
    # Longer than the listener sniffs, so it reaches aiohttp unfinished.
    line = b"X-Pad: " + b"a" * 7000 + b"\r\n"
    head = b"GET /readyz HTTP/1.1\r\nHost: x\r\n"
    while len(head) <= SNIFF_LIMIT:
        head += line
    reader, writer = await _open(server)
    writer.write(head)
    await writer.drain()
    return await _seconds_until_closed(reader, writer, line)


async def _short_head_never_finished(server: RunningServer) -> float:
    reader, writer = await _open(server)
    writer.write(b"GET /readyz HTTP/1.1\r\n")
    await writer.drain()
    return await _seconds_until_closed(reader, writer, b"X-Pad: a\r\n")


async def _probe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One health probe, answered 200, on a kept-alive connection."""
    writer.write(PROBE)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200"), head
    await reader.readexactly(_content_length(head))


async def _idle_after_an_answer(server: RunningServer) -> float:
    reader, writer = await _open(server)
    await _probe(reader, writer)
    return await _seconds_until_closed(reader, writer, None)


async def _second_head_never_finished(server: RunningServer) -> float:
    reader, writer = await _open(server)
    await _probe(reader, writer)
    writer.write(b"GET /readyz HTTP/1.1\r\n")
    await writer.drain()
    return await _seconds_until_closed(reader, writer, b"X-Pad: a\r\n")


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


async def test_no_request_head_outlasts_its_deadline() -> None:
    timeout = ["--http-head-timeout", str(HEAD_TIMEOUT_S)]
    async with start_server("execserver", extra=timeout) as server:
        long_head, short_head, idle, second_head = await asyncio.gather(
            _long_head_never_finished(server),
            _short_head_never_finished(server),
            _idle_after_an_answer(server),
            _second_head_never_finished(server),
        )
    for name, took in [
        ("a long head, finished never", long_head),
        ("a short head, finished never", short_head),
        ("a kept-alive connection left idle", idle),
        ("a second head on a kept-alive connection", second_head),
    ]:
        # Closed at the deadline: not long before it (the client kept sending),
        # and not left open past it.
        assert HEAD_TIMEOUT_S - 1 <= took < GIVE_UP_S, f"{name}: closed after {took:.1f} s"


def test_the_deadline_is_thirty_seconds_unless_told() -> None:
    def configured(*flags: str) -> float:
        return config_from_args(build_parser().parse_args(["serve", *flags])).http_head_timeout_s

    assert configured() == DEFAULT_HTTP_HEAD_TIMEOUT_S == 30.0
    assert configured("--http-head-timeout", "2.5") == 2.5
    for bad in ("0", "-1", "nan", "inf"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--http-head-timeout", bad])


async def test_a_kept_alive_connection_answers_within_the_deadline_as_before(
    execserver: RunningServer,
) -> None:
    """The deadline is on heads only: requests that come in time are all answered."""
    reader, writer = await _open(execserver)
    try:
        for _ in range(3):
            await _probe(reader, writer)
            await asyncio.sleep(0.5)
    finally:
        writer.close()
