"""scripts/reference.py: the pin, the check of a cached install, and the one-line
reason it gives when the reference cannot be had."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import reference

ROOT = Path(__file__).resolve().parents[2]


def test_the_lockfile_pins_the_exact_version_with_sha512_integrity() -> None:
    package = json.loads((reference.LOCK_DIR / "package.json").read_text())
    assert package["dependencies"] == {reference.PACKAGE: reference.VERSION}
    lock = json.loads((reference.LOCK_DIR / "package-lock.json").read_text())
    assert lock["packages"][""]["dependencies"] == {reference.PACKAGE: reference.VERSION}
    pinned = reference.pinned_integrity()
    for suffix in ("", "-linux-x64", "-linux-arm64"):
        name = f"node_modules/{reference.PACKAGE}{suffix}"
        assert lock["packages"][name]["version"] == reference.VERSION + suffix
        assert pinned[name].startswith("sha512-"), name


def _fake_install(root: Path, integrity: dict[str, str]) -> Path:
    """An install tree as npm lays it out, with npm's record of what it installed."""
    binary = reference._binary_in(root)
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    record = {"packages": {name: {"integrity": value} for name, value in integrity.items()}}
    (root / "node_modules" / ".package-lock.json").write_text(json.dumps(record))
    return binary


@pytest.mark.skipif(
    (sys.platform, os.uname().machine) not in reference._PLATFORMS, reason="no pinned build here"
)
def test_a_cached_install_counts_only_with_the_pinned_integrity(tmp_path: Path) -> None:
    pinned = reference.pinned_integrity()
    good = tmp_path / "good"
    _fake_install(good, pinned)
    assert reference._verify(good) is None

    tampered = tmp_path / "tampered"
    platform_package = f"node_modules/{reference._platform_package()[0]}"
    _fake_install(tampered, {**pinned, platform_package: "sha512-AAAA"})
    problem = reference._verify(tampered)
    assert problem is not None and platform_package in problem and "sha512-AAAA" in problem

    assert reference._verify(tmp_path / "absent") is not None


def _run_cli(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    empty_path = tmp_path / "empty-bin"  # a PATH on which there is no npm
    empty_path.mkdir(exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if k != "CODEX_BIN"}
    return subprocess.run(
        [sys.executable, "-m", "scripts.reference"],
        cwd=ROOT,
        env={**clean, "PATH": str(empty_path), "XDG_CACHE_HOME": str(tmp_path / "cache"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_npm_and_cache_the_cli_names_the_reason_in_one_line(tmp_path: Path) -> None:
    done = _run_cli(tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "npm is not on PATH" in lines[0] and "CODEX_BIN" in lines[0]


def test_codex_bin_overrides_the_install(tmp_path: Path) -> None:
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    done = _run_cli(tmp_path, CODEX_BIN=str(fake))
    assert (done.returncode, done.stdout.strip()) == (0, str(fake))

    missing = _run_cli(tmp_path, CODEX_BIN=str(tmp_path / "nope"))
    assert missing.returncode == 1 and "is not an executable file" in missing.stderr


def test_npm_failures_are_summarised_by_code_and_first_message() -> None:
    offline = (
        "npm error code ENOTCACHED\n"
        "npm error request to https://registry.npmjs.org/@openai%2fcodex failed: cache mode"
        " is 'only-if-cached' but no cached response is available.\n"
        "npm error A complete log of this run can be found in: /c/_logs/x-debug-0.log\n"
    )
    assert reference._npm_error_summary(offline) == (
        "ENOTCACHED: request to https://registry.npmjs.org/@openai%2fcodex failed:"
        " cache mode is 'only-if-cached' but no cached response is available."
    )
    refused = (
        "npm error code ECONNREFUSED\nnpm error syscall connect\nnpm error errno ECONNREFUSED\n"
        "npm error FetchError: request to http://127.0.0.1:9/x failed, reason: connect"
        " ECONNREFUSED 127.0.0.1:9\n"
        "npm error     at ClientRequest.<anonymous> (/npm/lib/index.js:130:14)\n"
        "npm error   code: 'ECONNREFUSED',\n"
    )
    assert reference._npm_error_summary(refused) == (
        "ECONNREFUSED: FetchError: request to http://127.0.0.1:9/x failed, reason: connect"
        " ECONNREFUSED 127.0.0.1:9"
    )
