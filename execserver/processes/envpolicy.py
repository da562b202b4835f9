"""The child environment: ``env`` plus the executor-side ``envPolicy``.

Built from the daemon's own environment, in the reference's order: inherit ->
default excludes -> exclude -> set -> includeOnly -> overlay ``env``.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping

from execserver.wire.process import ExecEnvPolicy

__all__ = ["build_environment"]

# What inherit=core keeps on Linux in 0.169.0 (USERNAME is not among them).
CORE_VARS = frozenset(
    (
        "HOME",
        "LOGNAME",
        "PATH",
        "SHELL",
        "USER",
        "TMPDIR",
        "TEMP",
        "TMP",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
    )
)
DEFAULT_EXCLUDES = ("*KEY*", "*SECRET*", "*TOKEN*")


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    # Names are matched case-insensitively against shell-style globs.
    return re.compile(fnmatch.translate(pattern), re.IGNORECASE)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(_compile(p).match(name) for p in patterns)


def build_environment(
    env: Mapping[str, str], policy: ExecEnvPolicy | None, daemon_env: Mapping[str, str]
) -> dict[str, str]:
    if policy is None:
        # Without a policy the child gets exactly ``env``; nothing is inherited.
        return dict(env)
    if policy.inherit == "all":
        result = dict(daemon_env)
    elif policy.inherit == "core":
        result = {k: v for k, v in daemon_env.items() if k in CORE_VARS}
    else:
        result = {}
    if not policy.ignore_default_excludes:
        result = {k: v for k, v in result.items() if not _matches(k, DEFAULT_EXCLUDES)}
    if policy.exclude:
        result = {k: v for k, v in result.items() if not _matches(k, policy.exclude)}
    result.update(policy.set)
    if policy.include_only:
        result = {k: v for k, v in result.items() if _matches(k, policy.include_only)}
    result.update(env)
    return result
