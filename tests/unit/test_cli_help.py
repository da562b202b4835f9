"""`execserver --help`: the description above the subcommands names every one of
them, in plain text (the module docstring it once printed was reST and left
`patch` out)."""

from __future__ import annotations

import argparse
import re
import shutil

import pytest

from execserver.cli import _terminal_columns, build_parser


def test_top_level_help_names_every_subcommand_in_plain_text() -> None:
    parser = build_parser()
    subcommands = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    help_text = parser.format_help()
    description = help_text.split("\n\n")[1]  # the paragraph after the usage lines
    for name in subcommands.choices:
        assert re.search(rf"\b{name}\b", description), name
    assert "``" not in help_text


@pytest.mark.parametrize("columns", [None, "60", "137", "0", "-5", "wide"])
def test_help_width_is_what_shutil_would_give(
    columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The parsers' formatter asks for the width without importing shutil.
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _terminal_columns() == shutil.get_terminal_size().columns
