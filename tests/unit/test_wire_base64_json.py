"""Process output encoded by pybase64 (wire/base64_json.py) is byte for byte what
msgspec writes for the same ``bytes`` member, and what the client decodes back."""

from __future__ import annotations

import os

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from execserver.processes.service import _EncodedChunk
from execserver.wire.base64_json import SIMD_FROM, base64_json, chunk_json
from execserver.wire.process import ProcessOutputChunk


class _AsBytes(msgspec.Struct):
    chunk: bytes


class _AsRaw(msgspec.Struct):
    chunk: msgspec.Raw


class _AsEither(msgspec.Struct):
    chunk: bytes | msgspec.Raw


@given(st.binary(max_size=4096))
def test_the_json_string_is_msgspecs_own(data: bytes) -> None:
    expected = msgspec.json.encode(_AsBytes(data))
    assert msgspec.json.encode(_AsRaw(base64_json(data))) == expected
    assert msgspec.json.encode(_AsEither(chunk_json(data))) == expected


def test_long_chunks_take_the_simd_encoder_and_short_ones_stay_bytes() -> None:
    assert isinstance(chunk_json(b"x" * SIMD_FROM), msgspec.Raw)
    assert chunk_json(b"x" * (SIMD_FROM - 1)) == b"x" * (SIMD_FROM - 1)


def test_every_length_around_the_simd_block_sizes() -> None:
    # SIMD encoders take blocks of 12..64 input bytes and finish the tail in scalar code.
    for size in range(0, 300):
        data = os.urandom(size)
        assert bytes(base64_json(data)) == msgspec.json.encode(data)


def test_an_encoded_chunk_is_a_process_output_chunk_on_the_wire() -> None:
    for data in (os.urandom(10), os.urandom(SIMD_FROM * 2)):
        ours = msgspec.json.encode(_EncodedChunk(7, "stderr", chunk_json(data)))
        assert ours == msgspec.json.encode(ProcessOutputChunk(7, "stderr", data))
        assert msgspec.json.decode(ours, type=ProcessOutputChunk).chunk == data
