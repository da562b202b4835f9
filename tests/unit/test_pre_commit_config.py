"""``.pre-commit-config.yaml`` runs what ``make lint`` and ``make typecheck`` run.

The hooks call the Makefile's targets, so the tools and their versions are the
ones the Makefile installs. Both files are read here: the hooks' targets must be
``lint``'s prerequisites plus ``typecheck``, and make's own dry run of the hooks'
targets must print exactly the commands of ``make lint typecheck`` (the
virtualenv stamps are taken as up to date, so only the checks are printed).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
STAMPS = (".venv/.installed", ".venv/.installed-bench", ".venv-lint/.installed")


def hooks() -> list[dict[str, Any]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    found: list[dict[str, Any]] = []
    for repo in config["repos"]:
        assert repo["repo"] == "local", "a hook from elsewhere would bring its own tool version"
        found.extend(repo["hooks"])
    return found


def hook_targets() -> list[str]:
    targets = []
    for hook in hooks():
        words = shlex.split(hook["entry"])
        assert words[0] == "make" and len(words) == 2, hook["entry"]
        targets.append(words[1])
    return targets


def prerequisites(makefile: str, target: str) -> list[str]:
    match = re.search(rf"^{re.escape(target)}:([^=\n]*)$", makefile, re.MULTILINE)
    assert match is not None, f"the Makefile has no {target} target"
    return match.group(1).split()


def dry_run(*targets: str) -> list[str]:
    """The commands make would run for ``targets``, continuation lines joined."""
    stamps = [word for stamp in STAMPS for word in ("-o", stamp)]
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", *stamps, *targets],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "MAKEFLAGS": ""},
    )
    joined = result.stdout.replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip()]


def test_the_hooks_are_the_targets_of_make_lint_and_typecheck() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert hook_targets() == [*prerequisites(makefile, "lint"), "typecheck"]


def test_the_hooks_run_exactly_the_commands_of_make_lint_and_typecheck() -> None:
    commands = dry_run("lint", "typecheck")
    tools = {os.path.basename(shlex.split(command)[0]) for command in commands}
    assert {"ruff", "mypy", "hadolint", "checkov", "kubernetes-validate"} <= tools
    assert [command for target in hook_targets() for command in dry_run(target)] == commands


def test_each_hook_names_the_tools_it_runs_and_takes_no_file_list() -> None:
    for hook in hooks():
        assert hook["language"] == "system"
        assert hook["pass_filenames"] is False  # the targets check the whole tree
        for command in dry_run(*shlex.split(hook["entry"])[1:]):
            words = shlex.split(command)
            tool = os.path.basename(words[0])
            if tool == "rm":
                continue
            if tool == "python":  # a script of the repository, named by its file name
                tool = Path(words[1]).stem
            assert tool in hook["name"], f"hook {hook['id']} runs {tool}: say so in its name"
