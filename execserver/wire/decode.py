"""Typed decoding of ``params`` with the reference's (serde's) error texts.

The reference decodes params with serde, and clients see serde's wording
(``missing field `writeId```, ``invalid type: null, expected struct ReadParams``).
msgspec does the decoding here; on failure we translate its error into
serde's text, inspecting the type and the offending value.
"""

from __future__ import annotations

import re
from typing import Any, Generic, TypeVar

import msgspec
from msgspec import inspect as mi

from execserver.wire.envelope import describe_value as _describe_exact
from execserver.wire.errors import RpcError

__all__ = ["ParamsDecoder", "describe_value"]

T = TypeVar("T")

_PATH_RE = re.compile(r"- at `\$(.*)`$")
_SEGMENT_RE = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
# msgspec's path segment for "some value of a map" (it does not name the key).
_ANY_KEY = "..."
_MISSING_RE = re.compile(r"^Object missing required field `([^`]+)`")
_ENUM_RE = re.compile(r"^Invalid enum value (.*?)(?: - at|$)")
_NEGATIVE_RE = re.compile(r"^Expected `int` >= 0")
_UNKNOWN_FIELD_RE = re.compile(r"^Object contains unknown field `([^`]+)`")


def describe_value(value: Any) -> str:
    """serde's wording for a params value: the reference parses params into a
    ``serde_json::Value`` with arbitrary-precision numbers, so every number
    reads ``number`` (``invalid type: number, expected a string``)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "number"
    return _describe_exact(value)


class ParamsDecoder(Generic[T]):
    """Decodes the raw params of one method into ``type_``; errors as serde words them."""

    def __init__(self, type_: type[T], rust_name: str | None = None) -> None:
        self.type = type_
        self.rust_name: str = rust_name or str(getattr(type_, "__name__", "params"))
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(type_)
        self._info = mi.type_info(type_)
        self._is_unit = isinstance(self._info, mi.StructType) and not self._info.fields

    def decode(self, raw: msgspec.Raw) -> T:
        data = bytes(raw) if len(raw) else b"null"
        if self._is_unit:
            return self._decode_unit(data)
        try:
            return self._decoder.decode(data)
        except msgspec.ValidationError as exc:
            if data[:1] == b"[" and isinstance(self._info, mi.StructType):
                return self._decode_sequence(data)
            try:
                message = self._translate(str(exc), data)
            except (msgspec.DecodeError, RecursionError):
                message = str(exc)  # cannot inspect the value; msgspec's words then
            raise RpcError.invalid_params(message) from None
        except msgspec.DecodeError as exc:  # pragma: no cover - the envelope already parsed it
            raise RpcError.invalid_params(str(exc)) from None
        except RecursionError:
            raise RpcError.invalid_params("recursion limit exceeded") from None

    def _decode_sequence(self, data: bytes) -> T:
        """serde also accepts a struct as an array of its fields in declaration order."""
        assert isinstance(self._info, mi.StructType)
        items = msgspec.json.decode(data)
        fields = self._info.fields
        as_map = {f.encode_name: item for f, item in zip(fields, items, strict=False)}
        try:
            value = msgspec.convert(as_map, self.type)
        except msgspec.ValidationError as exc:
            message = str(exc)
            if not _MISSING_RE.match(message):
                raise RpcError.invalid_params(
                    self._translate(message, msgspec.json.encode(as_map))
                ) from None
            value = None
        if (len(items) < len(fields) and value is None) or len(items) > len(fields):
            raise RpcError.invalid_params(
                f"invalid length {len(items)}, expected struct {self.rust_name} "
                f"with {len(fields)} elements"
            )
        assert value is not None
        return value

    def _decode_unit(self, data: bytes) -> T:
        """Methods without params accept null, {} (and nothing else)."""
        value = msgspec.json.decode(data)
        if value is None or value == {}:
            return self._decoder.decode(b"{}")
        raise RpcError.invalid_params(f"invalid type: {describe_value(value)}, expected unit")

    def _translate(self, message: str, data: bytes) -> str:
        value = msgspec.json.decode(data)
        path = _parse_path(message)
        missing = _MISSING_RE.match(message)
        if missing:
            return f"missing field `{missing.group(1)}`"
        unknown = _UNKNOWN_FIELD_RE.match(message)
        if unknown:
            # Only structs that refuse unknown members get here (serde's deny_unknown_fields).
            owner = _type_at(self._info, path)
            names = owner.fields if isinstance(owner, mi.StructType) else ()
            expected = ", ".join(f"`{f.encode_name}`" for f in names)
            return f"unknown field `{unknown.group(1)}`, expected one of {expected}"
        info = _type_at(self._info, path)
        offending = _value_at(value, path)
        if isinstance(offending, int | float) and not isinstance(offending, bool):
            # serde_json's arbitrary-precision numbers: a negative, fractional or
            # out-of-range number for an unsigned field is just "invalid number".
            if _NEGATIVE_RE.match(message) or _is_unsigned(info):
                return "invalid number"
        enum = _ENUM_RE.match(message)
        if enum and isinstance(info, mi.LiteralType | mi.EnumType):
            return _unknown_variant(offending, info)
        if isinstance(info, mi.StructType) and isinstance(offending, list):
            n = len(offending)
            return (
                f"invalid length {n}, expected struct {_struct_name(info, self.rust_name, path)} "
                f"with {len(info.fields)} elements"
            )
        expected = _expected(info, self.rust_name if not path else None, path)
        return f"invalid type: {describe_value(offending)}, expected {expected}"


def _is_unsigned(info: mi.Type) -> bool:
    return isinstance(info, mi.IntType) and info.ge is not None and info.ge >= 0


def _parse_path(message: str) -> list[str | int]:
    match = _PATH_RE.search(message)
    if not match:
        return []
    out: list[str | int] = []
    for key, index in _SEGMENT_RE.findall(match.group(1)):
        if index == _ANY_KEY:
            out.append(_ANY_KEY)
        else:
            out.append(int(index) if index else key)
    return out


def _value_at(value: Any, path: list[str | int]) -> Any:
    for i, seg in enumerate(path):
        if seg == _ANY_KEY and isinstance(value, dict):
            # The key is not named: the first map value that has the rest of the path.
            rest = path[i + 1 :]
            found = [_value_at(v, rest) for v in value.values()]
            return next((v for v in found if v is not None), None)
        try:
            value = value[seg]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _strip_optional(info: mi.Type) -> mi.Type:
    if isinstance(info, mi.UnionType):
        rest = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if len(rest) == 1:
            return rest[0]
    return info


def _type_at(info: mi.Type, path: list[str | int]) -> mi.Type:
    info = _strip_optional(info)
    for seg in path:
        info = _strip_optional(info)
        if isinstance(info, mi.StructType) and isinstance(seg, str):
            field = next((f for f in info.fields if f.encode_name == seg), None)
            if field is None:
                return mi.AnyType()
            info = field.type
        elif isinstance(info, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
            info = info.item_type
        elif isinstance(info, mi.DictType):
            info = info.value_type
        else:
            return mi.AnyType()
    return _strip_optional(info)


def _struct_name(info: mi.StructType, top_name: str, path: list[str | int]) -> str:
    return top_name if not path else info.cls.__name__


def _expected(info: mi.Type, top_name: str | None, path: list[str | int]) -> str:
    if isinstance(info, mi.StructType):
        return f"struct {top_name or info.cls.__name__}"
    if isinstance(info, mi.BoolType):
        return "a boolean"
    if isinstance(info, mi.StrType):
        return "a string"
    if isinstance(info, mi.IntType):
        if info.ge is not None and info.ge >= 0:
            return "u64"
        return "i64"
    if isinstance(info, mi.FloatType):
        return "f64"
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType):
        return "a sequence"
    if isinstance(info, mi.DictType):
        return "a map"
    if isinstance(info, mi.LiteralType):
        return "a string"
    if isinstance(info, mi.BytesType):
        return "a string"
    return "a valid value"


def _unknown_variant(value: Any, info: mi.LiteralType | mi.EnumType) -> str:
    if isinstance(info, mi.LiteralType):
        names = [str(v) for v in info.values]
    else:
        names = [str(m.value) for m in info.cls]
    if len(names) == 1:
        expected = f"`{names[0]}`"
    elif len(names) == 2:
        expected = f"`{names[0]}` or `{names[1]}`"
    else:
        expected = "one of " + ", ".join(f"`{n}`" for n in names)
    return f"unknown variant `{value}`, expected {expected}"
