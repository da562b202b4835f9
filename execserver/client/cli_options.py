"""Options and settings every client command line shares, in a module that
imports nothing but argparse: ``execserver patch --persist`` loads it on every
run. The client's command lines read their environment variables here."""

from __future__ import annotations

import argparse
import os

__all__ = [
    "CONTROL_DIR_ENV",
    "TOKEN_ENV",
    "add_token_option",
    "add_verbose_option",
    "control_directory",
]

# Where `--persist` puts its control master's socket (execserver.client.control).
CONTROL_DIR_ENV = "EXECSERVER_CONTROL_DIR"
TOKEN_ENV = "EXECSERVER_TOKEN"


def add_token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help="bearer token for an authenticated server (default $EXECSERVER_TOKEN)",
    )


def add_verbose_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true", help="add protocol details (JSON-RPC codes) to errors"
    )


def control_directory() -> str | None:
    """$EXECSERVER_CONTROL_DIR: where the control masters' sockets go (None: the default)."""
    return os.environ.get(CONTROL_DIR_ENV) or None
