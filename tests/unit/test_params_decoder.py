"""ParamsDecoder accepts what serde accepts beyond msgspec (the map form of a
unit-variant enum, u64 values above int64) wherever it sits, and hands the true
values on. The texts themselves are compared with the reference in
protocol/vectors/unit_variant_enum.json."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from execserver.wire.base import Empty
from execserver.wire.decode import ParamsDecoder
from execserver.wire.errors import RpcError
from execserver.wire.fs import OpenParams, ReadBlockParams, ReadFileParams, WalkParams
from execserver.wire.process import CredentialAuthMethod, ExecParams, ReadParams

START = {"processId": "p", "argv": ["true"], "cwd": "file:///", "env": {}, "tty": False}
PROXY = {
    "enabled": True,
    "mode": "limited",
    "enableSocks5": False,
    "enableSocks5Udp": False,
    "allowUpstreamProxy": False,
    "dangerouslyAllowAllUnixSockets": False,
    "allowLocalBinding": False,
}


def _decode(type_: type, params: Any) -> Any:
    return ParamsDecoder(type_).decode(msgspec.Raw(json.dumps(params).encode()))


def test_map_form_of_a_top_level_enum() -> None:
    params = _decode(OpenParams, {"handleId": "h", "path": "file:///x", "mode": {"replace": None}})
    assert params.mode == "replace"


def test_map_form_inside_a_struct_a_map_and_a_list() -> None:
    proxy = {
        **PROXY,
        "mode": {"full": None},
        "domains": {"a.example": {"deny": None}, "b.example": "allow"},
        "credentialProviders": {"p": {"auth": ["token", {"bearer": None}]}},
    }
    policy = {
        "inherit": {"core": None},
        "ignoreDefaultExcludes": False,
        "exclude": [],
        "set": {},
        "includeOnly": [],
    }
    params = _decode(ExecParams, {**START, "envPolicy": policy, "networkProxy": {"proxy": proxy}})
    assert params.env_policy.inherit == "core"
    config = params.network_proxy.proxy
    assert config.mode == "full"
    assert config.domains == {"a.example": "deny", "b.example": "allow"}
    auth = config.credential_providers["p"].auth
    assert auth == [CredentialAuthMethod.TOKEN, CredentialAuthMethod.BEARER]


@pytest.mark.parametrize("value", [2**63, 2**64 - 1])
def test_u64_above_int64_keeps_its_value(value: int) -> None:
    walk = {"maxDepth": value, "maxDirectories": 2**63 + 1, "maxEntries": 1}
    options = {**walk, "followDirectorySymlinks": False}
    params = _decode(WalkParams, {"path": "file:///", "options": options})
    assert params.options.max_depth == value
    assert params.options.max_directories == 2**63 + 1
    assert params.options.max_entries == 1
    block = _decode(ReadBlockParams, {"handleId": "h", "offset": value, "len": value})
    assert (block.offset, block.len) == (value, value)


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ({"read": None, "replace": None}, "invalid value: map, expected map with a single key"),
        ({"append": None}, "unknown variant `append`, expected `read` or `replace`"),
        ({"read": []}, "invalid type: sequence, expected unit"),
        (True, "invalid type: boolean `true`, expected string or map"),
    ],
)
def test_refused_enum_values(mode: Any, message: str) -> None:
    with pytest.raises(RpcError) as info:
        _decode(OpenParams, {"handleId": "h", "path": "file:///x", "mode": mode})
    assert (info.value.code, info.value.message) == (-32602, message)


def test_the_first_error_in_input_order_wins_after_a_repair() -> None:
    # The map form is repaired, then the later bad member is reported as serde would.
    params = {"mode": {"read": None}, "handleId": 3, "path": "file:///x"}
    with pytest.raises(RpcError) as info:
        _decode(OpenParams, params)
    assert info.value.message == "invalid type: number, expected a string"


def test_u64_beyond_u64_is_an_invalid_number() -> None:
    with pytest.raises(RpcError) as info:
        _decode(ReadBlockParams, {"handleId": "h", "offset": 2**64, "len": 1})
    assert info.value.message == "invalid number"


# Numbers past a double's range or past Python's integer digits: msgspec refuses
# them outright ("Number out of range"), which escaped as -32603; the reference
# (serde_json, arbitrary precision) answers as for any number of the wrong kind.
# Each text was observed on the 0.169.0 binary.
@pytest.mark.parametrize(
    ("params_type", "params", "message"),
    [
        # The input the full atheris run found.
        (WalkParams, b'{"pa":"","options":{"maxDepth":122222222E22222222222,"Ditor":false}}', "invalid number"),  # noqa: E501
        (WalkParams, b'{"path":"file:///tmp","options":{"maxDepth":1E400,"maxDirectories":1,"maxEntries":1,"followDirectorySymlinks":false}}', "invalid number"),  # noqa: E501
        (ReadParams, b'{"processId":"p","afterSeq":-1E400}', "invalid number"),
        (ReadFileParams, b'{"path":1E400}', "invalid type: number, expected a string"),
        (ReadFileParams, b"[1E400]", "invalid type: number, expected a string"),
        # An integer longer than Python converts (4 300 digits): msgspec refuses it too.
        (ReadFileParams, b'{"path":' + b"1" * 5000 + b"}", "invalid type: number, expected a string"),  # noqa: E501
        (ReadParams, b'{"processId":"p","afterSeq":-' + b"1" * 5000 + b"}", "invalid number"),
        (ReadFileParams, b'{"path":"file:///x","followSymlinks":1E400}', "invalid type: number, expected a boolean"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_number_past_a_doubles_range_is_refused_as_serde_does(
    params_type: type, params: bytes, message: str
) -> None:
    with pytest.raises(RpcError) as info:
        ParamsDecoder(params_type).decode(msgspec.Raw(params))
    assert info.value.message == message


def test_a_number_past_a_doubles_range_in_an_unknown_member_is_ignored() -> None:
    decoded = ParamsDecoder(ReadFileParams).decode(
        msgspec.Raw(b'{"path":"file:///etc/hostname","x":-1E400}')
    )
    assert decoded.path == "file:///etc/hostname"


@pytest.mark.parametrize("type_", [Empty, ReadParams])
def test_params_nested_past_the_parsers_limit_are_invalid_params(type_: type) -> None:
    # Found by tests/reliability/test_protocol_fuzz.py: environment/info (no params)
    # with {"extra": [[[...]]]} 983 deep answered "internal error".
    deep = "[" * 5000 + "0" + "]" * 5000
    raw = msgspec.Raw(('{"extra": ' + deep + "}").encode())
    with pytest.raises(RpcError) as refused:
        ParamsDecoder(type_).decode(raw)
    assert (refused.value.code, refused.value.message) == (-32602, "recursion limit exceeded")
