"""The bwrap command line for a resolved policy (the reference's layout).

Order matters to bwrap: later mounts cover earlier ones. So: the read view
(``/`` read-only, or an empty tmpfs with only the readable paths), a fresh
``/dev``, then every rule from the shallowest path to the deepest (a writable
root, a read-only carve-out inside it, a writable path inside that, ...), the
protected names right after their writable root, the directories pinned on
the way to each carve-out (``_pins``), deny masks, the daemon's private
directory masked, namespaces, ``/proc``, ``--cap-drop ALL`` and the working
directory.

``--cap-drop ALL`` matters even as root: inside a user namespace without
capabilities a mode-000 mount really is unreadable.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from execserver.sandbox.hidden import private_dir
from execserver.sandbox.mounts import SyntheticMounts
from execserver.sandbox.policy import (
    MINIMAL_READ_PATHS,
    PROTECTED_NAMES,
    PathRule,
    ResolvedPolicy,
    canonical_path,
)
from execserver.wire.errors import RpcError

__all__ = ["Account", "BwrapLayout", "build_layout", "release_layout"]


@dataclass
class BwrapLayout:
    args: list[str] = field(default_factory=list)  # everything between `bwrap` and `--`
    data_fds: list[int] = field(default_factory=list)  # empty pipes for denied files
    synthetic: list[str] = field(default_factory=list)  # references held in `mounts`


def _empty_fd() -> int:
    read_end, write_end = os.pipe()
    os.close(write_end)
    return read_end


def _depth(path: str) -> int:
    return 0 if path == "/" else path.rstrip("/").count("/")


def _view_args(policy: ResolvedPolicy, extra_read: tuple[str, ...]) -> list[str]:
    if policy.root_access == "write":
        return ["--bind", "/", "/"]
    if policy.root_access == "read":
        return ["--ro-bind", "/", "/"]
    # No `:root`: an empty root with only what is readable; everything else does not
    # exist (ENOENT), as under the reference.
    args = ["--tmpfs", "/"]
    base = list(MINIMAL_READ_PATHS) if policy.minimal_read else []
    for path in [*base, *extra_read]:
        if os.path.islink(path) and path in MINIMAL_READ_PATHS:
            # merged-/usr systems: /bin -> usr/bin stays a symlink inside as well
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            real = os.path.realpath(path)
            args += ["--ro-bind", real, real]
    return args


def _protect(root: str, mounts: SyntheticMounts, layout: BwrapLayout) -> None:
    for name in PROTECTED_NAMES:
        path = os.path.join(root, name)
        if os.path.islink(path):
            # A symlink here could point anywhere writable; binding read-only over
            # its target would protect the wrong thing. Refuse, like codex does.
            raise RpcError.internal(
                f"cannot enforce sandbox read-only path {path} because it is a symlink "
                f"inside writable root {root}"
            )
        try:
            cover = mounts.claim(path)
        except OSError as exc:
            raise RpcError.internal(
                f"cannot make the mount point for sandbox read-only path {path}: "
                f"{exc.strerror or exc}"
            ) from None
        if cover is not None:
            layout.synthetic.append(path)  # a reference, released with the layout
        if not cover:
            layout.args += ["--ro-bind", path, path]
            continue
        layout.args += ["--perms", "555", "--tmpfs", path, "--remount-ro", path]


@dataclass(frozen=True)
class _Pin:
    """A directory bound onto itself (same access as around it) only to make it
    a mount point: a mount point cannot be renamed or removed (EBUSY)."""

    path: str
    writable: bool


def _nearest_rule(rules: list[PathRule], path: str) -> PathRule | None:
    best: PathRule | None = None
    for rule in rules:
        if path.startswith(rule.path.rstrip("/") + "/") and (
            best is None or _depth(rule.path) > _depth(best.path)
        ):
            best = rule
    return best


def _pins(policy: ResolvedPolicy) -> list[_Pin]:
    """Pin the directories between a writable root and each deny-read or
    read-only entry inside it.

    A mask is a mount on a dentry: renaming a parent directory (``mv config
    config_moved``) would carry the file *and its mask* to a new name, and the
    next sandbox, masking the old name, would find nothing there and show the
    file under the new one. With every directory on that chain a mount point,
    the rename fails (EBUSY), so the protection stays on the file."""
    rules = list(policy.rules)
    writable = [r.path for r in rules if r.access == "write"]
    pins: dict[str, _Pin] = {}
    named = {r.path for r in rules}
    for rule in rules:
        if rule.access == "write":
            continue
        roots = [w for w in writable if rule.path.startswith(w.rstrip("/") + "/")]
        if not roots:
            continue
        outermost = min(roots, key=_depth)
        directory = os.path.dirname(rule.path)
        while directory != outermost and directory.startswith(outermost.rstrip("/") + "/"):
            if directory not in named and directory not in pins:
                around = _nearest_rule(rules, directory)
                if around is not None and around.access != "deny":
                    pins[directory] = _Pin(directory, around.access == "write")
            directory = os.path.dirname(directory)
    return list(pins.values())


def _visible(policy: ResolvedPolicy, path: str, extra_read: tuple[str, ...]) -> bool:
    """Whether ``path`` exists in the sandbox's view before any mask."""
    if policy.root_access is not None:
        return True
    shown = [*(MINIMAL_READ_PATHS if policy.minimal_read else ()), *extra_read]
    shown += [r.path for r in policy.rules if r.access != "deny"]
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in shown)


# Who a plan runs as, when not the daemon: uid, gid, supplementary groups.
Account = tuple[int, int, tuple[int, ...]]


def _searchable(path: str, account: Account) -> bool:
    """Whether ``account`` may search ``path`` by its mode bits (the owner's, the
    group's or the others' bits, as the kernel picks them)."""
    uid, gid, groups = account
    info = os.stat(path)
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == gid or info.st_gid in groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def _mask_point(hidden: str, account: Account | None) -> str:
    """Where the private directory is masked: on itself, or, for a plan that runs as
    another account (a tenant's), on the shallowest directory above it that the
    account cannot search. bwrap runs as that account and could not reach the
    private directory to mount over it (``STATE_DIR/private`` under the 0700
    ``STATE_DIR``); a mask higher up hides at least as much, and the account could
    not see below it anyway. (A directory an ACL opens is masked all the same; one
    whose parent it cannot search after all makes bwrap fail: nothing runs.)"""
    if account is None or account[0] == 0:
        return hidden
    path = "/"
    for part in hidden.strip("/").split("/")[:-1]:
        path = os.path.join(path, part)
        if not _searchable(path, account):
            return path
    return hidden


def _hide_private(
    policy: ResolvedPolicy,
    extra_read: tuple[str, ...],
    args: list[str],
    account: Account | None,
) -> list[str]:
    """Mask the daemon's private directory (every proxy's socket directory); returns
    the remounts to add at the end. A proxy-routed sandbox reaches its own socket
    directory through a descriptor its bridge holds, never by path
    (``proxy_routed``)."""
    hidden = private_dir()
    if not _visible(policy, hidden, extra_read):
        return []
    point = _mask_point(hidden, account)
    args += ["--perms", "000", "--tmpfs", point]
    return ["--remount-ro", point]


def build_layout(
    policy: ResolvedPolicy,
    *,
    cwd: str,
    mounts: SyntheticMounts,
    extra_read: tuple[str, ...] = (),
    runtime_binds: tuple[tuple[str, str], ...] = (),
    account: Account | None = None,
    reaper: bool = True,
) -> BwrapLayout:
    """Arguments for bwrap (without the binary, seccomp/status fds and command).
    ``reaper``: bwrap's own pid 1 in the sandbox, which reaps what the command
    leaves running; without it the command is pid 1 (``--as-pid-1``), for the
    daemon's own helpers, which start nothing.
    ``runtime_binds``: (host path, sandbox path)
    read-only binds placed after every policy rule and mask, so none can cover
    them (the persistent fs helper's runtime, ``fs_helper.runtime``). ``account``:
    the uid, gid and groups bwrap runs as when not the daemon's (a tenant's). On error
    every acquired synthetic mount point is released again."""
    layout = BwrapLayout()
    try:
        _fill(
            layout,
            policy,
            cwd=cwd,
            mounts=mounts,
            extra_read=extra_read,
            runtime_binds=runtime_binds,
            account=account,
            reaper=reaper,
        )
    except BaseException:
        release_layout(layout, mounts)
        raise
    return layout


def release_layout(layout: BwrapLayout, mounts: SyntheticMounts) -> None:
    for fd in layout.data_fds:
        os.close(fd)
    layout.data_fds.clear()
    for path in layout.synthetic:
        mounts.release(path)
    layout.synthetic.clear()


def _fill(
    layout: BwrapLayout,
    policy: ResolvedPolicy,
    *,
    cwd: str,
    mounts: SyntheticMounts,
    extra_read: tuple[str, ...],
    runtime_binds: tuple[tuple[str, str], ...] = (),
    account: Account | None = None,
    reaper: bool = True,
) -> None:
    args = layout.args
    args += ["--new-session", "--die-with-parent"]
    args += _view_args(policy, extra_read)
    args += ["--dev", "/dev"]
    # Masks are made read-only only after every bind: a more specific grant inside a
    # denied directory still needs its mount point created in the mask's tmpfs.
    remounts: list[str] = []
    items: list[PathRule | _Pin] = [*policy.rules, *_pins(policy)]
    for rule in sorted(items, key=lambda r: (_depth(r.path), r.path)):
        if isinstance(rule, _Pin):
            if os.path.isdir(rule.path) and not os.path.islink(rule.path):
                args += ["--bind" if rule.writable else "--ro-bind", rule.path, rule.path]
            continue
        if not mounts.is_real(rule.path):
            continue  # gone, or another sandbox's synthetic mount point (see is_real)
        if rule.access == "write":
            args += ["--bind", rule.path, rule.path]
            if rule.is_dir:
                _protect(rule.path, mounts, layout)
        elif rule.access == "read":
            args += ["--ro-bind", rule.path, rule.path]
        elif rule.is_dir:
            args += ["--perms", "000", "--tmpfs", rule.path]
            remounts += ["--remount-ro", rule.path]
        else:
            # An empty, mode-000 file over it: reading fails with EACCES, as under
            # the reference (binding /dev/null would give an empty *successful* read).
            fd = _empty_fd()
            layout.data_fds.append(fd)
            args += ["--perms", "000", "--ro-bind-data", str(fd), rule.path]
    remounts += _hide_private(policy, extra_read, args, account)
    args += remounts
    for source, target in runtime_binds:
        args += ["--ro-bind", source, target]
    args += ["--unshare-user", "--unshare-pid", "--unshare-ipc"]
    if not reaper:
        # One process less per helper (bwrap's pid 1: 1.9 MB of RSS, a fork per start).
        # The command as pid 1 gets no signal from inside the sandbox without a
        # handler; SIGKILL from outside, and its parent's death signal, still end it.
        args += ["--as-pid-1"]
    if policy.network_restricted:
        args += ["--unshare-net"]
    # A private /proc always: a backend whose bwrap cannot mount one is not used.
    # /proc/keys lists every key the uid may view, descriptions included.
    args += ["--proc", "/proc", "--ro-bind", "/dev/null", "/proc/keys"]
    # Resolved as the kernel does (a planted chain of links is refused, not walked);
    # a cwd that does not exist is passed as given and the spawn reports it.
    args += ["--cap-drop", "ALL", "--chdir", canonical_path(cwd) or cwd]
