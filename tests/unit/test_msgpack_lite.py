"""The fs helper's pure-Python msgpack (``msgpack_lite``) against msgspec, the
daemon's codec, both ways: what one writes the other reads back as the same
value, the bytes are the same where both pick the shortest form (always, for
these types), and garbage fails as ``DecodeError`` alone."""

from __future__ import annotations

import math
import struct
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execserver.fs.sandboxed import frames, program
from execserver.fs.sandboxed.msgpack_lite import MAX_DEPTH, DecodeError, decode, encode
from execserver.fs.sandboxed.protocol import HEADER, OK, OS_ERROR, STALE

EXAMPLES = 200
# A request carries up to ten of the values the value tests draw one of per example:
# 50 requests draw about as many values as their 200 examples, in a quarter of the
# time (200 took ~12 s of CPU, most of it hypothesis building the examples).
REQUEST_EXAMPLES = 50

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=300)
)
# Around each format's boundaries, where a wrong choice of form would show.
edge_ints = st.sampled_from(
    [
        n + d
        for n in (0, 127, 255, 2**16 - 1, 2**32 - 1, 2**64 - 1, -32, -128, -(2**15), -(2**31))
        for d in (-1, 0, 1)
        if -(2**63) <= n + d <= 2**64 - 1
    ]
    + [-(2**63)]
)
edge_sizes = st.sampled_from([0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536])
# What the protocol carries: maps keyed by str, lists, and the scalars.
values = st.recursive(
    scalars | edge_ints,
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(), inner, max_size=20),
    max_leaves=60,
)
requests = st.builds(
    frames.Request,
    id=st.integers(min_value=-(2**63), max_value=2**64 - 1),
    op=st.text(),
    args=st.dictionaries(st.text(), values, max_size=10),
)
responses = st.builds(
    frames.Response,
    id=st.integers(min_value=0, max_value=2**64 - 1),
    kind=st.sampled_from([OK, OS_ERROR, STALE]),
    value=values,
    code=st.integers(min_value=-(2**31), max_value=2**31),
    message=st.text(),
)


def same(a: Any, b: Any) -> bool:
    """Equal, telling bool from int and -0.0 from 0.0 (msgpack keeps both apart)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_every_value_is_written_as_msgspec_writes_it_and_reads_back(value: Any) -> None:
    ours = encode(value)
    assert ours == msgspec.msgpack.encode(value)
    assert same(msgspec.msgpack.decode(ours), value)
    assert same(decode(ours), value)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_what_msgspec_writes_reads_back_the_same(value: Any) -> None:
    assert same(decode(msgspec.msgpack.encode(value)), msgspec.msgpack.decode(encode(value)))


@pytest.mark.parametrize("size", [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536])
def test_each_length_form_is_msgspecs(size: int) -> None:
    for value in (
        "x" * size,
        b"x" * size,
        [0] * size,
        {str(n): 0 for n in range(size)},
        "é" * (size // 2),
    ):
        assert encode(value) == msgspec.msgpack.encode(value)
        assert same(decode(encode(value)), value)


def test_other_forms_msgspec_may_read_are_read_too() -> None:
    # float32, and a str or an int in a longer form than needed: valid msgpack.
    assert decode(b"\xca" + struct.pack(">f", 1.5)) == 1.5
    assert decode(b"\xda\x00\x02hi") == "hi"
    assert decode(b"\xcd\x00\x07") == 7
    assert decode(b"\xdc\x00\x01\xc0") == [None]
    assert decode(b"\xde\x00\x01\xa1k\x01") == {"k": 1}


@settings(
    max_examples=REQUEST_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(requests)
def test_the_daemons_requests_are_what_the_helper_reads(request: frames.Request) -> None:
    framed = frames.frame(request)
    (size,) = HEADER.unpack(framed[: HEADER.size])
    decoded = program.decode_request(framed[HEADER.size :])
    assert size == len(framed) - HEADER.size
    assert (decoded.id, decoded.op) == (request.id, request.op)
    assert same(decoded.args, request.args)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses)
def test_the_helpers_responses_are_byte_for_byte_the_daemons(response: frames.Response) -> None:
    ours = program.Response(
        response.id, response.kind, response.value, response.code, response.message
    )
    assert program.frame(ours) == frames.frame(response)
    back = frames.response_decoder.decode(program.frame(ours)[HEADER.size :])
    assert (back.id, back.kind, back.code, back.message) == (
        response.id,
        response.kind,
        response.code,
        response.message,
    )
    assert same(back.value, response.value)


def test_tuples_and_subclasses_are_written_as_their_base_type() -> None:
    class Name(str):
        pass

    assert encode((1, "a")) == msgspec.msgpack.encode((1, "a"))
    assert encode(Name("a")) == encode("a")
    assert decode(encode(bytearray(b"ab"))) == b"ab"
    assert decode(encode(memoryview(b"ab"))) == b"ab"


def test_what_msgpack_cannot_hold_is_refused_on_writing() -> None:
    with pytest.raises(OverflowError):
        encode(2**64)
    with pytest.raises(OverflowError):
        encode(-(2**63) - 1)
    with pytest.raises(TypeError):
        encode(object())
    with pytest.raises(UnicodeEncodeError):
        msgspec.msgpack.encode("\udcff")  # msgspec refuses it: the daemon carries it
    assert encode("\udcff") == b"\xc7\x01\x01\xff"  # as FS_BYTES_EXT (protocol.py)


@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\xc1",  # never used
        b"\xc7\x01\x05x",  # ext 8
        b"\xd4\x02\x00",  # fixext 1 of a type other than FS_BYTES_EXT
        b"\xd6\xff\x00\x00\x00\x00",  # timestamp 32
        b"\xa5abc",  # str cut short
        b"\xc4\x05ab",  # bin cut short
        b"\xdb\xff\xff\xff\xff",  # a 4 GiB str that is not there
        b"\xdd\xff\xff\xff\xff",  # an array of 2**32-1 items that are not there
        b"\xdf\xff\xff\xff\xff\xc0",  # a map likewise
        b"\x93\x01",  # array cut short
        b"\xcf\x00\x00",  # uint64 cut short
        b"\xa2\xff\xfe",  # not UTF-8
        b"\xa3\xed\xb3\xbf",  # an encoded surrogate: not UTF-8 either
        b"\x81\x90\x01",  # an array as a map key
        b"\x81\x80\x01",  # a map as a map key
        b"\xc0\xc0",  # trailing bytes
        b"\x91" * (MAX_DEPTH + 1) + b"\xc0",  # nested too deeply
    ],
)
def test_garbage_fails_cleanly(garbage: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(garbage)


def test_nesting_up_to_the_limit_is_read() -> None:
    assert decode(b"\x91" * MAX_DEPTH + b"\xc0") is not None


@pytest.mark.parametrize(
    "body",
    [
        [1, "read_file"],  # too short
        [1, "read_file", {}, 0],  # too long
        [True, "read_file", {}],  # a bool is no id
        [1.0, "read_file", {}],
        [1, b"read_file", {}],
        [1, "read_file", []],
        [1, "read_file", {1: "x"}],  # arguments are named by str
        {"id": 1},
    ],
)
def test_a_request_of_another_shape_fails_cleanly(body: Any) -> None:
    with pytest.raises(DecodeError):
        program.decode_request(msgspec.msgpack.encode(body))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_or_fail_cleanly(data: bytes) -> None:
    try:
        value = decode(data)
    except DecodeError:
        return
    # Whatever decodes is what msgspec makes of it too.
    assert same(value, msgspec.msgpack.decode(data))


# File names as Python holds the bytes of one that is not UTF-8: lone surrogates
# (os.fsdecode), of every length form around the extension's boundaries.
fs_names = st.builds(
    lambda raw, size: ((raw * size)[: size - 1] + b"\xff").decode("utf-8", "surrogateescape"),
    st.binary(min_size=1, max_size=8),
    st.sampled_from([1, 2, 4, 8, 16, 17, 255, 256, 65535, 65536]),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(fs_names)
def test_a_file_name_that_is_not_utf8_crosses_both_ways_unchanged(name: str) -> None:
    with pytest.raises(UnicodeEncodeError):
        name.encode()
    # Daemon to helper: a request's argument (msgspec picks the fixext forms too).
    request = frames.Request(1, "read_file", frames.carry_fs_bytes({"path": name, "n": 3}))
    decoded = program.decode_request(frames.frame(request)[HEADER.size :])
    assert decoded.args == {"path": name, "n": 3}
    # Helper to daemon: a result holding it, at any depth.
    value = {"entries": [{"fileName": name}], "path": name}
    ours = program.Response(7, OK, value, 0, "")
    back = frames.response_decoder.decode(program.frame(ours)[HEADER.size :])
    assert back.value == value


def test_a_message_holding_a_name_that_is_not_utf8_is_sent_as_utf8() -> None:
    name = b"bad\xff.txt".decode("utf-8", "surrogateescape")
    ours = program.Response(7, OS_ERROR, None, 2, f"cannot read {name}")
    back = frames.response_decoder.decode(program.frame(ours)[HEADER.size :])
    assert back.message == "cannot read bad\ufffd.txt"


@pytest.mark.parametrize("kind", [0, 2, -1, 127])
def test_an_extension_of_another_type_fails_cleanly(kind: int) -> None:
    for body in (
        b"\xd4" + struct.pack(">b", kind) + b"x",
        b"\xc7\x03" + struct.pack(">b", kind) + b"abc",
    ):
        with pytest.raises(DecodeError, match="extension type"):
            decode(body)
    with pytest.raises(DecodeError, match="truncated"):
        decode(b"\xc7\x05\x01abc")
