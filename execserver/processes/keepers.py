"""``--state-dir``: processes held by keepers, and what a later daemon needs to find them.

Layout (every directory 0700, every file 0600, owned by the daemon's uid)::

    STATE_DIR/<session id>/session.json        the session: id, principal
    STATE_DIR/<session id>/<name>/meta.json     the process (written by its keeper)
    STATE_DIR/<session id>/<name>/keeper.sock   the keeper's socket (re-adoption)
    STATE_DIR/<session id>/<name>/journal/      its output, <first seq>.seg segments
    STATE_DIR/<session id>/<name>/network.json  its managed network's listeners (the
                                                keeper holds them: netproxy/kept.py)
    STATE_DIR/private/                          the daemons' private directory
                                                (sandbox/hidden.py): proxy sockets
                                                (in $TMPDIR when that path is too
                                                long for a socket's)

``session.json`` is written once, at the session's first keeper, atomically
(tmp, rename), so a crash of the daemon at any instant leaves it absent or whole
(a machine crash ends the keepers it describes as well). The session's
processes are the directories beside it: each keeper writes its ``meta.json``
(process id, pid, tty...; tmp + rename) before it answers the spawn, and
removes its whole directory when it ends, so the list can never disagree with
the keepers. The seqs and cursors are the
keepers' own (each numbers its process's events and journals them before
sending), so nothing else needs saving.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from execserver.keeper.client import (
    ANSWER_TIMEOUT_S,
    KeeperGone,
    Zygote,
    connect_keeper,
    read_answer,
    send_line,
)
from execserver.keeper.program import META_NAME, NET_FDS_MARK
from execserver.netproxy.kept import NETWORK_FILE, KeptNetwork, SavedListeners, saved_listeners
from execserver.sandbox.hidden import claim_private
from execserver.sandbox.plan import LaunchPlan
from execserver.wire.errors import RpcError, os_error_text

__all__ = ["SESSION_FILE", "Adopted", "KeeperHost", "SavedSession", "private_dir_for"]

log = logging.getLogger(__name__)

SESSION_FILE = "session.json"
# The daemons' private directory (sandbox/hidden.py) under the state directory.
PRIVATE_DIR = "private"
# Why a keeper failed (its traceback): keepers outlive the daemon's stderr.
KEEPERS_LOG = "keepers.log"
# Journal bytes a keeper holds beyond the retained output before it stops
# reading its child (the daemon acknowledges what its log evicted).
JOURNAL_SLACK_BYTES = 8 << 20


@dataclass(frozen=True)
class SavedSession:
    id: str
    principal: str | None
    processes: dict[str, str]  # process id -> its directory's name


def _write_atomic(path: str, data: bytes) -> None:
    """tmp + rename: whole or absent whenever a daemon reads it. Not fsynced (an
    fsync cost the first spawn of every session ~12 ms on a loaded machine): what
    it describes are live keepers, which a machine crash ends too, and a crash of
    the daemon alone leaves the page cache, so the file, intact."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def _saved_processes(session_dir: str) -> dict[str, str]:
    """process id -> directory name, from each keeper's meta.json (the newest when a
    process id was reused while its predecessor's keeper was still going away)."""
    found: dict[str, tuple[float, str]] = {}
    for entry in os.scandir(session_dir):
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            with open(os.path.join(entry.path, META_NAME), "rb") as handle:
                meta = json.load(handle)
            process_id, started = str(meta["process_id"]), float(meta["started"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a keeper still starting, or one gone half-way through removal
        if process_id not in found or found[process_id][0] < started:
            found[process_id] = (started, entry.name)
    return {process_id: name for process_id, (_, name) in found.items()}


# The longest socket path made in the private directory: a proxy's socket
# directory (tempfile's 8 random characters) and its socket name.
_SOCKET_TAIL = len("/execserver-netproxy-12345678/socks.sock")
_SUN_PATH_MAX = 107  # sockaddr_un's 108 bytes, NUL included


def private_dir_for(state_dir: str) -> str:
    """STATE_DIR/private, or when that is too long a prefix for a socket path
    (the sandbox's bridge connects to it by path; systemd's /var/lib/... is not)
    a directory in the temporary directory named after the state directory, so
    every daemon of it finds the same one."""
    inside = os.path.join(state_dir, PRIVATE_DIR)
    if len(inside) + _SOCKET_TAIL <= _SUN_PATH_MAX:
        return inside
    digest = hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"execserver-private-{digest}")


@dataclass(frozen=True)
class Adopted:
    """A re-adopted keeper: its link, its meta.json, its directory, and the
    listening sockets of its process's managed network (netproxy/kept.py)."""

    link: socket.socket
    meta: dict[str, Any]
    directory: str
    network: list[SavedListeners]


def _read_network(directory: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(directory, NETWORK_FILE), "rb") as handle:
            body: dict[str, Any] = json.load(handle)
    except FileNotFoundError:
        return None
    return body


def _receive_listeners(link: socket.socket) -> list[socket.socket]:
    """The listeners a keeper sends first on a re-adopting daemon's link."""
    link.settimeout(ANSWER_TIMEOUT_S)
    try:
        mark, fds, _, _ = socket.recv_fds(link, 1, 64)
    finally:
        link.setblocking(False)
    sockets = [socket.socket(fileno=fd) for fd in fds]
    if mark != NET_FDS_MARK:
        for sock in sockets:
            sock.close()
        raise ValueError("no listeners came")
    return sockets


class KeeperHost:
    """The daemon's keepers: the zygote, the session files, re-adoption."""

    def __init__(
        self,
        state_dir: str,
        *,
        ttl_s: float,
        drain_timeout_s: float,
        retained_bytes: int,
        child_nice: int = 0,
    ) -> None:
        self.state_dir = os.path.abspath(state_dir)
        claim_private(self.state_dir)
        self.private_dir = private_dir_for(self.state_dir)
        self._ttl_s = ttl_s
        self._drain_timeout_s = drain_timeout_s
        self._budget = retained_bytes + JOURNAL_SLACK_BYTES
        self._zygote = Zygote(os.path.join(self.state_dir, KEEPERS_LOG), child_nice)
        self.leaving = False
        self._names = itertools.count(1)
        self._prefix = f"{time.time_ns():x}"
        self._sessions: dict[str, SavedSession] = {}
        self._keepers: dict[str, int] = {}  # process directory -> keeper pid

    # ---- which plans ---------------------------------------------------------------

    @staticmethod
    def accepts(plan: LaunchPlan) -> bool:
        """Every plan that is run at all: unsandboxed, or sandboxed by bwrap or the
        launcher (its host resources, bwrap's status pipe and the mount points'
        references, go to the keeper with it: ``PlanResources.hand_over``), its
        managed network's listeners too (``spawn(network=)``). One whose proxy
        holds secrets only this daemon has is kept too, but not beyond the daemon
        (``spawn(outlive=False)``): never orphaned."""
        return plan.mechanism != "refused"

    # ---- spawning --------------------------------------------------------------------

    def spawn(
        self,
        session_id: str,
        principal: str | None,
        process_id: str,
        plan: LaunchPlan,
        *,
        program: str,
        cgroups: list[str],
        enter: Sequence[str] = (),
        outlive: bool = True,
        network: KeptNetwork | None = None,
    ) -> tuple[socket.socket, dict[str, Any], str]:
        """A keeper running ``plan``: (its link, its answer, its directory). Raises
        RpcError as ``spawn`` does (the reference's texts) when the child could not
        start. ``plan`` is closed either way. ``outlive`` False: the keeper ends the
        process as soon as no daemon holds its link (a TTL of 0). ``network``: the
        listening sockets of its managed network, which the keeper holds from now
        on (``network.json`` beside them says what they are; netproxy/kept.py).
        ``cgroups``: the process's own cgroup, which the keeper enters, kills and
        removes; ``enter``: a shared one it only enters (a principal's group's
        leaf, which outlives the process)."""
        try:
            session_dir = os.path.join(self.state_dir, session_id)
            claim_private(session_dir)
            name = f"{self._prefix}-{next(self._names)}"
            directory = os.path.join(session_dir, name)
            os.mkdir(directory, 0o700)
            creds = plan.credentials
            request = {
                "dir": directory,
                "ttl": self._ttl_s if outlive else 0.0,
                "drain": self._drain_timeout_s,
                "budget": self._budget,
                "cgroups": cgroups,
                "enter": list(enter),
                "process_id": process_id,
                "program": program,
                "plan": {
                    "argv": plan.argv,
                    "executable": plan.executable,
                    "env": plan.env,
                    "cwd": plan.cwd,
                    "tty": plan.tty,
                    "pipe_stdin": plan.pipe_stdin,
                    "pass_fds": list(plan.pass_fds),
                    "credentials": dataclasses.asdict(creds) if creds is not None else None,
                },
            }
            # A sandbox's host resources outlive this daemon with the keeper: the
            # status pipe after the plan's own fds, then the mount points' references.
            try:
                held, mounts = plan.resources.hand_over()
            except OSError as exc:
                shutil.rmtree(directory, ignore_errors=True)
                raise RpcError.internal(
                    f"cannot hand the sandbox's mount points to its keeper: {exc.strerror}"
                ) from None
            request["status_fd"] = len(held) > len(mounts)
            request["mounts"] = mounts
            if network is not None:
                # After the sandbox's: the network's listeners, which a re-adopting
                # daemon gets back from the keeper.
                _write_atomic(
                    os.path.join(directory, NETWORK_FILE),
                    json.dumps(network.description).encode(),
                )
                request["net_fds"] = len(network.fds)
                request["net_dirs"] = network.dirs
                held += network.fds
                network.fds = []
            try:
                link = self._zygote.spawn(request, [*plan.pass_fds, *held])
                answer = read_answer(link)
            except KeeperGone as exc:
                shutil.rmtree(directory, ignore_errors=True)
                raise RpcError.internal(f"process keeper unavailable: {exc}") from None
            finally:
                for fd in held:
                    os.close(fd)  # the keeper has its own copies (or none is needed)
                self._zygote.warm_up()  # off this spawn's path, ready for the next
        finally:
            plan.close()
        if not answer.get("ok"):
            link.close()
            shutil.rmtree(directory, ignore_errors=True)
            if answer.get("error"):
                raise RpcError.internal(f"process keeper failed: {answer['error']}")
            if answer.get("placement"):
                raise RpcError.internal("cannot place the process in its resource-limit cgroup")
            raise RpcError.internal(os_error_text(int(answer.get("errno") or 5)))
        self._keepers[directory] = int(answer["keeper"])
        if network is not None:
            network.kept()
        if session_id not in self._sessions:
            # Once per session (the id and principal never change): the processes are
            # the directories beside it, each described by its keeper's meta.json.
            self._save(SavedSession(session_id, principal, {}))
        return link, answer, directory

    def released(self, directory: str) -> None:
        """The process was forgotten (its keeper exits and removes its directory)."""
        self._keepers.pop(directory, None)

    def session_closed(self, session_id: str) -> None:
        """Its processes were killed (each keeper removed its own directory)."""
        if self.leaving:
            return
        self._sessions.pop(session_id, None)
        shutil.rmtree(os.path.join(self.state_dir, session_id), ignore_errors=True)

    def keep_session(self, session_id: str, principal: str | None) -> None:
        """A session a successor must know even with no keeper of its own (a
        handover: it may have done nothing but fs calls so far, and its client
        resumes it on the next daemon)."""
        if session_id not in self._sessions:
            claim_private(os.path.join(self.state_dir, session_id))
            self._save(SavedSession(session_id, principal, {}))

    def _save(self, saved: SavedSession) -> None:
        self._sessions[saved.id] = saved
        body = {"id": saved.id, "principal": saved.principal}
        path = os.path.join(self.state_dir, saved.id, SESSION_FILE)
        _write_atomic(path, json.dumps(body).encode())

    # ---- re-adoption -----------------------------------------------------------------

    def saved_sessions(self) -> list[SavedSession]:
        """The sessions a previous daemon left (unreadable leftovers are removed)."""
        found: list[SavedSession] = []
        for entry in sorted(os.listdir(self.state_dir)):
            path = os.path.join(self.state_dir, entry)
            if not os.path.isdir(path) or os.path.islink(path) or entry == PRIVATE_DIR:
                continue  # a session is a directory (beside them: the control socket)
            try:
                uuid.UUID(entry)
                with open(os.path.join(path, SESSION_FILE), "rb") as handle:
                    body = json.load(handle)
                principal = body.get("principal")
                saved = SavedSession(
                    str(body["id"]),
                    str(principal) if principal is not None else None,
                    _saved_processes(path),
                )
            except (ValueError, KeyError, OSError, TypeError, AttributeError):
                log.warning("state dir: removing unreadable entry %s", entry)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                continue
            if saved.id != entry:
                continue
            self._sessions[saved.id] = saved
            found.append(saved)
        return found

    def adopt(self, session_id: str, name: str) -> Adopted:
        """Reconnect to a keeper, which replays from its oldest journaled event and
        hands back its process's network listeners, if any. Raises KeeperGone if
        it is not there."""
        directory = os.path.join(self.state_dir, session_id, name)
        if os.sep in name or name.startswith("."):
            raise KeeperGone(f"bad process directory {name!r}")
        try:
            with open(os.path.join(directory, META_NAME), "rb") as handle:
                meta: dict[str, Any] = json.load(handle)
            description = _read_network(directory)
        except (OSError, ValueError) as exc:
            raise KeeperGone(str(exc)) from None
        link = connect_keeper(directory)
        network: list[SavedListeners] = []
        if description is not None:
            try:
                network = saved_listeners(description, _receive_listeners(link))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                link.close()
                raise KeeperGone(f"its network's listeners: {exc}") from None
        send_line(link, {"op": "hello", "from": 0})
        self._keepers[directory] = int(meta["keeper"])
        return Adopted(link, meta, directory, network)

    def sweep_private(self, claimed: set[str]) -> None:
        """After re-adoption: what the private directory holds that no re-adopted
        process's network uses (a dead keeper's, a killed daemon's unkept
        proxy's) goes."""
        try:
            entries = os.listdir(self.private_dir)
        except FileNotFoundError:
            return
        kept = {os.path.realpath(path) for path in claimed}
        for entry in entries:
            path = os.path.join(self.private_dir, entry)
            if os.path.realpath(path) not in kept:
                shutil.rmtree(path, ignore_errors=True)

    def forget_gone(self, session_id: str, name: str) -> None:
        """A saved process whose keeper is gone (a machine restart): its files go."""
        shutil.rmtree(os.path.join(self.state_dir, session_id, name), ignore_errors=True)

    # ---- lifetime --------------------------------------------------------------------

    def keeper_pids(self) -> set[int]:
        """The zygote and every keeper: not the daemon's to kill at its shutdown."""
        return {self._zygote.pid, *self._keepers.values()}

    @property
    def zygote_pid(self) -> int:
        """The one of them that is the daemon's own child (it forks the keepers)."""
        return self._zygote.pid

    def leave(self) -> None:
        """Daemon shutdown: keepers and files stay for the next daemon; the zygote goes."""
        if self.leaving:
            return
        self.leaving = True
        self._zygote.close()
