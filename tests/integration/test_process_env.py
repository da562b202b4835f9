"""envPolicy applied on the executor side, judged against the reference."""

from __future__ import annotations

import os

import pytest

from tests.support.rpc import connect
from tests.support.servers import start_server

# The daemon's own environment for these tests (both servers get the same one).
SERVER_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/home/tester",
    "USER": "tester",
    "LOGNAME": "tester",
    "SHELL": "/bin/bash",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "MY_API_KEY": "k1",
    "GITHUB_TOKEN": "t1",
    "DB_SECRET": "s1",
    "MyPassword": "p1",
    "FOO": "foo",
    "FOO_BAR": "fb",
    "TERM": "xterm",
    "USERNAME": "tester",
}
# What our Python daemon needs to start that the reference ignores.
if "VIRTUAL_ENV" in os.environ:
    SERVER_ENV["VIRTUAL_ENV"] = os.environ["VIRTUAL_ENV"]


def pol(inherit: str, ignore: bool = False, exclude=(), set_=None, include=()):  # type: ignore[no-untyped-def]
    return {
        "inherit": inherit,
        "ignoreDefaultExcludes": ignore,
        "exclude": list(exclude),
        "set": set_ or {},
        "includeOnly": list(include),
    }


CASES = [
    (None, {}),
    (None, {"FOO": "x"}),
    (pol("all"), {}),
    (pol("all", True), {}),
    (pol("core"), {}),
    (pol("none"), {}),
    (pol("all", exclude=["FOO*"]), {}),
    (pol("all", exclude=["foo"]), {}),
    (pol("all", set_={"NEW": "1", "FOO": "override"}), {}),
    (pol("all", include=["FOO*", "PATH"]), {}),
    (pol("all"), {"FOO": "fromEnv", "EXTRA": "e"}),
    (pol("none"), {"GITHUB_TOKEN": "x"}),
    (pol("all", set_={"MY_API_KEY": "z"}), {}),
    (pol("all", set_={"NEW": "1"}, include=["FOO"]), {}),
    (pol("core", set_={"FOO": "y"}), {"FOO": "x"}),
]

# Variables each daemon adds to its own environment (not part of the contract): our
# interpreter's, and the reference's CODEX_HOME (set by the fixture).
_DAEMON_NOISE = {"VIRTUAL_ENV", "LC_CTYPE", "CODEX_HOME"}


def _normalise(env: dict[str, str]) -> dict[str, str]:
    out = {k: v for k, v in env.items() if k not in _DAEMON_NOISE}
    if "PATH" in out:
        # The reference prepends its own helper directories to its PATH at start-up.
        parts = [p for p in out["PATH"].split(":") if "execserver-reference" not in p]
        out["PATH"] = ":".join(parts)
    return out


async def _environments(kind: str) -> list[dict[str, str]]:
    results = []
    async with start_server(kind, env=SERVER_ENV) as server, connect(server.url) as c:
        for i, (policy, env) in enumerate(CASES):
            extra = {} if policy is None else {"envPolicy": policy}
            ev = await c.run(f"e{i}", ["/usr/bin/env"], env=env, **extra)
            lines = ev.output().decode().splitlines()
            got = dict(line.split("=", 1) for line in lines)
            results.append(_normalise(got))
    return results


@pytest.mark.needs_reference
async def test_env_policy_matches_the_reference() -> None:
    ours = await _environments("execserver")
    theirs = await _environments("reference")
    for (policy, env), mine, ref in zip(CASES, ours, theirs, strict=True):
        assert mine == ref, (policy, env)
    # Sanity: the cases do exercise the policy (not all empty / all equal).
    assert ours[2] != ours[3] and ours[4] != ours[5]
