"""Large writes through the client: ``fs.write_file`` of any size (the message
limit is 64 MiB, the reference's frame limit 16 MiB) and ``write_block`` past
the server's 1 MiB per block, without dropping the connection or the calls in
flight beside them."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from execserver.client import ExecServerClient
from execserver.client.errors import PayloadTooLarge
from tests.support.servers import RunningServer

MIB = 1024 * 1024


@pytest.fixture
async def client(any_server: RunningServer) -> AsyncIterator[ExecServerClient]:
    async with await ExecServerClient.connect(any_server.url) as c:
        yield c


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_write_file_of_48_mib_arrives_whole_and_other_calls_live_on(
    client: ExecServerClient, tmp_path: Path
) -> None:
    data = os.urandom(48 * MIB + 12345)
    target = tmp_path / "big.bin"
    statuses = asyncio.gather(*(client.environment_status() for _ in range(5)))
    await client.fs.write_file(str(target), data)
    assert await statuses == ["ready"] * 5
    assert target.stat().st_size == len(data)
    assert digest(target.read_bytes()) == digest(data)
    assert await client.environment_status() == "ready"


async def test_write_file_of_13_mib_fits_the_reference_s_frame_limit(
    client: ExecServerClient, tmp_path: Path
) -> None:
    """13 MiB is one ~17 MiB base64 message: more than one 16 MiB frame."""
    data = os.urandom(13 * MIB)
    target = tmp_path / "mid.bin"
    await client.fs.write_file(str(target), data)
    assert digest(target.read_bytes()) == digest(data)


async def test_write_file_replaces_a_longer_file(client: ExecServerClient, tmp_path: Path) -> None:
    target = tmp_path / "shrink.bin"
    target.write_bytes(b"z" * (40 * MIB))
    data = os.urandom(34 * MIB)
    await client.fs.write_file(str(target), data)
    assert digest(target.read_bytes()) == digest(data)


async def test_write_block_over_1_mib_and_an_empty_one(
    client: ExecServerClient, tmp_path: Path
) -> None:
    data = os.urandom(3 * MIB + 7)
    target = tmp_path / "blocks.bin"
    async with client.fs.open(str(target), "replace") as handle:
        await handle.write_block(0, data)
        await handle.write_block(len(data), b"")
    assert digest(target.read_bytes()) == digest(data)


async def test_a_large_write_that_cannot_stream_is_refused_before_anything_is_sent(
    client: ExecServerClient, tmp_path: Path
) -> None:
    target = tmp_path / "nofollow.bin"
    with pytest.raises(PayloadTooLarge, match="follow_symlinks=False"):
        await client.fs.write_file(str(target), b"x" * (33 * MIB), follow_symlinks=False)
    assert not target.exists()
    assert await client.environment_status() == "ready"
