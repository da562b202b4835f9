"""Generate the JSON Schema of the protocol from the wire types (``make schema``).

``python -m execserver.wire.schema protocol/schema`` writes
``protocol.schema.json``: one ``$defs`` entry per type and a ``methods`` /
``notifications`` index pointing at them. A test regenerates it and fails
when the committed file and the Python types drift apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from execserver.wire import contract
from execserver.wire.sandbox import FileSystemSandboxContext

__all__ = ["SCHEMA_FILE", "render_schema"]

SCHEMA_FILE = "protocol.schema.json"
_SANDBOX_REF = {"$ref": "#/$defs/FileSystemSandboxContext"}


def _all_types() -> list[Any]:
    types: list[Any] = [FileSystemSandboxContext]
    for params, result in contract.REQUESTS.values():
        types += [params, result]
    types += list(contract.CLIENT_NOTIFICATIONS.values())
    types += list(contract.SERVER_NOTIFICATIONS.values())
    for params, result in contract.SERVER_REQUESTS.values():
        types += [params, result]
    return types


def _ref(tp: type) -> dict[str, str]:
    return {"$ref": f"#/$defs/{tp.__name__}"}


def _type_sandbox_fields(defs: dict[str, Any]) -> None:
    """``sandbox`` members are decoded by execserver.sandbox from raw JSON (for
    serde-exact errors), so msgspec sees them as "any"; the contract names the type."""
    for definition in defs.values():
        props = definition.get("properties", {})
        if "sandbox" in props and props["sandbox"] == {}:
            props["sandbox"] = {"anyOf": [_SANDBOX_REF, {"type": "null"}]}


# execserver.wire.base.U64 bounds its members at int64's top, the largest bound msgspec
# can state; execserver.wire.decode accepts the rest of the u64 range as serde does.
_MSGSPEC_U64_MAX = 2**63 - 1
_U64_MAX = 2**64 - 1


def _widen_u64_bounds(node: Any) -> None:
    """State the range the daemon accepts for u64 members (0 ..= 2**64 - 1)."""
    if isinstance(node, dict):
        if node.get("type") == "integer" and (node.get("minimum"), node.get("maximum")) == (
            0,
            _MSGSPEC_U64_MAX,
        ):
            node["maximum"] = _U64_MAX
        for value in node.values():
            _widen_u64_bounds(value)
    elif isinstance(node, list):
        for value in node:
            _widen_u64_bounds(value)


def build_schema() -> dict[str, Any]:
    _, defs = msgspec.json.schema_components(_all_types(), ref_template="#/$defs/{name}")
    _type_sandbox_fields(defs)
    _widen_u64_bounds(defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Codex exec-server protocol (0.169.0) as served by execserver",
        "methods": {
            name: {"params": _ref(p), "result": _ref(r)}
            for name, (p, r) in contract.REQUESTS.items()
        },
        "clientNotifications": {
            name: {"params": _ref(p)} for name, p in contract.CLIENT_NOTIFICATIONS.items()
        },
        "serverNotifications": {
            name: {"params": _ref(p)} for name, p in contract.SERVER_NOTIFICATIONS.items()
        },
        "serverRequests": {
            name: {"params": _ref(p), "result": _ref(r)}
            for name, (p, r) in contract.SERVER_REQUESTS.items()
        },
        "$defs": dict(sorted(defs.items())),
    }


def render_schema() -> str:
    return json.dumps(build_schema(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1] if len(argv) > 1 else "protocol/schema")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SCHEMA_FILE).write_text(render_schema())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
