"""The recorded vectors still describe the reference server (re-played against it)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.vectors import comparable, load_vectors, play, scratch_dir

VECTORS = load_vectors()

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
async def test_reference_still_answers_the_recorded_vector(vector: dict[str, Any]) -> None:
    with scratch_dir() as work:
        results = comparable(await play("reference", vector, work), work)
    expected = [{"received": s["received"], "dropped": s["dropped"]} for s in vector["steps"]]
    assert results == expected
