"""The version has one home, ``execserver/__init__.py`` ``__version__``, and
everything that states a version states that one.

The daemon's own reports read it from there: ``/metrics``' build info
(tests/integration/test_metrics.py::test_metrics_name_the_running_build) and
the start-up log (tests/unit/test_doctor.py, which reads the log of a real
``serve``). This file checks the rest: the package metadata, ``--version``, the
deployment manifests' image tags, the documented start-up line, and the
changelog's latest release.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version as installed_version
from pathlib import Path

from execserver import __version__

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "execserver"
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")


def test_the_version_is_a_literal_in_the_package_alone() -> None:
    """setuptools' ``attr:`` reads a literal assignment without importing the package."""
    assert _SEMVER.match(__version__), __version__
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    assignments = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(name, ast.Name) and name.id == "__version__" for name in node.targets)
    ]
    assert len(assignments) == 1
    assert isinstance(assignments[0].value, ast.Constant)
    assert assignments[0].value.value == __version__
    elsewhere = [
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path != PACKAGE / "__init__.py" and f'"{__version__}"' in path.read_text()
    ]
    assert not elsewhere, f"a second copy of the version: {elsewhere}"


def test_pyproject_reads_the_version_from_the_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"], "the version belongs in execserver/__init__.py"
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "execserver.__version__"
    }


def test_the_installed_metadata_has_the_version() -> None:
    """The metadata the build backend wrote from ``attr:`` (a stale install fails here:
    re-run ``make venv`` after a version change)."""
    assert installed_version("execserver") == __version__


def test_the_command_line_prints_the_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "execserver", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == f"execserver {__version__}"


def test_the_deployment_manifests_run_this_version() -> None:
    tags = {
        path.relative_to(ROOT).as_posix(): match
        for path in sorted((ROOT / "deploy").rglob("*.yaml"))
        for match in re.findall(r"image:\s*\S+/execserver:(\S+)", path.read_text())
    }
    assert tags, "the manifests name an execserver image"
    assert {name: tag for name, tag in tags.items() if tag != __version__} == {}


def test_the_documented_start_up_line_names_this_version() -> None:
    text = " ".join((ROOT / "docs" / "deploying.md").read_text().split())
    assert f"`execserver {__version__} (codex exec-server protocol" in text


def test_the_changelog_latest_release_is_this_version() -> None:
    releases = re.findall(
        r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$",
        (ROOT / "CHANGELOG.md").read_text(),
        re.MULTILINE,
    )
    assert releases, "CHANGELOG.md has no release section"
    assert releases[0] == __version__
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text()
