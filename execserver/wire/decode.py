"""Typed decoding of ``params`` with the reference's (serde's) error texts.

The reference decodes params with serde, and clients see serde's wording
(``missing field `writeId```, ``invalid type: null, expected struct ReadParams``).
msgspec does the decoding here; on failure we translate its error into
serde's text, inspecting the type and the offending value.

serde also accepts a few shapes msgspec does not; only when msgspec refuses the
params does the slow path look for them (so the common request pays nothing):

* a struct written as an array of its fields in declaration order;
* a unit-variant enum (a ``Literal`` member) in the map form ``{"read": null}``;
* a ``u64`` member above ``2**63 - 1`` (msgspec's bounds stop at int64).

A decoder may also ``prepare`` the decoded params: the method's own checks that
the reference makes while decoding (URI syntax, the sandbox shape, base64),
returning what the handler works with, so nothing is decoded twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast, overload

import msgspec
from msgspec import inspect as mi

from execserver.wire.errors import RpcError
from execserver.wire.json_value import decode_json_value
from execserver.wire.rust import serde

__all__ = ["ParamsDecoder", "rust_struct_name"]

T = TypeVar("T")
W = TypeVar("W")

_PATH_RE = re.compile(r"- at `\$(.*)`$")
_SEGMENT_RE = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
# msgspec's path segment for "some value of a map" (it does not name the key).
_ANY_KEY = "..."
_MISSING_RE = re.compile(r"^Object missing required field `([^`]+)`")
_NEGATIVE_RE = re.compile(r"^Expected `int` >= 0")
_UNKNOWN_FIELD_RE = re.compile(r"^Object contains unknown field `([^`]+)`")
_INT64_MAX = 2**63 - 1
_U64_MAX = 2**64 - 1


def rust_struct_name(type_: type) -> str:
    """The name serde prints for a params struct (``expected struct ReadParams``):
    our wire types carry the reference's struct names."""
    return str(getattr(type_, "__name__", "params"))


# Params are a serde_json::Value with arbitrary precision (arbitrary_precision=True
# below): a number reads "number" in every text.


# A concrete location in the decoded params: ("attr", python name) | ("item", key/index).
_Step = tuple[str, str | int]


class ParamsDecoder(Generic[T]):
    """Decodes the raw params of one method into ``type_`` (errors as serde words
    them), then applies ``prepare`` when given; ``decode`` returns its result."""

    @overload
    def __init__(self: ParamsDecoder[W], type_: type[W], prepare: None = None) -> None: ...

    @overload
    def __init__(self, type_: type[W], prepare: Callable[[W], T]) -> None: ...

    def __init__(self, type_: type[Any], prepare: Callable[[Any], T] | None = None) -> None:
        self.type = type_
        self.prepare = prepare
        self.rust_name = rust_struct_name(type_)
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(type_)
        self._info = mi.type_info(type_)
        self._is_unit = isinstance(self._info, mi.StructType) and not self._info.fields

    def decode(self, raw: msgspec.Raw) -> T:
        # msgspec decodes the Raw's buffer in place: copying it to bytes first was
        # ~0.12 µs of a process/read poll's ~5 µs of in-process work.
        data: msgspec.Raw | bytes = raw if len(raw) else b"null"
        if self._is_unit:
            value = self._decode_unit(bytes(data))
        else:
            try:
                value = self._decoder.decode(data)
            except msgspec.ValidationError as exc:
                value = self._decode_unusual(bytes(data), str(exc))
            except msgspec.DecodeError as exc:  # pragma: no cover - the envelope parsed it
                raise RpcError.invalid_params(str(exc)) from None
            except RecursionError:
                raise RpcError.invalid_params("recursion limit exceeded") from None
        if self.prepare is None:
            return cast(T, value)
        return self.prepare(value)

    # ---- the slow path: serde-only shapes, then serde's error text -----------------

    def _decode_unusual(self, data: bytes, message: str) -> Any:
        if data[:1] == b"[" and isinstance(self._info, mi.StructType):
            return self._decode_sequence(data)
        try:
            value = decode_json_value(data)
        except RecursionError:
            raise RpcError.invalid_params("recursion limit exceeded") from None
        try:
            restore: list[tuple[list[_Step], int]] = []
            if _repair(value, self._info, [], restore):
                try:
                    decoded = self._decoder.decode(msgspec.json.encode(value))
                except msgspec.ValidationError as exc:
                    message = str(exc)
                else:
                    for steps, number in restore:
                        _assign(decoded, steps, number)
                    return decoded
            text = self._translate(message, value)
        except RecursionError:
            text = message  # cannot inspect the value; msgspec's words then
        raise RpcError.invalid_params(text) from None

    def _decode_sequence(self, data: bytes) -> Any:
        """serde also accepts a struct as an array of its fields in declaration order."""
        assert isinstance(self._info, mi.StructType)
        items = decode_json_value(data)
        fields = self._info.fields
        as_map = {f.encode_name: item for f, item in zip(fields, items, strict=False)}
        try:
            value = msgspec.convert(as_map, self.type)
        except msgspec.ValidationError as exc:
            message = str(exc)
            if not _MISSING_RE.match(message):
                raise RpcError.invalid_params(self._translate(message, as_map)) from None
            value = None
        if (len(items) < len(fields) and value is None) or len(items) > len(fields):
            raise RpcError.invalid_params(
                serde.invalid_length(
                    len(items), f"struct {self.rust_name} with {len(fields)} elements"
                )
            )
        assert value is not None
        return value

    def _decode_unit(self, data: bytes) -> Any:
        """Methods without params accept null, {} (and nothing else)."""
        try:
            value = decode_json_value(data)
        except RecursionError:
            raise RpcError.invalid_params("recursion limit exceeded") from None
        if value is None or value == {}:
            return self._decoder.decode(b"{}")
        raise RpcError.invalid_params(serde.invalid_type(value, "unit", arbitrary_precision=True))

    def _translate(self, message: str, value: Any) -> str:
        path = _parse_path(message)
        missing = _MISSING_RE.match(message)
        if missing:
            return serde.missing_field(missing.group(1))
        unknown = _UNKNOWN_FIELD_RE.match(message)
        if unknown:
            # Only structs that refuse unknown members get here (serde's deny_unknown_fields).
            owner = _type_at(self._info, path)
            names = owner.fields if isinstance(owner, mi.StructType) else ()
            return serde.unknown_field(unknown.group(1), [f.encode_name for f in names])
        info = _type_at(self._info, path)
        offending = _value_at(value, path)
        if isinstance(offending, int | float) and not isinstance(offending, bool):
            # serde_json's arbitrary-precision numbers: a negative, fractional or
            # out-of-range number for an unsigned field is just "invalid number".
            if _NEGATIVE_RE.match(message) or _is_unsigned(info):
                return "invalid number"
        if isinstance(info, mi.LiteralType | mi.EnumType):
            # Raises serde's text for this enum value (the accepted shapes were repaired).
            serde.unit_variant(offending, _variants(info), arbitrary_precision=True)
        if isinstance(info, mi.StructType) and isinstance(offending, list):
            name = self.rust_name if not path else info.cls.__name__
            return serde.invalid_length(
                len(offending), f"struct {name} with {len(info.fields)} elements"
            )
        expected = _expected(info, self.rust_name if not path else None)
        return serde.invalid_type(offending, expected, arbitrary_precision=True)


def _variants(info: mi.LiteralType | mi.EnumType) -> tuple[str, ...]:
    if isinstance(info, mi.LiteralType):
        return tuple(str(v) for v in info.values)
    return tuple(str(m.value) for m in info.cls)


def _is_unsigned(info: mi.Type) -> bool:
    return isinstance(info, mi.IntType) and info.ge is not None and info.ge >= 0


def _repair(value: Any, info: mi.Type, steps: list[_Step], restore: list[Any]) -> bool:
    """Rewrite, in place, the shapes serde accepts and msgspec does not; record u64
    members above int64 in ``restore`` (decoded as int64's maximum, then put back).
    Returns whether anything was rewritten."""
    info = _strip_optional(info)
    changed = False
    if isinstance(info, mi.StructType) and isinstance(value, dict):
        for field in info.fields:
            if field.encode_name not in value:
                continue
            item = value[field.encode_name]
            fixed = _repaired_leaf(item, field.type, [*steps, ("attr", field.name)], restore)
            if fixed is not _UNCHANGED:
                value[field.encode_name] = fixed
                changed = True
            elif _repair(item, field.type, [*steps, ("attr", field.name)], restore):
                changed = True
    elif isinstance(info, mi.ListType | mi.VarTupleType) and isinstance(value, list):
        for index, item in enumerate(value):
            fixed = _repaired_leaf(item, info.item_type, [*steps, ("item", index)], restore)
            if fixed is not _UNCHANGED:
                value[index] = fixed
                changed = True
            elif _repair(item, info.item_type, [*steps, ("item", index)], restore):
                changed = True
    elif isinstance(info, mi.DictType) and isinstance(value, dict):
        for key, item in value.items():
            fixed = _repaired_leaf(item, info.value_type, [*steps, ("item", key)], restore)
            if fixed is not _UNCHANGED:
                value[key] = fixed
                changed = True
            elif _repair(item, info.value_type, [*steps, ("item", key)], restore):
                changed = True
    return changed


_UNCHANGED = object()


def _repaired_leaf(value: Any, info: mi.Type, steps: list[_Step], restore: list[Any]) -> Any:
    info = _strip_optional(info)
    if isinstance(info, mi.LiteralType | mi.EnumType) and isinstance(value, dict):
        if len(value) == 1:
            ((name, payload),) = value.items()
            if payload is None and name in _variants(info):
                return name  # {"read": null} -> "read"
        return _UNCHANGED
    if (
        isinstance(info, mi.IntType)
        and info.le == _INT64_MAX
        and _is_unsigned(info)
        and isinstance(value, int)
        and not isinstance(value, bool)
        and _INT64_MAX < value <= _U64_MAX
    ):
        restore.append((steps, value))
        return _INT64_MAX
    return _UNCHANGED


def _assign(decoded: Any, steps: list[_Step], number: int) -> None:
    target = decoded
    for kind, key in steps[:-1]:
        target = getattr(target, str(key)) if kind == "attr" else target[key]
    kind, key = steps[-1]
    if kind == "attr":
        setattr(target, str(key), number)
    else:
        target[key] = number


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


def _expected(info: mi.Type, top_name: str | None = None) -> str:
    if isinstance(info, mi.StructType):
        return f"struct {top_name or info.cls.__name__}"
    if isinstance(info, mi.BoolType):
        return "a boolean"
    if isinstance(info, mi.StrType | mi.BytesType):
        return "a string"
    if isinstance(info, mi.IntType):
        return "u64" if _is_unsigned(info) else "i64"
    if isinstance(info, mi.FloatType):
        return "f64"
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType):
        return "a sequence"
    if isinstance(info, mi.DictType):
        return "a map"
    if isinstance(info, mi.LiteralType | mi.EnumType):
        return "string or map"
    return "a valid value"
