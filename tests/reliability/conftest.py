"""The full scale (``make reliability``) runs tests for many minutes; CI's subset
keeps the per-test default."""

from __future__ import annotations

import pytest

from tests.reliability.scale import FULL


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not FULL:
        return
    for item in items:
        if "reliability" in item.path.parts:
            item.add_marker(pytest.mark.timeout(3600))
