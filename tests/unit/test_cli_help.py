"""`execserver --help`: the description above the subcommands names every one of
them, in plain text (the module docstring it once printed was reST and left
`patch` out)."""

from __future__ import annotations

import argparse
import re

from execserver.cli import build_parser


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
