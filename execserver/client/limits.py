"""Bounds the client holds itself to, in a module of their own so that the
command line can print them in ``--help`` without loading the client."""

from __future__ import annotations

from typing import Final

__all__ = ["STDIN_STAGING_LIMIT"]

# Staged stdin goes through fs/writeFile, one base64 message; beyond this, write
# the input to a file yourself and redirect it.
STDIN_STAGING_LIMIT: Final = 64 * 1024 * 1024
