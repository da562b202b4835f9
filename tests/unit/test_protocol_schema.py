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
