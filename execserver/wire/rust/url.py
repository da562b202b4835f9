"""The Rust ``url`` crate's ``ParseError`` texts that the reference passes on."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final


__all__ = ["EMPTY_HOST", "RELATIVE_URL_WITHOUT_BASE"]

RELATIVE_URL_WITHOUT_BASE: Final = "relative URL without a base"
EMPTY_HOST: Final = "empty host"
