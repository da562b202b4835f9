"""environmentConfig/read, capabilities/discoverV2, capabilityRoots/discoverV1, both servers."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.rpc import connect, uri
from tests.support.servers import RunningServer, start_server

CONFIG = """model = "gpt-x"
n = 1.5
big = 10000000000
s = 'say "q"'
ml = \"\"\"a
b\"\"\"
dt = 1979-05-27T07:32:00Z
arr = [[1, 2], ["a"]]
empty = {}
[t]
"key with space" = 1
arr2 = [{a = 1}, {b = 2}]
[[aot]]
x = 1
[[aot]]
x = 2
[deep.a.b]
c = 1
[deep.a]
z = true
"""


@pytest.fixture(params=["execserver", "reference"])
async def server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[RunningServer, Path]]:
    home = tmp_path / "codexhome"
    home.mkdir()
    env = dict(os.environ, CODEX_HOME=str(home))
    async with start_server(request.param, env=env) as running:
        yield running, home


PROJECTIONS = [
    ([["model"]], 'model = "gpt-x"\n'),
    ([["n"]], "n = 1.5\n"),
    ([["big"]], "big = 10000000000\n"),
    ([["s"]], "s = 'say \"q\"'\n"),
    ([["ml"]], 'ml = """\na\nb"""\n'),
    ([["dt"]], "dt = 1979-05-27T07:32:00Z\n"),
    ([["arr"]], 'arr = [[1, 2], ["a"]]\n'),
    ([["empty"]], "[empty]\n"),
    ([["t"]], '[t]\n"key with space" = 1\n\n[[t.arr2]]\na = 1\n\n[[t.arr2]]\nb = 2\n'),
    ([["aot"]], "[[aot]]\nx = 1\n\n[[aot]]\nx = 2\n"),
    ([["deep"]], "[deep.a]\nz = true\n\n[deep.a.b]\nc = 1\n"),
    ([["deep", "a", "b"]], "[deep.a.b]\nc = 1\n"),
    ([["t", "arr2"]], "[[t.arr2]]\na = 1\n\n[[t.arr2]]\nb = 2\n"),
    ([["model", "x"]], 'model = "gpt-x"\n'),  # a path past a value selects the value
    ([["model"], ["model"]], 'model = "gpt-x"\n'),
    # the file's order, not the request's; plain values before tables
    (
        [["deep", "a", "z"], ["model"], ["t"]],
        'model = "gpt-x"\n\n[t]\n"key with space" = 1\n\n[[t.arr2]]\na = 1\n\n'
        "[[t.arr2]]\nb = 2\n\n[deep.a]\nz = true\n",
    ),
    ([["nope"]], None),  # nothing selected: no layer
]


async def test_environment_config_read(server: tuple[RunningServer, Path], tmp_path: Path) -> None:
    running, home = server
    (home / "config.toml").write_text(CONFIG)
    cwd = uri(tmp_path)
    async with connect(running.url) as client:
        for paths, toml in PROJECTIONS:
            result = await client.ok(
                "environmentConfig/read",
                {"cwd": cwd, "configPaths": paths, "requirementsPaths": []},
            )
            expected_layers = (
                []
                if toml is None
                else [
                    {
                        "source": f"user ({home}/config.toml)",
                        "baseDir": uri(home),
                        "toml": toml,
                    }
                ]
            )
            assert result["config"] == {"layers": expected_layers, "cloudInsertionIndex": 0}, paths
            assert result["requirements"] == {"layers": [], "cloudInsertionIndex": 0}
        assert result["codexHomeDir"] == uri(home)
        assert result["userHomeDir"] == uri(os.environ["HOME"])
        assert result["hostname"] == socket.gethostname()
        (home / "config.toml").unlink()
        no_file = await client.ok(
            "environmentConfig/read",
            {"cwd": cwd, "configPaths": [["model"]], "requirementsPaths": [["x"]]},
        )
        assert no_file["config"] == {"layers": [], "cloudInsertionIndex": 0}
        (home / "config.toml").write_text("model = [broken\n")
        code, message = await client.err(
            "environmentConfig/read",
            {"cwd": cwd, "configPaths": [["model"]], "requirementsPaths": []},
        )
        assert code == -32603
        assert message.startswith(f"failed to load executor-local config: {home}/config.toml:1:")
        assert await client.err(
            "environmentConfig/read", {"cwd": cwd, "configPaths": [[]], "requirementsPaths": []}
        ) == (-32602, "TOML paths must contain at least one key segment")
        assert await client.err(
            "environmentConfig/read", {"cwd": cwd, "configPaths": [], "requirementsPaths": [[]]}
        ) == (-32602, "TOML paths must contain at least one key segment")
        assert await client.err(
            "environmentConfig/read", {"cwd": cwd, "configPaths": [], "requirementsPaths": []}
        ) == (-32602, "at least one config or requirements path is required")
        assert await client.err(
            "environmentConfig/read",
            {"cwd": "rel", "configPaths": [["m"]], "requirementsPaths": []},
        ) == (-32602, "invalid URI: relative URL without a base")


def _make(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_capability_roots(server: tuple[RunningServer, Path], tmp_path: Path) -> None:
    running, _home = server
    d = tmp_path
    _make(d / "r1" / "SKILL.md", "---\nname: s1\ndescription: d1\n---\nbody\n")
    _make(d / "r2" / "a" / "b" / "SKILL.md")
    _make(d / "r4" / "skills" / "x" / "SKILL.md")
    _make(d / "r4" / "skills" / "y" / "other.md")
    _make(d / "r5" / ".hidden" / "SKILL.md")
    _make(d / "r6" / "a" / "SKILL.md")
    _make(d / "r6" / "skills" / "b" / "SKILL.md")
    _make(d / "r7" / "skills" / "a" / "skill.md")
    _make(d / "r9" / ".codex" / "skills" / "c" / "SKILL.md")
    _make(d / "r9" / ".agents" / "skills" / "g" / "SKILL.md")
    (d / "r11").mkdir()
    (d / "r11" / "lnk").symlink_to(d / "r4" / "skills" / "x")
    _make(d / "f.txt")
    names = ["r1", "r2", "r4", "r5", "r6", "r7", "r9", "r11", "nope", "f.txt"]
    async with connect(running.url) as client:
        empty = await client.ok("capabilityRoots/discoverV1", {"roots": []})
        result = await client.ok(
            "capabilityRoots/discoverV1",
            {"roots": [{"id": n, "path": uri(d / n)} for n in names]},
        )
        v2 = await client.ok("capabilities/discoverV2", {"cwd": uri(d / "r9")})
        bad = await client.err(
            "capabilityRoots/discoverV1", {"roots": [{"id": "x", "path": "rel"}]}
        )
    assert empty == {"roots": []}
    assert v2 == {"plugins": [], "skills": [], "warnings": []}
    assert bad == (-32602, "invalid URI: relative URL without a base")
    found: dict[str, Any] = {}
    for root, name in zip(result["roots"], names, strict=True):
        assert (root["id"], root["path"], root["plugin"]) == (name, uri(d / name), None)
        assert (root["namespaceManifests"], root["warnings"]) == ([], [])
        for skill in root["skills"]:
            assert skill["metadata"] is None
        found[name] = ([s["instructions"]["path"] for s in root["skills"]], root["error"])
    skill = result["roots"][0]["skills"][0]["instructions"]
    assert skill["contents"] == "---\nname: s1\ndescription: d1\n---\nbody\n"

    def paths(*rel: str) -> list[str]:
        return [uri(d / r) for r in rel]

    assert found == {
        "r1": (paths("r1/SKILL.md"), None),
        "r2": (paths("r2/a/b/SKILL.md"), None),
        "r4": (paths("r4/skills/x/SKILL.md"), None),
        "r5": (paths("r5/.hidden/SKILL.md"), None),
        "r6": (paths("r6/a/SKILL.md", "r6/skills/b/SKILL.md"), None),
        "r7": ([], None),
        "r9": (paths("r9/.agents/skills/g/SKILL.md", "r9/.codex/skills/c/SKILL.md"), None),
        "r11": (paths("r11/lnk/SKILL.md"), None),
        "nope": (
            [],
            f"failed to inspect capability root {uri(d / 'nope')}: "
            "No such file or directory (os error 2)",
        ),
        "f.txt": ([], f"capability root {uri(d / 'f.txt')} is not a directory"),
    }


DISABLED = {"type": "disabled"}


@pytest.mark.parametrize(
    ("sandbox", "expected"),
    [
        # discoverV2's own sandbox type: cwd is a required string...
        ({"permissions": DISABLED, "windowsSandboxLevel": "disabled"}, "missing field `cwd`"),
        (
            {"permissions": DISABLED, "windowsSandboxLevel": "disabled", "cwd": None},
            "invalid type: null, expected a string",
        ),
        # ...and the rest is the shared sandbox context, with its texts.
        (
            {"permissions": {"type": "bogus"}, "windowsSandboxLevel": "disabled", "cwd": "x"},
            "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`",
        ),
        (None, None),
        ({"permissions": DISABLED, "windowsSandboxLevel": "disabled", "cwd": "file:///"}, None),
    ],
)
async def test_discover_v2_sandbox(
    server: tuple[RunningServer, Path], sandbox: Any, expected: str | None
) -> None:
    running, _ = server
    params = {"cwd": "file:///", "sandbox": sandbox}
    async with connect(running.url) as client:
        if expected is None:
            assert await client.ok("capabilities/discoverV2", params) == {
                "plugins": [],
                "skills": [],
                "warnings": [],
            }
        else:
            assert await client.err("capabilities/discoverV2", params) == (-32602, expected)
