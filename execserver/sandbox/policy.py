"""Policy resolution: a ``FileSystemSandboxContext`` plus a cwd -> concrete host paths.

Everything the enforcement backends need is decided here, once, from the
context alone:

* ``current_working_directory`` and ``project_roots`` resolve to the workspace
  roots (``policyContext.workspaceRoots`` wins over the flat member); the policy
  cwd itself grants nothing (verified against 0.169.0: a cwd-entry write grant
  with a cwd but no roots left the cwd read-only).
* Paths are canonicalised (``canonical_path``: ``realpath``'s answer, within
  the kernel's bounds), because bind mounts are per real path: a writable
  root given through a symlink is bound at its target, and a grant cannot be
  widened by naming a link. A path that follows a symlink lying inside one
  of the policy's writable roots is refused outright (the sandboxed command
  could have planted it: ``crossed_writable_symlink``); this covers every
  entry, ``project_roots`` subpaths and the temporary directories.
* For one path, the most specific entry wins; for the same path
  ``deny``/``none`` > ``write`` > ``read``.
* Missing paths grant nothing (a writable root that does not exist is accepted
  and ignored, as the reference does); ``unknown`` specials are ignored.
"""

from __future__ import annotations

import collections
import fnmatch
import glob
import os
import stat
from dataclasses import dataclass
from typing import Final, Literal

from execserver.config import DEFAULT_GLOB_SCAN_LIMIT
from execserver.wire.errors import RpcError
from execserver.wire.sandbox import (
    CwdSpecial,
    DisabledPermissions,
    ExternalPermissions,
    FileSystemSandboxContext,
    GlobPatternPath,
    ManagedPermissions,
    MinimalSpecial,
    PathPath,
    ProjectRootsSpecial,
    RestrictedFileSystem,
    RootSpecial,
    SlashTmpSpecial,
    SpecialFsPath,
    TmpdirSpecial,
    UnknownSpecial,
)
from execserver.wire.uri import uri_to_path

__all__ = [
    "DYNAMIC_CWD_MESSAGE",
    "MINIMAL_READ_PATHS",
    "PROTECTED_NAMES",
    "PathRule",
    "ResolvedPolicy",
    "canonical_path",
    "has_dynamic_entries",
    "resolve_policy",
    "restricts_access",
    "unenforceable",
]

RuleAccess = Literal["read", "write", "deny"]

# Names kept read-only (and not creatable) inside every writable root.
PROTECTED_NAMES: Final = (".git", ".codex", ".agents", ".aws")
# The platform's minimal read set (`:minimal`), as codex binds it.
MINIMAL_READ_PATHS: Final = ("/bin", "/etc", "/lib", "/lib64", "/sbin", "/usr")
DYNAMIC_CWD_MESSAGE: Final = "file system sandbox context with dynamic permissions requires cwd"
DEFAULT_GLOB_SCAN_DEPTH: Final = 8
_PRECEDENCE: Final[dict[RuleAccess, int]] = {"read": 0, "write": 1, "deny": 2}


@dataclass(frozen=True)
class PathRule:
    path: str  # canonical, existing
    access: RuleAccess
    is_dir: bool


@dataclass(frozen=True)
class ResolvedPolicy:
    """What the sandbox must enforce, in host paths."""

    kind: Literal["disabled", "external", "managed"]
    network_restricted: bool
    root_access: Literal["read", "write"] | None = None  # `:root` grant (or unrestricted)
    minimal_read: bool = False
    rules: tuple[PathRule, ...] = ()
    cwd: str | None = None  # canonical policy cwd (informational)
    legacy_landlock: bool = False

    @property
    def enforces_nothing(self) -> bool:
        return self.kind == "disabled"

    @property
    def full_read(self) -> bool:
        """Every path readable: no mount view needed for reads."""
        return self.root_access is not None and not any(r.access == "deny" for r in self.rules)

    @property
    def full_write(self) -> bool:
        """Every path writable and readable: no mount namespace needed at all."""
        return self.root_access == "write" and all(r.access == "write" for r in self.rules)

    @property
    def writable(self) -> tuple[str, ...]:
        return tuple(r.path for r in self.rules if r.access == "write")

    @property
    def readable(self) -> tuple[str, ...]:
        return tuple(r.path for r in self.rules if r.access == "read")

    @property
    def denied(self) -> tuple[str, ...]:
        return tuple(r.path for r in self.rules if r.access == "deny")


def _is_dynamic(entry_path: object) -> bool:
    if isinstance(entry_path, SpecialFsPath):
        return isinstance(entry_path.value, CwdSpecial | ProjectRootsSpecial)
    if isinstance(entry_path, GlobPatternPath):
        return not entry_path.pattern.startswith("/")
    return False


def has_dynamic_entries(context: FileSystemSandboxContext) -> bool:
    """True when the policy needs a cwd (cwd/project-root specials, relative globs)."""
    perms = context.permissions
    if not isinstance(perms, ManagedPermissions):
        return False
    fs = perms.file_system
    if not isinstance(fs, RestrictedFileSystem):
        return False
    return any(_is_dynamic(e.path) for e in fs.entries)


class _GlobScan:
    """Expands one pattern (``*``, ``?``, ``[..]`` within a name, ``**`` for any
    number of directories up to ``max_depth``, hidden names included, symlinked
    directories not descended), counting every directory entry it reads.

    Bounded because it runs for every sandboxed launch: a deny glob over a huge
    tree must not stall the launch (or the daemon) without limit. Past the limit
    the request is refused: a deny set that was not fully enumerated cannot be
    enforced (fail closed)."""

    def __init__(self, pattern: str, max_depth: int, limit: int) -> None:
        self.pattern = pattern
        self.max_depth = max_depth
        self.limit = limit
        self.scanned = 0
        self.found: list[str] = []
        self._listed: set[str] = set()

    def run(self) -> list[str]:
        segments = [s for s in self.pattern.split("/") if s]
        self._match("/", segments, 0)
        return sorted(set(self.found))

    def _entries(self, directory: str) -> list[os.DirEntry[str]]:
        # `**/x` lists a directory twice (for `x`, and to descend): count it once.
        first_time = directory not in self._listed
        self._listed.add(directory)
        try:
            with os.scandir(directory) as it:
                entries = []
                for entry in it:
                    if first_time:
                        self.scanned += 1
                        if self.scanned > self.limit:
                            raise unenforceable_glob(self.pattern, self.limit)
                    entries.append(entry)
                return entries
        except (NotADirectoryError, FileNotFoundError, PermissionError):
            return []

    def _match(self, directory: str, segments: list[str], descended: int) -> None:
        if not segments:
            self.found.append(directory)
            return
        segment, rest = segments[0], segments[1:]
        if segment == "**":
            self._match(directory, rest, descended)
            if descended >= self.max_depth:
                return
            for entry in self._entries(directory):
                if entry.is_dir(follow_symlinks=False):
                    self._match(entry.path, segments, descended + 1)
                elif not rest:  # a trailing `**` matches files too
                    self.found.append(entry.path)
            return
        if not glob.has_magic(segment):
            path = os.path.join(directory, segment)
            if os.path.lexists(path):
                self._match(path, rest, descended)
            return
        for entry in self._entries(directory):
            if fnmatch.fnmatchcase(entry.name, segment):
                self._match(entry.path, rest, descended)


def unenforceable(reason: str) -> RpcError:
    return RpcError.invalid_params(f"sandbox intent cannot be enforced on this executor: {reason}")


def unenforceable_glob(pattern: str, limit: int) -> RpcError:
    return unenforceable(
        f"glob pattern {pattern} needs more than {limit} directory entries to expand"
    )


def _expand_glob(pattern: str, max_depth: int, limit: int) -> list[str]:
    return _GlobScan(pattern, max_depth, limit).run()


_MAX_SYMLINK_HOPS: Final = 40  # the kernel's limit (ELOOP)
# Components one resolution may walk, links' targets included: a real path needs
# far fewer (PATH_MAX is 4 096 bytes); a planted chain of long links needs more.
_MAX_RESOLVE_STEPS: Final = 4096


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _walk(path: str, stop_in: list[str] | None = None) -> tuple[str, str | None]:
    """Resolve ``path`` as ``os.path.realpath`` does (a missing component is kept as
    named, ``..`` after a link applies to the link's target), within the kernel's
    bounds: past 40 symlinks, or ``_MAX_RESOLVE_STEPS`` components walked in all,
    RpcError. Returns ``(resolved path, None)``; with ``stop_in``, it stops at the
    first symlink met inside one of those directories and returns it second."""
    current = "/" if path.startswith("/") else os.getcwd()
    pending = collections.deque(c for c in path.split("/") if c and c != ".")
    hops = steps = 0
    while pending:
        steps += 1
        if steps > _MAX_RESOLVE_STEPS:
            raise unenforceable(f"cannot resolve {path}: too many path components")
        component = pending.popleft()
        if component == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, component)
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except OSError:
            is_link = False  # missing (or unreadable): kept as named, as realpath does
        if not is_link:
            current = candidate
            continue
        if stop_in is not None and _inside(current, stop_in):
            return current, candidate
        hops += 1
        if hops > _MAX_SYMLINK_HOPS:
            raise unenforceable(f"cannot resolve {path}: too many levels of symbolic links")
        try:
            link = os.readlink(candidate)
        except OSError:  # replaced meanwhile: resolve it as it is now, next time round
            pending.appendleft(component)
            continue
        if link.startswith("/"):
            current = "/"
        pending.extendleft(reversed([c for c in link.split("/") if c and c != "."]))
    return current, None


def _kernel_resolved(path: str) -> str | None:
    """``path`` resolved by the kernel, or None when it cannot say (the caller then
    walks, ``_walk``). An ``O_PATH`` open and a read of the descriptor's link in
    /proc are three system calls, where ``_walk`` makes an lstat per component of
    every path a policy names: that walk was a quarter of the daemon's CPU with
    100 agents making sandboxed fs calls (benchmarks/results/scale_profile.txt).
    None for a relative path, a missing one, a loop past the kernel's 40 links
    (``_walk`` then raises its own error), a permission refused on the way, or a
    file deleted meanwhile."""
    if not path.startswith("/"):
        return None
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        resolved = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)
    if not resolved.startswith("/") or resolved.endswith(" (deleted)"):
        return None
    return resolved


def canonical_path(path: str) -> str | None:
    """``path`` with every symlink resolved (``_walk``), or None when that names
    nothing that exists (such a path grants and denies nothing).

    Why not ``os.path.realpath`` itself: it follows a chain of symlinks
    without any limit, one Python step per component. A sandboxed command that
    plants a chain where a context names a writable path made one resolution
    take 0.8 s (900 links whose targets are ~200 components each) and a chain
    of 3 000 raised RecursionError."""
    fast = _kernel_resolved(path)
    if fast is not None:
        return fast
    resolved, _ = _walk(path)
    return resolved if os.path.exists(resolved) else None


def crossed_writable_symlink(target: str, writable_roots: list[str]) -> str | None:
    """The first symlink that resolving ``target`` follows from inside a writable
    root, or None (``_walk``, so ``ws/link/..`` is caught too, and a chain past
    the kernel's bounds is refused).

    Why: a sandboxed command may plant ``ws/cache -> ../outside``; a later grant
    naming ``ws/cache`` would then be bound at ``outside``, widening the grant to
    a place no policy named. Symlinks outside every writable root (``/var/run``,
    a workspace given through a link) are the host's and are followed.
    (``resolve_policy`` asks only for a path that did not resolve to itself.)"""
    _, link = _walk(target, writable_roots)
    return link


def _temporary_dirs(context: FileSystemSandboxContext) -> list[str]:
    if context.temporary_directories is not None:
        return [uri_to_path(u) for u in context.temporary_directories]
    tmpdir = os.environ.get("TMPDIR")
    return [tmpdir] if tmpdir else []


def resolve_policy(
    context: FileSystemSandboxContext,
    *,
    fallback_cwd: str | None,
    glob_scan_limit: int = DEFAULT_GLOB_SCAN_LIMIT,
) -> ResolvedPolicy:
    """Resolve ``context``; ``fallback_cwd`` is used when the context names no cwd
    (process/start passes the process cwd, fs/* passes None -> -32602 when needed).
    ``glob_scan_limit``: directory entries one glob may read (else -32602)."""
    perms = context.permissions
    if isinstance(perms, DisabledPermissions):
        return ResolvedPolicy(kind="disabled", network_restricted=False)
    if isinstance(perms, ExternalPermissions):
        return ResolvedPolicy(
            kind="external",
            network_restricted=perms.network == "restricted",
            root_access="write",
        )
    network_restricted = perms.network == "restricted"
    fs = perms.file_system
    if not isinstance(fs, RestrictedFileSystem):
        return ResolvedPolicy(
            kind="managed", network_restricted=network_restricted, root_access="write"
        )

    cwd_uri = context.policy_cwd()
    cwd = uri_to_path(cwd_uri) if cwd_uri is not None else fallback_cwd
    if cwd is None and has_dynamic_entries(context):
        raise RpcError.invalid_params(DYNAMIC_CWD_MESSAGE)
    roots = [uri_to_path(u) for u in context.policy_workspace_roots()]
    depth = fs.glob_scan_max_depth or DEFAULT_GLOB_SCAN_DEPTH

    root_access: Literal["read", "write"] | None = None
    minimal = False
    wanted: dict[str, RuleAccess] = {}
    named: list[tuple[str, RuleAccess]] = []  # (path as the policy names it, access)

    for entry in fs.entries:
        access: RuleAccess = "read" if entry.access == "read" else "write"
        if entry.access in ("deny", "none"):
            access = "deny"
        path = entry.path
        targets: list[str] = []
        if isinstance(path, PathPath):
            targets = [uri_to_path(path.path)]
        elif isinstance(path, GlobPatternPath):
            pattern = path.pattern
            if not pattern.startswith("/"):
                assert cwd is not None  # has_dynamic_entries checked above
                pattern = os.path.join(cwd, pattern)
            targets = _expand_glob(pattern, depth, glob_scan_limit)
        else:
            special = path.value
            if isinstance(special, RootSpecial):
                if access == "write":
                    root_access = "write"
                elif access == "read" and root_access is None:
                    root_access = "read"
                continue
            if isinstance(special, MinimalSpecial):
                minimal = minimal or access != "deny"
                continue
            if isinstance(special, CwdSpecial):
                targets = list(roots)
            elif isinstance(special, ProjectRootsSpecial):
                sub = special.subpath
                targets = [os.path.normpath(os.path.join(r, sub)) if sub else r for r in roots]
            elif isinstance(special, TmpdirSpecial):
                targets = _temporary_dirs(context)
            elif isinstance(special, SlashTmpSpecial):
                targets = ["/tmp"]
            else:
                assert isinstance(special, UnknownSpecial)
                continue  # forward compatibility: ignored, as the reference does
        named += [(target, access) for target in targets]

    # Each named path resolved once per resolution (a write root is named again below).
    resolved: dict[str, str | None] = {}

    def canonical_of(target: str) -> str | None:
        if target not in resolved:
            resolved[target] = canonical_path(target)
        return resolved[target]

    writable_roots = [
        root for t, a in named if a == "write" and (root := canonical_of(t)) is not None
    ]
    for target, access in named:
        if not os.path.lexists(target):
            continue  # grants nothing; `missing_path_behavior: skip` is the same here
        canonical = canonical_of(target)
        # A path that resolves to itself, without `..`, crossed no symlink at all (a
        # resolved path has none among its components, and without `..` any symlink
        # on the way would show in the result): only the others are walked.
        if ".." in target.split("/") or canonical != os.path.normpath(target):
            link = crossed_writable_symlink(target, writable_roots)
            if link is not None:
                raise RpcError.internal(
                    f"cannot enforce sandbox path {target} because it crosses writable "
                    f"symlink {link}"
                )
        if canonical is None:
            continue
        previous = wanted.get(canonical)
        if previous is None or _PRECEDENCE[access] > _PRECEDENCE[previous]:
            wanted[canonical] = access

    rules = tuple(
        PathRule(path=p, access=a, is_dir=os.path.isdir(p)) for p, a in sorted(wanted.items())
    )
    return ResolvedPolicy(
        kind="managed",
        network_restricted=network_restricted,
        root_access=root_access,
        minimal_read=minimal,
        rules=rules,
        cwd=None if cwd is None else canonical_path(cwd) or os.path.normpath(cwd),
        legacy_landlock=context.use_legacy_landlock,
    )


def restricts_access(context: FileSystemSandboxContext, *, write: bool) -> bool:
    """Whether read (or write) access is restricted at all, from the context alone
    (no filesystem access, no cwd needed): the reference routes on exactly this."""
    perms = context.permissions
    if not isinstance(perms, ManagedPermissions):
        return False
    fs = perms.file_system
    if not isinstance(fs, RestrictedFileSystem):
        return False
    root: str | None = None
    narrowing = False  # any entry that takes access away under a `:root` grant
    for entry in fs.entries:
        p = entry.path
        if isinstance(p, SpecialFsPath) and isinstance(p.value, RootSpecial):
            if entry.access == "write" or (entry.access == "read" and root is None):
                root = entry.access
            continue
        if entry.access in ("deny", "none"):
            narrowing = True
        elif entry.access == "read" and write:
            narrowing = True
    if write:
        return root != "write" or narrowing
    return root is None or narrowing
