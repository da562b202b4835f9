"""Directories shared by the core/unified-exec/apply_patch integration suites."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The writable root of a workspace-write profile."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory the workspace-write profile does not grant."""
    path = tmp_path / "outside"
    path.mkdir()
    return path
