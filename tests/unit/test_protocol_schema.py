"""The committed JSON Schema is the contract: it must match the Python wire types."""

from __future__ import annotations

import json
from pathlib import Path

from execserver.server.runner import build_method_table
from execserver.wire import contract
from execserver.wire import methods as m
from execserver.wire.schema import SCHEMA_FILE, render_schema

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "protocol" / "schema" / SCHEMA_FILE


def test_committed_schema_matches_wire_types() -> None:
    assert COMMITTED.read_text() == render_schema(), (
        "protocol/schema is stale: run `make schema` and commit the result"
    )


def test_contract_lists_every_method_of_the_reference() -> None:
    assert set(contract.REQUESTS) == set(m.CLIENT_REQUESTS)
    assert len(m.CLIENT_REQUESTS) == 26


def test_every_registered_method_is_in_the_contract() -> None:
    registered = set(build_method_table().methods)
    assert registered <= set(contract.REQUESTS), registered - set(contract.REQUESTS)


def test_schema_is_self_consistent() -> None:
    schema = json.loads(COMMITTED.read_text())
    defs = schema["$defs"]
    text = COMMITTED.read_text()
    for ref in {part.split('"')[0] for part in text.split('"#/$defs/')[1:]}:
        assert ref in defs, f"dangling $ref {ref}"
    for name, entry in schema["methods"].items():
        assert entry["params"]["$ref"].removeprefix("#/$defs/") in defs, name
        assert entry["result"]["$ref"].removeprefix("#/$defs/") in defs, name


def test_wire_names_are_camel_case_outside_the_sandbox_permissions() -> None:
    schema = json.loads(COMMITTED.read_text())
    exec_params = schema["$defs"]["ExecParams"]["properties"]
    assert {"processId", "pipeStdin", "envPolicy", "enforceManagedNetwork"} <= set(exec_params)
    read_response = schema["$defs"]["ReadResponse"]["required"]
    assert {"nextSeq", "exitCode", "sandboxDenied"} <= set(read_response)


def _integer_bounds(node: object) -> list[tuple[object, object]]:
    found: list[tuple[object, object]] = []
    if isinstance(node, dict):
        if node.get("type") == "integer" and "maximum" in node:
            found.append((node.get("minimum"), node["maximum"]))
        for value in node.values():
            found += _integer_bounds(value)
    elif isinstance(node, list):
        for value in node:
            found += _integer_bounds(value)
    return found


def test_u64_members_state_the_range_the_daemon_accepts() -> None:
    """u64 members take 0 ..= 2**64 - 1 on the wire (tests/unit/test_params_decoder.py),
    not int64's top, which is all msgspec can state."""
    schema = json.loads(COMMITTED.read_text())
    walk = schema["$defs"]["WalkOptions"]["properties"]
    assert (walk["maxDepth"]["minimum"], walk["maxDepth"]["maximum"]) == (0, 2**64 - 1)
    bounds = _integer_bounds(schema["$defs"])
    assert (0, 2**64 - 1) in bounds
    assert (0, 2**63 - 1) not in bounds
