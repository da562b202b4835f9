"""environmentConfig/read: project requested keys out of the executor's config layers.

What 0.169.0 reports when nothing else is configured: the ``user`` layer
``$CODEX_HOME/config.toml`` (``~/.codex`` by default) when it exists and holds
at least one requested key; no requirements layers; ``cloudInsertionIndex`` 0.
The projection keeps the file's key order and is re-serialised (toml_out).
"""

from __future__ import annotations

import os
import pwd
import re
import socket
import tomllib
from typing import Any

from execserver.discovery.toml_out import dumps
from execserver.wire.errors import RpcError
from execserver.wire.uri import path_to_uri

__all__ = ["check_paths", "read_config"]

_POSITION_RE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def home_dir() -> str:
    home = os.environ.get("HOME")
    if not home:
        home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.abspath(home)


def codex_home() -> str:
    configured = os.environ.get("CODEX_HOME")
    return os.path.abspath(configured) if configured else os.path.join(home_dir(), ".codex")


def check_paths(config_paths: list[list[str]], requirements_paths: list[list[str]]) -> None:
    if any(not path for path in (*config_paths, *requirements_paths)):
        raise RpcError.invalid_params("TOML paths must contain at least one key segment")
    if not config_paths and not requirements_paths:
        raise RpcError.invalid_params("at least one config or requirements path is required")


def _load(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as stream:
            return tomllib.load(stream)
    except FileNotFoundError:
        return None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _POSITION_RE.search(message)
        where = f"{path}:{match.group(1)}:{match.group(2)}" if match else path
        detail = message[: match.start()] if match else message
        raise RpcError.internal(
            f"failed to load executor-local config: {where}: {detail}"
        ) from None
    except OSError as exc:
        raise RpcError.internal(f"failed to load executor-local config: {path}: {exc}") from None


def _wanted(key_paths: list[list[str]], prefix: list[str]) -> tuple[bool, bool]:
    """(whole subtree requested, something below requested) for ``prefix``."""
    whole = any(len(p) <= len(prefix) and prefix[: len(p)] == p for p in key_paths)
    below = any(len(p) > len(prefix) and p[: len(prefix)] == prefix for p in key_paths)
    return whole, below


def project(table: dict[str, Any], key_paths: list[list[str]], prefix: list[str]) -> dict[str, Any]:
    """The parts of ``table`` named by ``key_paths``, in the table's own order."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        here = [*prefix, key]
        whole, below = _wanted(key_paths, here)
        if whole or (below and not isinstance(value, dict)):
            # A path reaching past a non-table value selects that value (as observed).
            out[key] = value
        elif below:
            sub = project(value, key_paths, here)
            if sub:
                out[key] = sub
    return out


def read_config(
    config_paths: list[list[str]],
    requirements_paths: list[list[str]],
    account_home: str | None = None,
) -> dict[str, Any]:
    """Blocking: the environmentConfig/read result (wire keys). ``account_home``: a
    tenant's home (--tenants): its own ``~/.codex``, never the daemon's."""
    user_home = home_dir() if account_home is None else os.path.abspath(account_home)
    home = codex_home() if account_home is None else os.path.join(user_home, ".codex")
    layers: list[dict[str, str]] = []
    config_file = os.path.join(home, "config.toml")
    document = _load(config_file) if config_paths else None
    if document is not None:
        projected = project(document, config_paths, [])
        if projected:
            layers.append(
                {
                    "source": f"user ({config_file})",
                    "baseDir": path_to_uri(home),
                    "toml": dumps(projected),
                }
            )
    return {
        "userHomeDir": path_to_uri(user_home),
        "codexHomeDir": path_to_uri(home),
        "hostname": socket.gethostname(),
        "config": {"layers": layers, "cloudInsertionIndex": 0},
        "requirements": {"layers": [], "cloudInsertionIndex": 0},
    }
