"""Options every client command line shares, in a module that imports nothing
but argparse: ``execserver patch --persist`` loads it on every run."""

from __future__ import annotations

import argparse
import os

__all__ = ["add_token_option", "add_verbose_option"]


def add_token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token",
        default=os.environ.get("EXECSERVER_TOKEN"),
        help="bearer token for an authenticated server (default $EXECSERVER_TOKEN)",
    )


def add_verbose_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true", help="add protocol details (JSON-RPC codes) to errors"
    )
