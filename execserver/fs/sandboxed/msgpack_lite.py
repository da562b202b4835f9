"""The helper's msgpack: the subset of the format the fs helper protocol uses,
in pure Python on ``struct`` alone.

The helper program must stay small (one interpreter per sandbox policy:
docs/scale.md), and msgspec, with what it imports, was half of its memory.
The daemon keeps msgspec for its side (``frames.py``), so this codec reads
only what the daemon wrote, and writes what the daemon's strict msgspec
decoder then checks; still, anything that is not a well-formed message of
these types raises ``DecodeError`` (never another exception, never a partial
value).

Types: None, bool, int (-2**63 .. 2**64-1), float (written as float64), str,
bytes (bytearray and memoryview written as bytes), list and tuple (read back as
list), dict (keys: str, int, bytes, bool, None or float). Each is written in
the shortest form, which is also msgspec's choice (tests/unit/test_msgpack_lite.py
checks both against msgspec). One extension type, ``FS_BYTES_EXT``
(``protocol.py``): a str that is not UTF-8 (a file name's bytes, carried as
``os.fsdecode`` carries them: lone surrogates) is written as that extension
holding its bytes, and read back as the same str; no other extension type is read.
"""

from __future__ import annotations

import struct

from execserver.fs.sandboxed.protocol import FS_BYTES_EXT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "MAX_DEPTH",
    "DecodeError",
    "decode",
    "encode",
    "encode_int",
    "encode_into",
    "encode_parts",
]

# Deeper than any message of the protocol; a hostile nesting fails cleanly
# instead of exhausting the stack.
MAX_DEPTH = 64


class DecodeError(ValueError):
    """Not a well-formed message of the supported types."""


_u8 = struct.Struct(">B")
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")
_u64 = struct.Struct(">Q")
_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")
_f32 = struct.Struct(">f")
_f64 = struct.Struct(">d")

_FIXINT = [bytes((n,)) for n in range(128)]
_NEGATIVE_FIXINT = {n: bytes((n & 0xFF,)) for n in range(-32, 0)}


def _int(value: int) -> bytes:
    if value >= 0:
        if value < 128:
            return _FIXINT[value]
        if value < 0x100:
            return b"\xcc" + _u8.pack(value)
        if value < 0x10000:
            return b"\xcd" + _u16.pack(value)
        if value < 0x100000000:
            return b"\xce" + _u32.pack(value)
        if value < 0x10000000000000000:
            return b"\xcf" + _u64.pack(value)
        raise OverflowError("can't serialize ints > 2**64 - 1")
    if value >= -32:
        return _NEGATIVE_FIXINT[value]
    if value >= -0x80:
        return b"\xd0" + _i8.pack(value)
    if value >= -0x8000:
        return b"\xd1" + _i16.pack(value)
    if value >= -0x80000000:
        return b"\xd2" + _i32.pack(value)
    if value >= -0x8000000000000000:
        return b"\xd3" + _i64.pack(value)
    raise OverflowError("can't serialize ints < -2**63")


def encode_int(value: int) -> bytes:
    """An int's encoding (its shortest form)."""
    return _FIXINT[value] if 0 <= value < 128 else _int(value)


def _sized(size: int, fix: int, fix_limit: int, codes: bytes) -> bytes:
    """The header of a str/bin/array/map of ``size``: fix form (``fix`` | size,
    below ``fix_limit``; 0: none), else the 8- (bin, str only), 16- or 32-bit one."""
    if size < fix_limit:
        return _u8.pack(fix | size)
    if size < 0x100 and codes[0]:
        return bytes((codes[0], size))
    if size < 0x10000:
        return bytes((codes[1],)) + _u16.pack(size)
    if size < 0x100000000:
        return bytes((codes[2],)) + _u32.pack(size)
    raise ValueError(f"msgpack cannot hold a length of {size}")


# The one-byte headers of short values, and str8/bin8's two bytes, made once:
# the helper answers every call through here.
_FIXSTR = tuple(bytes((0xA0 | n,)) for n in range(32))
_FIXARRAY = tuple(bytes((0x90 | n,)) for n in range(16))
_FIXMAP = tuple(bytes((0x80 | n,)) for n in range(16))
_STR8 = tuple(bytes((0xD9, n)) for n in range(256))
_BIN8 = tuple(bytes((0xC4, n)) for n in range(256))
_STR = b"\xd9\xda\xdb"
_BIN = b"\xc4\xc5\xc6"
_ARRAY = b"\x00\xdc\xdd"
_MAP = b"\x00\xde\xdf"


def _encode(value: Any, out: list[bytes]) -> None:
    kind = type(value)
    if kind is str:
        try:
            data = value.encode()
        except UnicodeEncodeError:  # a file name that is not UTF-8
            _encode_fs_bytes(value, out)
            return
        size = len(data)
        if size < 32:
            out.append(_FIXSTR[size])
        elif size < 0x100:
            out.append(_STR8[size])
        else:
            out.append(_sized(size, 0xA0, 32, _STR))
        out.append(data)
    elif kind is int:
        out.append(_FIXINT[value] if 0 <= value < 128 else _int(value))
    elif value is None:
        out.append(b"\xc0")
    elif kind is bool:
        out.append(b"\xc3" if value else b"\xc2")
    elif kind is bytes or kind is bytearray or kind is memoryview:
        data = value.tobytes() if kind is memoryview else value
        size = len(data)
        out.append(_BIN8[size] if size < 0x100 else _sized(size, 0, 0, _BIN))
        out.append(data)
    elif kind is dict:
        size = len(value)
        out.append(_FIXMAP[size] if size < 16 else _sized(size, 0x80, 16, _MAP))
        for key, item in value.items():
            _encode(key, out)
            _encode(item, out)
    elif kind is list or kind is tuple:
        size = len(value)
        out.append(_FIXARRAY[size] if size < 16 else _sized(size, 0x90, 16, _ARRAY))
        for item in value:
            _encode(item, out)
    elif kind is float:
        out.append(b"\xcb" + _f64.pack(value))
    # Subclasses (an IntEnum, a str subclass): as their base type.
    elif isinstance(value, bool):
        _encode(bool(value), out)
    elif isinstance(value, int):
        _encode(int(value), out)
    elif isinstance(value, str):
        _encode(str(value), out)
    elif isinstance(value, float):
        _encode(float(value), out)
    elif isinstance(value, (list, tuple)):
        _encode(list(value), out)
    elif isinstance(value, dict):
        _encode(dict(value), out)
    else:
        raise TypeError(f"Encoding objects of type {kind.__name__} is unsupported")


def _encode_fs_bytes(value: str, out: list[bytes]) -> None:
    """``value``'s bytes (UTF-8 with surrogateescape) as the extension
    ``FS_BYTES_EXT``, in its 8-, 16- or 32-bit length form."""
    data = value.encode("utf-8", "surrogateescape")
    size = len(data)
    if size < 0x100:
        header = b"\xc7" + _u8.pack(size)
    elif size < 0x10000:
        header = b"\xc8" + _u16.pack(size)
    else:
        header = b"\xc9" + _u32.pack(size)
    out.append(header + _i8.pack(FS_BYTES_EXT))
    out.append(data)


def encode_into(value: object, out: list[bytes]) -> None:
    """Append ``value``'s encoding to ``out``, as pieces to join (a large bytes
    value is not copied)."""
    _encode(value, out)


def encode_parts(value: object) -> list[bytes]:
    """``value``'s encoding as pieces to join."""
    out: list[bytes] = []
    _encode(value, out)
    return out


def encode(value: object) -> bytes:
    return b"".join(encode_parts(value))


def decode(data: bytes) -> Any:
    """The one value ``data`` holds; DecodeError for anything else (trailing
    bytes included)."""
    try:
        value, end = _decode(data, 0, 0)
    except DecodeError:
        raise
    except (struct.error, UnicodeDecodeError, IndexError, TypeError) as exc:
        raise DecodeError(f"malformed msgpack: {exc}") from None
    if end != len(data):
        raise DecodeError(f"malformed msgpack: {len(data) - end} trailing bytes")
    return value


def _take(data: bytes, pos: int, size: int) -> int:
    """The end of ``size`` bytes from ``pos``, checked to be in ``data``."""
    end = pos + size
    if end > len(data):
        raise DecodeError("malformed msgpack: truncated")
    return end


# Lengths and values that follow a type byte: (struct, its size).
_LENGTH = {
    0xC4: _u8, 0xC5: _u16, 0xC6: _u32,  # bin
    0xD9: _u8, 0xDA: _u16, 0xDB: _u32,  # str
    0xDC: _u16, 0xDD: _u32,  # array
    0xDE: _u16, 0xDF: _u32,  # map
}  # fmt: skip
_NUMBER = {
    0xCA: _f32, 0xCB: _f64,
    0xCC: _u8, 0xCD: _u16, 0xCE: _u32, 0xCF: _u64,
    0xD0: _i8, 0xD1: _i16, 0xD2: _i32, 0xD3: _i64,
}  # fmt: skip
_KEY_TYPES = (str, int, bytes, bool, float, type(None))
# Extension types: fixext 1, 2, 4, 8, 16 (their data's size) and ext 8, 16, 32
# (a length first).
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_EXT_LENGTH = {0xC7: _u8, 0xC8: _u16, 0xC9: _u32}


def _decode_ext(data: bytes, pos: int, size: int) -> tuple[str, int]:
    """The extension at ``pos`` (its type byte, then ``size`` bytes): only
    ``FS_BYTES_EXT`` is read."""
    end = _take(data, pos, 1 + size)
    (kind,) = _i8.unpack_from(data, pos)
    if kind != FS_BYTES_EXT:
        raise DecodeError(f"malformed msgpack: unsupported extension type {kind}")
    return data[pos + 1 : end].decode("utf-8", "surrogateescape"), end


def _decode(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    code = data[pos]
    pos += 1
    if 0xA0 <= code < 0xC0:  # fixstr: names, most paths
        end = pos + (code & 0x1F)
        if end > len(data):
            raise DecodeError("malformed msgpack: truncated")
        return data[pos:end].decode(), end
    if code == 0xD9:  # str8: the other paths
        if pos >= len(data):
            raise DecodeError("malformed msgpack: truncated")
        end = pos + 1 + data[pos]
        if end > len(data):
            raise DecodeError("malformed msgpack: truncated")
        return data[pos + 1 : end].decode(), end
    if code < 0x80:
        return code, pos
    if code >= 0xE0:
        return code - 0x100, pos
    if code == 0xC0:
        return None, pos
    if code == 0xC2:
        return False, pos
    if code == 0xC3:
        return True, pos
    fixed = _FIXEXT.get(code)
    if fixed is not None:
        return _decode_ext(data, pos, fixed)
    ext_length = _EXT_LENGTH.get(code)
    if ext_length is not None:
        end = _take(data, pos, ext_length.size)
        return _decode_ext(data, end, ext_length.unpack_from(data, pos)[0])
    number = _NUMBER.get(code)
    if number is not None:
        end = pos + number.size
        if end > len(data):
            raise DecodeError("malformed msgpack: truncated")
        return number.unpack_from(data, pos)[0], end
    if code < 0x90:
        size = code & 0x0F
        kind = 0xDE
    elif code < 0xA0:
        size = code & 0x0F
        kind = 0xDC
    else:
        length = _LENGTH.get(code)
        if length is None:
            raise DecodeError(f"malformed msgpack: unsupported type byte 0x{code:02x}")
        end = _take(data, pos, length.size)
        (size,) = length.unpack_from(data, pos)
        pos = end
        if code <= 0xC6:
            end = _take(data, pos, size)
            return data[pos:end], end
        if code <= 0xDB:
            end = _take(data, pos, size)
            return data[pos:end].decode(), end
        kind = 0xDC if code <= 0xDD else 0xDE
    if depth >= MAX_DEPTH:
        raise DecodeError("malformed msgpack: nested too deeply")
    # Each element takes at least one byte: a claimed size past the end fails
    # here, before any work.
    _take(data, pos, size if kind == 0xDC else 2 * size)
    if kind == 0xDC:
        items: list[Any] = []
        for _ in range(size):
            item, pos = _decode(data, pos, depth + 1)
            items.append(item)
        return items, pos
    mapping: dict[Any, Any] = {}
    for _ in range(size):
        code = data[pos]
        if 0xA0 <= code < 0xC0:  # a fixstr key: an argument's name, a result's field
            end = pos + 1 + (code & 0x1F)
            if end > len(data):
                raise DecodeError("malformed msgpack: truncated")
            key: Any = data[pos + 1 : end].decode()
            pos = end
        else:
            key, pos = _decode(data, pos, depth + 1)
            if type(key) not in _KEY_TYPES:
                raise DecodeError("malformed msgpack: a map key that is not a scalar")
        mapping[key], pos = _decode(data, pos, depth + 1)
    return mapping, pos
