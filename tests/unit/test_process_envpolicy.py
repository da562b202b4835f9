"""envPolicy construction in the reference's order (recorded from the reference)."""

from __future__ import annotations

import pytest

from execserver.processes.envpolicy import build_environment
from execserver.wire.process import ExecEnvPolicy

DAEMON = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/t",
    "USER": "t",
    "USERNAME": "t",
    "LANG": "C.UTF-8",
    "MY_API_KEY": "k",
    "GITHUB_TOKEN": "t",
    "DB_SECRET": "s",
    "MONKEY": "m",
    "PASSWORD": "p",
    "FOO": "foo",
    "FOO_BAR": "fb",
    "CODEX_HOME": "/c",
}


def policy(
    inherit: str = "all",
    ignore: bool = False,
    exclude: tuple[str, ...] = (),
    set_: dict[str, str] | None = None,
    include: tuple[str, ...] = (),
) -> ExecEnvPolicy:
    return ExecEnvPolicy(inherit, ignore, list(exclude), set_ or {}, list(include))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pol", "env", "expected"),
    [
        (None, {}, {}),
        (None, {"FOO": "x"}, {"FOO": "x"}),
        (
            policy("all"),
            {},
            {
                k: v
                for k, v in DAEMON.items()
                if k not in ("MY_API_KEY", "GITHUB_TOKEN", "DB_SECRET", "MONKEY")
            },
        ),
        (policy("all", ignore=True), {}, DAEMON),
        (
            policy("core"),
            {},
            {"PATH": "/usr/bin:/bin", "HOME": "/home/t", "USER": "t", "LANG": "C.UTF-8"},
        ),
        (policy("none"), {}, {}),
        (policy("none"), {"GITHUB_TOKEN": "x"}, {"GITHUB_TOKEN": "x"}),
        (
            policy("core", exclude=("path",)),
            {},
            {"HOME": "/home/t", "USER": "t", "LANG": "C.UTF-8"},
        ),
        (policy("none", set_={"MY_API_KEY": "z"}), {}, {"MY_API_KEY": "z"}),
        (policy("all", include=("FOO",), set_={"NEW": "1"}), {}, {"FOO": "foo"}),
        (
            policy("all", include=("foo*", "PATH")),
            {},
            {"FOO": "foo", "FOO_BAR": "fb", "PATH": "/usr/bin:/bin"},
        ),
        (
            policy("core", set_={"FOO": "y"}),
            {"FOO": "x"},
            {
                "PATH": "/usr/bin:/bin",
                "HOME": "/home/t",
                "USER": "t",
                "LANG": "C.UTF-8",
                "FOO": "x",
            },
        ),
    ],
)
def test_environment_construction(
    pol: ExecEnvPolicy | None, env: dict[str, str], expected: dict[str, str]
) -> None:
    assert build_environment(env, pol, DAEMON) == expected


def test_exclude_matches_whole_names_case_insensitively() -> None:
    got = build_environment({}, policy("all", exclude=("foo",)), DAEMON)
    assert "FOO" not in got and "FOO_BAR" in got
