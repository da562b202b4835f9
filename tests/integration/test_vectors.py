"""execserver answers every recorded protocol vector exactly as the reference did."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.vectors import comparable, load_vectors, play, scratch_dir

VECTORS = load_vectors()


def _expected(vector: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"received": s["received"], "dropped": s["dropped"]} for s in vector["steps"]]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
async def test_execserver_answers_like_the_reference(vector: dict[str, Any]) -> None:
    with scratch_dir() as work:
        results = comparable(await play("execserver", vector, work), work)
    for index, (got, want) in enumerate(zip(results, _expected(vector), strict=True)):
        assert got == want, f"step {index}: sent {vector['steps'][index]['send']!r}"


def test_vectors_exist_for_the_foundation() -> None:
    names = {v["name"] for v in VECTORS}
    assert {"envelope", "lifecycle_before_initialize", "stdio_envelope"} <= names
    assert all(step.get("received") is not None for v in VECTORS for step in v["steps"])
