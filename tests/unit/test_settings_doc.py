"""docs/settings.md names every flag of ``execserver serve``: a flag added to the
parser without a line in the table would be a setting nobody can find.

(The environment variables are checked against ``config.ENVIRONMENT_SETTINGS`` in
tests/unit/test_settings_sources.py.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from execserver.cli import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def serve_flags() -> list[str]:
    parser = build_parser("serve")
    (subcommands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    serve = subcommands.choices["serve"]
    return [
        option
        for action in serve._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
        if option.startswith("--")
    ]


def test_every_serve_flag_has_a_row_in_the_settings_page() -> None:
    flags = serve_flags()
    assert "--listen" in flags and "--process-cpu-max" in flags
    rows = {
        line.split("|")[1].strip()
        for line in PAGE.read_text().splitlines()
        if line.startswith("| `--")
    }
    missing = [flag for flag in flags if f"`{flag}`" not in rows]
    assert not missing, f"docs/settings.md has no row for {missing}"
