"""Start-up validation of the auth flags: the same bad command line makes execserver and
the reference print the same ``Error:`` line and exit with status 1."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from tests.support.servers import execserver_command, reference_command

TOKEN_DIGEST = hashlib.sha256(b"secret-token-123").hexdigest()

# (label, argv after the subcommand; {d} is a directory with tok, short, empty, secret)
CASES: list[tuple[str, list[str]]] = [
    ("mode without token", ["--ws-auth", "capability-token"]),
    ("token flag without mode", ["--ws-token-file", "{d}/tok"]),
    ("jwt flag without mode", ["--ws-issuer", "x"]),
    (
        "file and digest",
        ["--ws-auth", "capability-token", "--ws-token-file", "{d}/tok", "--ws-token-sha256", "00"],
    ),
    ("bad digest", ["--ws-auth", "capability-token", "--ws-token-sha256", "zz"]),
    ("empty digest", ["--ws-auth", "capability-token", "--ws-token-sha256", ""]),
    (
        "jwt flags in token mode",
        [
            "--ws-auth",
            "capability-token",
            "--ws-token-file",
            "{d}/tok",
            "--ws-max-clock-skew-seconds",
            "30",
        ],
    ),
    ("token flags in jwt mode", ["--ws-auth", "signed-bearer-token", "--ws-token-file", "{d}/tok"]),
    ("jwt without secret", ["--ws-auth", "signed-bearer-token"]),
    ("short secret", ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", "{d}/short"]),
    ("empty token file", ["--ws-auth", "capability-token", "--ws-token-file", "{d}/empty"]),
    (
        "empty secret file",
        ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", "{d}/empty"],
    ),
    (
        "missing secret file",
        ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", "{d}/nope"],
    ),
    ("missing token file", ["--ws-auth", "capability-token", "--ws-token-file", "{d}/nope"]),
    ("token file is a directory", ["--ws-auth", "capability-token", "--ws-token-file", "{d}"]),
    (
        "stdio with auth",
        ["--listen", "stdio", "--ws-auth", "capability-token", "--ws-token-file", "{d}/nope"],
    ),
    (
        "digest checked before stdio",
        ["--listen", "stdio", "--ws-auth", "capability-token", "--ws-token-sha256", "zz"],
    ),
    ("flags checked before listen", ["--listen", "bogus", "--ws-auth", "capability-token"]),
]


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    (tmp_path / "tok").write_text("secret-token-123\n")
    (tmp_path / "short").write_text("short\n")
    (tmp_path / "empty").write_text("  \n")
    (tmp_path / "secret").write_bytes(b"0123456789abcdef0123456789abcdef!!")
    return tmp_path


async def first_error_line(argv: list[str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    errors = [line for line in err.decode().splitlines() if line.startswith("Error: ")]
    assert proc.returncode is not None
    return proc.returncode, errors[0] if errors else err.decode()


@pytest.mark.interop
@pytest.mark.parametrize(("label", "args"), CASES, ids=[label for label, _ in CASES])
async def test_startup_error_matches_the_reference(
    label: str, args: list[str], secrets_dir: Path
) -> None:
    argv = [a.format(d=secrets_dir) for a in args]
    ours = await first_error_line(execserver_command(argv))
    theirs = await first_error_line(reference_command(argv))
    assert ours == theirs
    assert ours[0] == 1 and ours[1].startswith("Error: ")


async def test_bad_mode_is_a_usage_error_with_status_2() -> None:
    code, _ = await first_error_line(execserver_command(["--ws-auth", "bogus"]))
    assert code == 2


async def test_non_loopback_listener_without_auth_is_refused() -> None:
    code, line = await first_error_line(execserver_command(["--listen", "ws://0.0.0.0:0"]))
    assert code == 1
    assert "--allow-unauthenticated" in line and "ws://0.0.0.0:0" in line
