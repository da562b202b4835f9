# ruff: noqa: E501  (rows are verbatim JSON and messages captured from the reference)
"""decode_sandbox_context against the reference's serde texts.

Every row was observed on the codex 0.169.0 exec-server: the ``sandbox`` JSON sent
with a process/start, and the -32602 message it answered (None: accepted).
"""

from __future__ import annotations

import msgspec
import pytest

from execserver.wire.errors import INVALID_PARAMS, RpcError
from execserver.wire.json_value import decode_json_value
from execserver.wire.sandbox import (
    CwdSpecial,
    ExternalPermissions,
    FileSystemSandboxContext,
    ManagedPermissions,
    PathPath,
    RestrictedFileSystem,
    SpecialFsPath,
    WireFileSystemPolicyContext,
    decode_sandbox_context,
    decode_sandbox_param,
)

OBSERVED: list[tuple[str, str | None]] = [
    ("{}", "missing field `permissions`"),
    # A number where the internally tagged permissions go: serde's Content words,
    # 128-bit beyond 64, and its arbitrary-precision token (no tag) beyond both.
    (
        '{"permissions":5}',
        "invalid type: integer `5`, expected internally tagged enum ExecPermissionProfile",
    ),
    (
        '{"permissions":-1.5}',
        "invalid type: floating point `-1.5`, expected internally tagged enum ExecPermissionProfile",
    ),
    (
        '{"permissions":1.5e300}',
        "invalid type: floating point `1.5e+300`, expected internally tagged enum ExecPermissionProfile",
    ),
    (
        '{"permissions":18446744073709551615}',
        "invalid type: integer `18446744073709551615`, expected internally tagged enum ExecPermissionProfile",
    ),
    (
        '{"permissions":18446744073709551616}',
        "invalid type: integer `18446744073709551616` as u128, expected internally tagged enum ExecPermissionProfile",
    ),
    (
        '{"permissions":-9223372036854775809}',
        "invalid type: integer `-9223372036854775809` as i128, expected internally tagged enum ExecPermissionProfile",
    ),
    (
        '{"permissions":340282366920938463463374607431768211455}',
        "invalid type: integer `340282366920938463463374607431768211455` as u128, expected internally tagged enum ExecPermissionProfile",
    ),
    ('{"permissions":340282366920938463463374607431768211456}', "missing field `type`"),
    ('{"permissions":1E400}', "missing field `type`"),
    ('{"permissions":' + "1" * 5000 + "}", "missing field `type`"),
    (
        '{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":1E400,"access":"read"}]}},"windowsSandboxLevel":"disabled"}',
        "missing field `type`",
    ),
    ('{"permissions":{"type":"disabled"}}', "missing field `windowsSandboxLevel`"),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"bad"}',
        "unknown variant `bad`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`",
    ),
    (
        '{"permissions":{"type":"bogus"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`",
    ),
    ('{"permissions":{},"windowsSandboxLevel":"disabled"}', "missing field `type`"),
    (
        '{"permissions":null,"windowsSandboxLevel":"disabled"}',
        "invalid type: null, expected internally tagged enum ExecPermissionProfile",
    ),
    (
        '{"permissions":{"type":"managed"},"windowsSandboxLevel":"disabled"}',
        "missing field `file_system`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"x"},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected `restricted` or `unrestricted`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"unrestricted"},"network":"x"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected `restricted` or `enabled`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}',
        "missing field `network`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted"},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "missing field `entries`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"x"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected one of `root`, `minimal`, `current_working_directory`, `project_roots`, `tmpdir`, `slash_tmp`, `unknown`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"x"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected one of `read`, `write`, `deny`, `none`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"zz","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `zz`, expected one of `path`, `glob_pattern`, `special`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"/tmp"},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid URI: relative URL without a base",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"path"},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "missing field `path`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "missing field `path`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}}}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "missing field `access`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read","missing_path_behavior":"x"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected `skip`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[],"glob_scan_max_depth":0},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid value: integer `0`, expected a nonzero usize",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[],"glob_scan_max_depth":-1},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid value: integer `-1`, expected a nonzero usize",
    ),
    (
        '{"permissions":{"type":"external"},"windowsSandboxLevel":"disabled"}',
        "missing field `network`",
    ),
    (
        '{"permissions":{"type":"external","network":"enabled"},"windowsSandboxLevel":"disabled"}',
        None,
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","cwd":"/tmp"}',
        "invalid URI: relative URL without a base",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","sandboxOverride":"x"}',
        "unknown variant `x`, expected one of `noOverride`, `escalatedSandboxWithRestrictions`, `bypassSandboxFirstAttempt`",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","windowsSandboxProxySettingsMode":"x"}',
        "unknown variant `x`, expected `reconcile` or `preserve`",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","useLegacyLandlock":"x"}',
        'invalid type: string "x", expected a boolean',
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","workspaceRoots":"x"}',
        'invalid type: string "x", expected a sequence',
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","policyContext":{"cwd":3}}',
        "invalid type: number, expected a string",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","policyContext":"x"}',
        'invalid type: string "x", expected struct WireFileSystemPolicyContext',
    ),
    (
        '{"permissions":"x","windowsSandboxLevel":"disabled"}',
        'invalid type: string "x", expected internally tagged enum ExecPermissionProfile',
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"unknown"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "missing field `path`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots","subpath":"a"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"glob_pattern"},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "missing field `pattern`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":"x"},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        'invalid type: string "x", expected a sequence',
    ),
    ('"x"', 'invalid type: string "x", expected struct WireFileSystemSandboxContext'),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","userHomeDir":"relative"}',
        "invalid URI: relative URL without a base",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","temporaryDirectories":["relative"]}',
        "invalid URI: relative URL without a base",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":3}',
        "invalid type: number, expected string or map",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","cwd":3}',
        "invalid type: number, expected a string",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","cwd":true}',
        "invalid type: boolean `true`, expected a string",
    ),
    ('{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","cwd":null}', None),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","useLegacyLandlock":3}',
        "invalid type: number, expected a boolean",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","useLegacyLandlock":null}',
        "invalid type: null, expected a boolean",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","workspaceRoots":null}',
        "invalid type: null, expected a sequence",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","workspaceRoots":[3]}',
        "invalid type: number, expected a string",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","sandboxOverride":null}',
        "invalid type: null, expected string or map",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":null}',
        "invalid type: null, expected string or map",
    ),
    (
        '{"permissions":{"type":3},"windowsSandboxLevel":"disabled"}',
        "invalid type: number, expected variant identifier",
    ),
    ('{"permissions":[],"windowsSandboxLevel":"disabled"}', "missing field `type`"),
    (
        '{"permissions":{"type":"managed","file_system":null,"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: null, expected internally tagged enum ExecManagedFileSystemPermissions",
    ),
    (
        '{"permissions":{"type":"managed","file_system":"x","network":"restricted"},"windowsSandboxLevel":"disabled"}',
        'invalid type: string "x", expected internally tagged enum ExecManagedFileSystemPermissions',
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"unrestricted"},"network":3},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected string or map",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"unrestricted"},"network":null},"windowsSandboxLevel":"disabled"}',
        "invalid type: null, expected string or map",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"unrestricted","extra":1},"network":"enabled","extra":2},"windowsSandboxLevel":"disabled","extra":3}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[3]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected struct ExecFileSystemSandboxEntry",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[null]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: null, expected struct ExecFileSystemSandboxEntry",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":3,"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected internally tagged enum ExecFileSystemPath",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":3}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected string or map",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":null}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: null, expected string or map",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":3},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected internally tagged enum FileSystemSpecialPath",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special"},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "missing field `value`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "missing field `kind`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"unknown","path":"x"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"unknown","path":3}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected a string",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots","subpath":3}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected a string",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots","subpath":null}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots","subpath":"/abs"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots","subpath":"../x"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"glob_pattern","pattern":3},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected a string",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":3},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: integer `3`, expected a string",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"http://x/y"},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "unsupported path URI scheme `http`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file:///tmp"},"access":"read","missing_path_behavior":null}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":"x"},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        'invalid type: string "x", expected a nonzero usize',
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":1.5},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: floating point `1.5`, expected a nonzero usize",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":null},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":null},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "invalid type: null, expected a sequence",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"access":"x","path":{"type":"zz"}}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected one of `read`, `write`, `deny`, `none`",
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"zz"},"access":"x"}]},"network":"restricted"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `zz`, expected one of `path`, `glob_pattern`, `special`",
    ),
    (
        '{"windowsSandboxLevel":"bad","permissions":{"type":"bogus"}}',
        "unknown variant `bad`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`",
    ),
    (
        '{"permissions":{"type":"bogus"},"windowsSandboxLevel":"bad"}',
        "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`",
    ),
    (
        '{"permissions":{"type":"managed","network":"x"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected `restricted` or `enabled`",
    ),
    (
        '{"permissions":{"network":"x","type":"managed"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected `restricted` or `enabled`",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","policyContext":{"cwd":"file:///tmp","workspaceRoots":null}}',
        "invalid type: null, expected a sequence",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","policyContext":null}',
        None,
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","policyContext":{"cwd":null}}',
        None,
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","policyContext":{"cwd":"x"}}',
        "invalid URI: relative URL without a base",
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","temporaryDirectories":null}',
        None,
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","userHomeDir":null}',
        None,
    ),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","windowsSandboxProxySettingsMode":null}',
        None,
    ),
    (
        '{"permissions":{"type":"external","network":"x"},"windowsSandboxLevel":"disabled"}',
        "unknown variant `x`, expected `restricted` or `enabled`",
    ),
    ("3", "invalid type: number, expected struct WireFileSystemSandboxContext"),
    ("[]", "invalid length 0, expected struct WireFileSystemSandboxContext with 10 elements"),
    ("true", "invalid type: boolean `true`, expected struct WireFileSystemSandboxContext"),
    (
        '{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled","useLegacyLandlock":true}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"unrestricted"},"network":"restricted"},"windowsSandboxLevel":"disabled","useLegacyLandlock":true}',
        None,
    ),
    (
        '{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"},"windowsSandboxLevel":"disabled","useLegacyLandlock":true}',
        None,
    ),
]


@pytest.mark.parametrize(("sandbox_json", "message"), OBSERVED)
def test_decode_matches_reference_message(sandbox_json: str, message: str | None) -> None:
    value = decode_json_value(sandbox_json.encode())  # as the daemon parses it
    if message is None:
        assert isinstance(decode_sandbox_context(value), FileSystemSandboxContext)
        return
    with pytest.raises(RpcError) as info:
        decode_sandbox_context(value)
    assert info.value.code == INVALID_PARAMS
    assert info.value.message == message


def test_absent_or_null_sandbox_param_means_no_sandbox() -> None:
    assert decode_sandbox_param(msgspec.Raw()) is None
    assert decode_sandbox_param(msgspec.Raw(b"null")) is None
    assert (
        decode_sandbox_param(b'{"permissions":{"type":"disabled"},"windowsSandboxLevel":"mxc"}')
        is not None
    )


def test_decoded_context_keeps_every_member() -> None:
    ctx = decode_sandbox_context(
        {
            "permissions": {
                "type": "managed",
                "file_system": {
                    "type": "restricted",
                    "entries": [
                        {"path": {"type": "path", "path": "file:///w"}, "access": "write"},
                        {
                            "path": {
                                "type": "special",
                                "value": {"kind": "current_working_directory"},
                            },
                            "access": "none",
                            "missing_path_behavior": "skip",
                        },
                    ],
                    "glob_scan_max_depth": 3,
                },
                "network": "enabled",
            },
            "windowsSandboxLevel": "restricted-token",
            "cwd": "file:///w",
            "workspaceRoots": ["file:///w"],
            "policyContext": {"cwd": "file:///p", "workspaceRoots": ["file:///p"]},
            "useLegacyLandlock": True,
            "sandboxOverride": "bypassSandboxFirstAttempt",
        }
    )
    assert isinstance(ctx.permissions, ManagedPermissions)
    assert ctx.permissions.network == "enabled"
    fs = ctx.permissions.file_system
    assert isinstance(fs, RestrictedFileSystem)
    assert fs.glob_scan_max_depth == 3
    assert fs.entries[0].path == PathPath(path="file:///w")
    assert fs.entries[1].path == SpecialFsPath(value=CwdSpecial())
    assert fs.entries[1].missing_path_behavior == "skip"
    assert ctx.policy_context == WireFileSystemPolicyContext(
        cwd="file:///p", workspace_roots=["file:///p"]
    )
    assert ctx.policy_cwd() == "file:///p"
    assert ctx.policy_workspace_roots() == ["file:///p"]
    assert ctx.use_legacy_landlock is True
    assert ctx.sandbox_override == "bypassSandboxFirstAttempt"


def test_encoding_round_trips_the_wire_casing() -> None:
    ctx = FileSystemSandboxContext(
        permissions=ExternalPermissions(network="restricted"), windows_sandbox_level="disabled"
    )
    wire = msgspec.json.decode(msgspec.json.encode(ctx))
    assert wire == {
        "permissions": {"type": "external", "network": "restricted"},
        "windowsSandboxLevel": "disabled",
    }
    assert decode_sandbox_context(wire) == ctx
