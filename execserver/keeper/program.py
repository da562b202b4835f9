"""The process keeper: one per process, the child's parent instead of the daemon.

Run as ``python -I -S program.py zygote FD`` (stdlib only, no site, no
execserver import: the same reasons as sandbox/launcher.py, and start-up cost).
That process is the *zygote*: the daemon starts it once, and for each message
on the SOCK_SEQPACKET socket FD (carrying, by SCM_RIGHTS, one end of a fresh
link socketpair) it forks a *warm keeper*, which gets ready and waits on that
link for a spawn request (``REQUEST_HEAD`` + JSON, the plan's ``pass_fds`` by
SCM_RIGHTS). The daemon keeps one warm keeper ahead, so the fork and the
set-up are not on a spawn's path (and a warm keeper whose link closes exits).
A keeper:

* sets ``PR_SET_CHILD_SUBREAPER`` (setsid and double-fork escapees of the child
  are re-parented to it, not to init) and ``PR_SET_DUMPABLE`` 0 (nothing of
  the daemon's uid may ptrace it or read its /proc fds), starts its own session;
* execs the plan with Popen exactly as ``processes.launch.spawn`` does (pipes,
  or a 24x80 pty as the child's controlling terminal; the plan's credentials;
  into its cgroup before exec when the request names one; only 0-2 and
  ``pass_fds`` are inherited), reaps it and records its exit;
* appends every chunk of its output to a journal of fixed-size segment files
  under its process directory *before* it forwards the same bytes to the daemon,
  so a daemon killed at any instant loses nothing; the daemon acknowledges what
  it no longer needs, acknowledged segments are deleted (two are kept to be
  written again), and when ``budget`` bytes are unacknowledged, or
  ``UNSENT_LIMIT`` wait to be sent to a connected daemon, the keeper stops
  reading the child (back-pressure: the child blocks on a full pipe);
* serves one daemon at a time on its link: first the socketpair, later a
  re-adopting daemon on ``keeper.sock`` in the process directory (0700; the
  peer must have the keeper's uid and must not be held by a keeper, this one
  or another: nothing a daemon started may command a keeper);
* when no daemon is connected for ``ttl`` seconds, kills the child's whole tree
  (``cgroup.kill`` when it has a cgroup, its process group and every
  descendant) and exits, removing its files: never an orphan.

Why a copy of launch.py's few lines (pipes, pty size, controlling tty) rather
than an import: processes.launch imports the sandbox planner and wire/ (msgspec),
which a ``-I -S`` program cannot and must not load.

Keeper -> daemon: frames ``<QBI`` (seq, kind, length) + payload, the journal's
own bytes (sent with sendfile from the segment files). Kinds: output
(stdout/stderr/pty), exit (JSON), closed, and info (seq 0, JSON: the spawn's
answer). Daemon -> keeper: JSON lines, see ``Keeper._command``.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import fcntl
import gc
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import termios
import time

# typing costs milliseconds to import at every start: for the checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

__all__ = [
    "CHUNKS_PER_READ",
    "CHUNK_BYTES",
    "FRAME",
    "KIND_CLOSED",
    "KIND_EXIT",
    "KIND_INFO",
    "KIND_PTY",
    "KIND_STDERR",
    "KIND_STDOUT",
    "META_NAME",
    "NET_FDS_MARK",
    "REPLAYED_THROUGH",
    "REQUEST_HEAD",
    "SEGMENT_BYTES",
    "SOCKET_NAME",
    "STREAM_KINDS",
    "Journal",
    "held_by_a_keeper",
    "main",
    "pieces",
    "replay_mark",
    "short_path",
]

FRAME = struct.Struct("<QBI")
# Daemon -> warm keeper: the spawn request's length, then its JSON.
REQUEST_HEAD = struct.Struct("<I")
KIND_STDOUT, KIND_STDERR, KIND_PTY, KIND_EXIT, KIND_CLOSED, KIND_INFO = 0, 1, 2, 3, 4, 5
STREAM_KINDS = {"stdout": KIND_STDOUT, "stderr": KIND_STDERR, "pty": KIND_PTY}
# The key of the info frame that answers a re-adopting daemon's hello.
REPLAYED_THROUGH = "replayed_through"
SOCKET_NAME = "keeper.sock"
# The byte a re-adopting daemon first receives when the keeper holds its
# process's network listeners (they come with it, SCM_RIGHTS).
NET_FDS_MARK = b"N"
META_NAME = "meta.json"
# execserver.sandbox.mounts.MARK (not imported: stdlib only): set on every mount
# point a daemon made for a protected name; a test keeps the two equal.
MOUNT_MARK = "user.execserver.mount-point"
JOURNAL_DIR = "journal"
SEGMENT_BYTES = 1 << 20
# Acknowledged segments a journal keeps to write into again (see Journal.spares).
SPARE_SEGMENTS = 2
# Journal bytes not yet sent to a connected daemon at which the keeper stops
# reading the child (see Keeper._held_back).
UNSENT_LIMIT = 1 << 20
# The reference's chunk sizes (processes/output.py): pipes <= 8192, a pty <= 4095.
PIPE_CHUNK = 8192
PTY_CHUNK = 4095
CHUNKS_PER_READ = 32
# The bytes of output each seq stands for, per kind (see ``pieces``).
CHUNK_BYTES = {KIND_STDOUT: PIPE_CHUNK, KIND_STDERR: PIPE_CHUNK, KIND_PTY: PTY_CHUNK}
# A child's output pipe holds this much (Linux's default is 64 KiB): the keeper
# then reads it in fewer, larger reads.
PIPE_BUFFER_BYTES = 256 << 10
F_SETPIPE_SZ = 1031
SPLICE_F_NONBLOCK = 2
READS_PER_WAKEUP = 4
# A read at least this large means the child writes faster than the keeper reads:
# the keeper then waits STREAMING_PAUSE_S before reading again (see _on_output).
STREAMING_READ_BYTES = 32 << 10
STREAMING_PAUSE_S = 0.0003
DRAIN_READS = 16
# The reference's pseudo-terminal is 24 rows x 80 columns (processes/launch.py).
PTY_ROWS = 24
PTY_COLS = 80
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
# A keeper's received fds are first moved up here, out of the way of the plan's
# own fd numbers (which its argv may name).
HIGH_FD = 900


_LIBC: list[ctypes.CDLL] = []  # loaded once, in the zygote


def _prctl(option: int, value: int) -> None:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    libc = _LIBC[0]
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def _write_atomic(path: str, data: bytes) -> None:
    """tmp + rename: whole or absent whenever the daemon reads it. Not fsynced: it
    describes a live keeper, which a machine crash ends too (a torn file after a
    power loss names a keeper that is gone and is removed as such)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def _remove_tree(path: str) -> None:
    if not os.path.isdir(path):
        return
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            try:
                os.rmdir(os.path.join(root, name))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def _open_placement(directory: str) -> int:
    """The file the forked child writes ``0`` into to enter ``directory``: ``tasks``
    on cgroup v1, which moves a single-threaded writer without the RCU grace
    period ``cgroup.procs`` waits for (execserver/containment/process_cgroup.py
    says more); ``cgroup.procs`` on v2, which has no ``tasks``."""
    try:
        return os.open(os.path.join(directory, "tasks"), os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)


def _childless() -> bool:
    """Whether this process has no child at all, not even a zombie; then, as a
    subreaper, it has no descendant either (each has a living parent below it or
    was re-parented to it). One wait call instead of reading every process's
    /proc stat: with hundreds of keepers ending at once that scan, once per
    keeper, took both CPUs for seconds."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


def _descendants(root: int) -> list[int]:
    """Every live process below ``root`` (from /proc; zombies excluded)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def _is_keeper(cmdline: bytes) -> bool:
    """Whether a process's command line is a keeper's (or its zygote's): this
    program, of whichever installed version, run as ``zygote``."""
    args = cmdline.split(b"\0")
    return any(
        arg.endswith(b"/keeper/program.py") and args[i + 1 : i + 2] == [b"zygote"]
        for i, arg in enumerate(args)
    )


def held_by_a_keeper(pid: int) -> bool:
    """Whether ``pid`` is a keeper or below one (this keeper or any other: every
    process a daemon with --state-dir starts, sandboxed or not, and every escapee
    re-parented to its keeper, a subreaper); fails closed. A daemon never is, so
    nothing a daemon started can pass for one and command another process's keeper
    (a sandboxed command of a non-root daemon has its uid and may see keeper.sock).
    A peer gone when the keeper looks (it connected, queued its commands and exited
    before the accept) has an unknowable ancestry: it counts as held, else the
    child's tree could command its keeper that way
    (tests/security/test_keeper_boundary.py). An ancestor that exits mid-walk
    re-parents the rest: the walk starts over. A keeper's command line cannot be
    forged by what it holds: it is non-dumpable, and a process's own rewrite of
    its command line does not change its ancestors'."""
    for _attempt in range(16):
        current = pid
        for _ in range(4096):
            if current <= 1:
                return False
            try:
                with open(f"/proc/{current}/cmdline", "rb") as handle:
                    cmdline = handle.read()
                with open(f"/proc/{current}/stat", "rb") as handle:
                    stat = handle.read()
            except OSError:
                break
            if _is_keeper(cmdline):
                return True
            current = int(stat[stat.rfind(b")") + 2 :].split()[1])
        else:
            return False
        if current == pid:
            return True  # the peer itself is gone
    return True


class short_path:
    """``directory/name`` as a path short enough for a unix socket address (108
    bytes): through an fd of the directory, ``/proc/self/fd/N/name``."""

    def __init__(self, directory: str, name: str) -> None:
        self._fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._path = f"/proc/self/fd/{self._fd}/{name}"

    def __enter__(self) -> str:
        return self._path

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)


def pieces(kind: int, length: int) -> int:
    """How many seqs a frame of ``length`` bytes of ``kind`` covers: an output frame
    holds one read of the child's and stands for the reference's chunks of it
    (``CHUNK_BYTES``, the last one shorter), numbered from the frame's seq on; any
    other frame, one. (A keeper before this rule wrote a frame per chunk: the same
    numbers.)"""
    chunk = CHUNK_BYTES.get(kind)
    return max(1, -(-length // chunk)) if chunk else 1


def replay_mark(last_seq: int) -> bytes:
    """The frame sent before a replay: its seqs end at ``last_seq`` (0: nothing)."""
    payload = json.dumps({REPLAYED_THROUGH: last_seq}).encode()
    return FRAME.pack(0, KIND_INFO, len(payload)) + payload


class Journal:
    """Fixed-size segment files ``<first seq>.seg`` holding the frames in order."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        os.mkdir(directory, 0o700)
        # [first_seq, last_seq, fd, size] per segment, oldest first. ``size`` is what
        # is whole: a frame counts once its head is written.
        self.segments: list[list[int]] = []
        self.acked = 0
        self.splice = hasattr(os, "splice")
        # Acknowledged segment files kept for reuse, (path, fd): a write into a new
        # file's pages cost the kernel more than twice a write into pages it has
        # (0.85 against 0.35 s of CPU per GB, splice from a pipe, this 2-CPU VM).
        # What lies past a segment's size is stale and never read.
        self.spares: list[tuple[str, int]] = []
        self._spare_names = 0

    def _tail(self, first_seq: int) -> list[int]:
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg[3] >= SEGMENT_BYTES:
            path = os.path.join(self.dir, f"{first_seq:020d}.seg")
            fd = -1
            if self.spares:
                spare, fd = self.spares.pop()
                try:
                    os.rename(spare, path)
                except OSError:  # not ours to reuse after all: a new file, as without one
                    os.close(fd)
                    fd = -1
            if fd < 0:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            seg = [first_seq, first_seq - 1, fd, 0]
            self.segments.append(seg)
        return seg

    def append(self, frames: Sequence[bytes | memoryview], first_seq: int, last_seq: int) -> None:
        seg = self._tail(first_seq)
        total = sum(len(f) for f in frames)
        written = os.pwritev(seg[2], frames, seg[3])
        while written < total:  # a regular file takes it all; a full disk raises
            rest = b"".join(frames)[written:]  # never taken for a regular file
            written += os.pwrite(seg[2], rest, seg[3] + written)
        seg[1] = last_seq
        seg[3] += total

    def splice_from(self, fd: int, want: int, kind: int, first_seq: int) -> int:
        """Up to ``want`` bytes the pipe ``fd`` holds, as one frame, moved into the
        journal by the kernel (splice: one copy, none through this process); its
        head is written after them, so the frame counts only once it is whole. The
        byte count (0 at the pipe's end); BlockingIOError when the pipe is empty;
        OSError(EINVAL) where the file system does not take a splice."""
        seg = self._tail(first_seq)
        count = os.splice(fd, seg[2], want, offset_dst=seg[3] + FRAME.size, flags=SPLICE_F_NONBLOCK)
        if count:
            os.pwrite(seg[2], FRAME.pack(first_seq, kind, count), seg[3])
            seg[1] = first_seq + pieces(kind, count) - 1
            seg[3] += FRAME.size + count
        return count

    def ack(self, seq: int) -> None:
        self.acked = max(self.acked, seq)
        while len(self.segments) > 1 and self.segments[0][1] <= self.acked:
            first, _, fd, _ = self.segments.pop(0)
            path = os.path.join(self.dir, f"{first:020d}.seg")
            if len(self.spares) < SPARE_SEGMENTS:
                self._spare_names += 1
                spare = os.path.join(self.dir, f"spare-{self._spare_names}")
                try:
                    os.rename(path, spare)
                    self.spares.append((spare, fd))
                    continue
                except OSError:
                    pass
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass

    def unacked_bytes(self) -> int:
        return sum(seg[3] for seg in self.segments)

    def position_of(self, seq: int) -> tuple[int, int]:
        """(segment index, byte offset) of the first frame that covers a seq >= ``seq``."""
        for index, seg in enumerate(self.segments):
            if seg[1] < seq:
                continue
            offset = 0
            while offset < seg[3]:
                head = os.pread(seg[2], FRAME.size, offset)
                frame_seq, kind, length = FRAME.unpack(head)
                if frame_seq + pieces(kind, length) - 1 >= seq:
                    return index, offset
                offset += FRAME.size + length
            return index, offset
        if not self.segments:
            return 0, 0
        return len(self.segments) - 1, self.segments[-1][3]


class Link:
    """The daemon's connection: JSON lines in, journal bytes out."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.inbox = b""
        # Where the next byte to send is: an index into Journal.segments (kept
        # right as segments are dropped) and an offset in it.
        self.segment = 0
        self.offset = 0
        self.extra = b""  # bytes sent before the journal's (the spawn answer)


class Ready:
    """What a keeper needs whatever its request: made by a warm keeper before the
    request comes (each step's first run in a freshly forked process is several
    times slower than the next, so none of it stays on the spawn's path)."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.read_buffer = bytearray(PIPE_CHUNK * CHUNKS_PER_READ)
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.wake_r = wake_r
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        # The daemon's process-group signals and a hang-up are not for the keeper.
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)


class Keeper:
    def __init__(
        self,
        request: dict[str, Any],
        link: socket.socket,
        pass_fds: list[int],
        held: Sequence[int] = (),
        ready: Ready | None = None,
    ) -> None:
        ready = ready if ready is not None else Ready()
        self.request = request
        # A sandbox's host resources (execserver/sandbox/plan.py PlanResources.hand_over),
        # let go of once the child (bwrap) has exited: the read end of its status
        # pipe (when "status_fd"), then a locked descriptor per mount point.
        held = list(held)
        self.status_fd: int | None = held.pop(0) if request.get("status_fd") else None
        # Last: the listening sockets of the process's managed network (the daemon's
        # proxy, its sandbox's bridge; execserver/netproxy/kept.py), handed to each
        # re-adopting daemon, and their socket directories, removed at the end.
        count = int(request.get("net_fds") or 0)
        self.net_fds: list[int] = held[len(held) - count :] if count else []
        self.net_dirs: list[str] = list(request.get("net_dirs") or ())
        held = held[: len(held) - count]
        self.mounts: list[tuple[int, str]] = list(
            zip(held, request.get("mounts") or (), strict=True)
        )
        self.dir: str = request["dir"]
        self.ttl: float = float(request["ttl"])
        self.drain_timeout: float = float(request["drain"])
        self.budget: int = int(request["budget"])
        # Its own cgroup (entered, killed, removed at the end), and a shared one it
        # only enters (a principal's group's leaf: execserver/containment/factory.py).
        self.cgroups: list[str] = list(request.get("cgroups") or ())
        self.enter: list[str] = list(request.get("enter") or ())
        self.pass_fds = pass_fds
        self.sel = ready.sel
        self.link: Link | None = Link(link)
        self.listener: socket.socket | None = None
        self.journal: Journal | None = None
        self.seq = 0  # last seq taken
        self.child: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.tty = bool(request["plan"]["tty"])
        self.streams: dict[int, str] = {}
        self.read_buffer = ready.read_buffer
        self.paused = False
        self.master: int | None = None
        self.held_master: int | None = None
        self.stdin_fd: int | None = None
        self.stdin_queue: list[bytes] = []
        self.stdin_waiting = False
        self.exited = False
        # The exit event of a child that exited while the journal was at its budget,
        # recorded once what it left in its pipe has been read: an exit's seq comes
        # after all of its output, as without the budget.
        self.exit_info: dict[str, Any] | None = None
        self.closed = False
        self.abandon = False
        self.drain_deadline: float | None = None
        self.drain_mark = 0
        self.orphan_deadline: float | None = None
        self.done = False
        self.wake_r = ready.wake_r
        # SIGTERM (an operator's, a test's): end it now, as the TTL would.
        self.stop_requested = False
        signal.signal(signal.SIGTERM, self._on_sigterm)

    # ---- start -------------------------------------------------------------------

    def start(self) -> None:
        plan = self.request["plan"]
        try:
            self._spawn(plan)
        except OSError as exc:
            self._answer({"ok": False, "errno": exc.errno or errno.EIO})
            raise SystemExit(0) from None
        except subprocess.SubprocessError:
            self._answer({"ok": False, "placement": True})
            raise SystemExit(0) from None
        for fd in self.pass_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        # Before the answer: what a re-adopting daemon looks for (the socket, then
        # meta.json naming the keeper). After it: what only this keeper's loop uses.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            with short_path(self.dir, SOCKET_NAME) as path:
                listener.bind(path)
        finally:
            os.umask(old)
        listener.listen(4)
        listener.setblocking(False)
        self.listener = listener
        meta = {
            "keeper": os.getpid(),
            "pid": self.pid,
            "tty": self.tty,
            "pipe_stdin": bool(plan["pipe_stdin"]),
            "process_id": self.request.get("process_id"),
            "program": self.request.get("program"),
            "started": time.time(),
            # A re-adopting daemon's hello is answered with replay_mark first.
            "replay_mark": True,
        }
        _write_atomic(os.path.join(self.dir, META_NAME), json.dumps(meta).encode())
        self._answer({"ok": True, "pid": self.pid, "keeper": os.getpid()})
        self.journal = Journal(os.path.join(self.dir, JOURNAL_DIR))
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.sel.register(listener, selectors.EVENT_READ, "accept")
        for fd in self.streams:
            self.sel.register(fd, selectors.EVENT_READ, "out")
        assert self.link is not None
        self.sel.register(self.link.sock, selectors.EVENT_READ, "link")
        self._flush()

    def _answer(self, answer: dict[str, Any]) -> None:
        """The answer now, not after the journal and the loop's set-up: it is on the
        spawn's path. A refusal whole (the keeper exits next); otherwise what a fresh
        link's buffer does not take (it nearly always takes it all) stays in
        ``extra`` for ``_flush``."""
        payload = json.dumps(answer).encode()
        link = self.link
        assert link is not None
        link.extra = FRAME.pack(0, KIND_INFO, len(payload)) + payload
        if not answer.get("ok"):
            link.sock.setblocking(True)
            link.sock.sendall(link.extra)
            return
        try:
            sent = link.sock.send(link.extra)
        except BlockingIOError:
            return
        link.extra = link.extra[sent:]

    def _identity(self, plan: dict[str, Any]) -> dict[str, Any]:
        creds = plan.get("credentials")
        if not creds:
            return {}
        return {"user": creds["uid"], "group": creds["gid"], "extra_groups": list(creds["groups"])}

    def _spawn(self, plan: dict[str, Any]) -> None:
        places = [_open_placement(d) for d in (*self.cgroups, *self.enter)]

        def place() -> None:  # pragma: no cover - runs in the forked child
            for fd in places:
                os.write(fd, b"0")

        common: dict[str, Any] = dict(
            executable=plan["executable"],
            cwd=plan["cwd"],
            env=plan["env"],
            start_new_session=True,
            pass_fds=tuple(self.pass_fds),
            **self._identity(plan),
        )
        try:
            if plan["tty"]:
                self._spawn_pty(plan, place if places else None, common)
            else:
                self._spawn_pipes(plan, place if places else None, common)
        finally:
            for fd in places:
                os.close(fd)

    def _spawn_pipes(
        self, plan: dict[str, Any], place: Callable[[], None] | None, common: dict[str, Any]
    ) -> None:
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        for fd in (out_r, err_r):
            try:
                fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BUFFER_BYTES)
            except OSError:
                pass  # above /proc/sys/fs/pipe-max-size: the default size works too
        mine, theirs = [out_r, err_r], [out_w, err_w]
        stdin_arg: int = subprocess.DEVNULL
        if plan["pipe_stdin"]:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            stdin_arg = in_r
            mine.append(in_w)
            theirs.append(in_r)
            self.stdin_fd = in_w
        try:
            self.child = subprocess.Popen(
                plan["argv"],
                stdin=stdin_arg,
                stdout=out_w,
                stderr=err_w,
                preexec_fn=place,
                **common,
            )
        except BaseException:
            for fd in mine + theirs:
                os.close(fd)
            self.stdin_fd = None
            raise
        for fd in theirs:
            os.close(fd)
        for fd in mine:
            os.set_blocking(fd, False)
        self.pid = self.child.pid
        self.streams = {out_r: "stdout", err_r: "stderr"}

    def _spawn_pty(
        self, plan: dict[str, Any], place: Callable[[], None] | None, common: dict[str, Any]
    ) -> None:
        def child_setup() -> None:  # pragma: no cover - runs in the forked child
            if place is not None:
                place()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        master, slave = os.openpty()
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", PTY_ROWS, PTY_COLS, 0, 0))
            self.child = subprocess.Popen(
                plan["argv"],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                preexec_fn=child_setup,
                **common,
            )
        except BaseException:
            os.close(master)
            os.close(slave)
            raise
        os.close(slave)
        os.set_blocking(master, False)
        self.pid = self.child.pid
        self.master = master
        self.stdin_fd = master
        self.streams = {master: "pty"}

    # ---- the loop ------------------------------------------------------------------

    def run(self) -> None:
        while not self.done:
            # Asleep until something happens (a signal, SIGCHLD included, wakes it
            # through wake_r) or a deadline: thousands of idle keepers cost nothing.
            timeout: float | None = None
            now = time.monotonic()
            for deadline in (self.orphan_deadline, self.drain_deadline):
                if deadline is not None:
                    wait = max(0.0, deadline - now)
                    timeout = wait if timeout is None else min(timeout, wait)
            for key, mask in self.sel.select(timeout):
                what = key.data
                if what == "out":
                    self._on_output(key.fd)
                elif what == "link":
                    if self.link is None or key.fileobj is not self.link.sock:
                        # A link dropped earlier in this batch (a send to a daemon
                        # that died failed while forwarding output): its event is
                        # stale. Acting on it crashed the keeper, which then killed
                        # the very process it exists to keep.
                        continue
                    if mask & selectors.EVENT_READ:
                        self._on_link_readable()
                    if self.link is not None and mask & selectors.EVENT_WRITE:
                        self._flush()
                elif what == "accept":
                    self._on_accept()
                elif what == "wake":
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                elif what == "stdin":
                    self._flush_stdin()
                if self._stopped():
                    break
            if self._stopped():
                break
            self._reap()
            now = time.monotonic()
            if self.drain_deadline is not None and now >= self.drain_deadline:
                self._drain_expired()
            if self.stop_requested or (
                self.orphan_deadline is not None and now >= self.orphan_deadline
            ):
                self._finish()  # nobody came back: nothing of ours may stay
                self._remove_session_if_last()
                break
            self._update_reading()
            self._record_pending_exit()
        self.sel.close()

    def _stopped(self) -> bool:
        return self.done

    def _on_sigterm(self, signum: int, frame: object) -> None:
        del signum, frame
        self.stop_requested = True

    # ---- output ----------------------------------------------------------------------

    def _on_output(self, fd: int) -> None:
        stream = self.streams.get(fd)
        if stream is not None:
            streaming = self._read(fd, stream, READS_PER_WAKEUP) >= STREAMING_READ_BYTES
            self._flush()
            if streaming:
                # A child writing faster than it is read: let its pipe fill a while
                # before the next read, so that reads (and sends, and the daemon's
                # wake-ups) are few and large. Its own pace sets a read's size
                # otherwise: ~40 KiB, and the keeper's time went to the wake-ups.
                time.sleep(STREAMING_PAUSE_S)

    def _read(self, fd: int, stream: str, max_reads: int) -> int:
        """Up to ``max_reads`` reads of the child's ``stream``, each journaled as one
        frame (``pieces`` numbers its chunks). The last read's byte count."""
        kind = STREAM_KINDS[stream]
        want = (PTY_CHUNK if stream == "pty" else PIPE_CHUNK) * CHUNKS_PER_READ
        journal = self.journal
        assert journal is not None
        count = 0
        for _ in range(max_reads):
            if self._held_back():
                return 0
            first = self.seq + 1
            try:
                if journal.splice and stream != "pty":
                    count = self._splice(journal, fd, want, kind, first)
                else:
                    count = self._read_copy(journal, fd, want, kind, first)
            except BlockingIOError:
                return 0
            except OSError:  # EIO: the pty's last slave fd closed
                count = 0
            if not count:
                self._close_stream(fd)
                return 0
            self.seq = first + pieces(kind, count) - 1
            if count < want:
                return count
        return count

    def _splice(self, journal: Journal, fd: int, want: int, kind: int, first: int) -> int:
        try:
            return journal.splice_from(fd, want, kind, first)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
        journal.splice = False  # this file system: read and write, as for a pty
        return self._read_copy(journal, fd, want, kind, first)

    def _read_copy(self, journal: Journal, fd: int, want: int, kind: int, first: int) -> int:
        # Into one buffer kept for the keeper's life: a fresh 256 KiB object per
        # read came from memory the kernel had to fault in and zero each time.
        view = memoryview(self.read_buffer)
        try:
            count = os.readv(fd, [view[:want]])
            if count:
                journal.append(
                    [FRAME.pack(first, kind, count), view[:count]],
                    first,
                    first + pieces(kind, count) - 1,
                )
            return count
        finally:
            view.release()

    def _event(self, kind: int, payload: bytes = b"") -> None:
        self.seq += 1
        assert self.journal is not None
        self.journal.append([FRAME.pack(self.seq, kind, len(payload)), payload], self.seq, self.seq)
        self._flush()

    def _over_budget(self) -> bool:
        assert self.journal is not None
        return self.journal.unacked_bytes() >= self.budget

    def _held_back(self) -> bool:
        """Whether the child's output is left in its pipe for now: the journal is at
        its budget, or a daemon is connected and ``UNSENT_LIMIT`` bytes wait to be
        sent to it. A daemon that reads slower than the child writes (its client
        does) then holds the child as it would without a keeper, instead of the
        journal growing to its budget in fresh segment files, which cost the
        keeper twice the CPU of the ones it reuses; the budget is for when no
        daemon is there."""
        if self._over_budget():
            return True
        link = self.link
        if link is None:
            return False
        assert self.journal is not None
        segments = self.journal.segments
        unsent = -link.offset if link.segment < len(segments) else 0
        for seg in segments[link.segment :]:
            unsent += seg[3]
        return unsent >= UNSENT_LIMIT

    def _update_reading(self) -> None:
        pause = self._held_back()
        if pause == self.paused:
            return
        self.paused = pause
        for fd in self.streams:
            if pause:
                self.sel.unregister(fd)
            else:
                self.sel.register(fd, selectors.EVENT_READ, "out")

    def _close_stream(self, fd: int) -> None:
        if self.streams.pop(fd, None) is None:
            return
        if fd in self.sel.get_map():
            self.sel.unregister(fd)
        if fd == self.master:
            self._close_stdin()
            if not self.exited:
                # Closing the master now would hang up the terminal and SIGHUP a
                # child that merely closed its stdio: held until it was reaped.
                self.held_master = fd
            else:
                os.close(fd)
        else:
            os.close(fd)
        if self.exited and self.exit_info is None and not self.streams:
            self._mark_closed()

    def _abandon_streams(self) -> None:
        self.drain_deadline = None
        for fd in list(self.streams):
            self._close_stream(fd)
        if self.exited and self.exit_info is None and not self.closed:
            self._mark_closed()

    def _drain_expired(self) -> None:
        # Only a silent holder of the pipes (a daemonised grandchild) is cut off.
        if self.paused or self.seq != self.drain_mark:
            self.drain_mark = self.seq
            self.drain_deadline = time.monotonic() + self.drain_timeout
            return
        self._abandon_streams()

    def _mark_closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.drain_deadline = None
        self._close_stdin()
        self._event(KIND_CLOSED)

    # ---- exit ------------------------------------------------------------------------

    def _reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid and not self.exited:
                self._on_exit(status, usage)

    def _on_exit(self, status: int, usage: object) -> None:
        if self.child is not None:
            self.child.returncode = 0  # never waited for again by Popen
        if os.WIFSIGNALED(status):
            code = 1 if self.tty else 128 + os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
        if not self.abandon:
            for fd, stream in list(self.streams.items()):
                self._read(fd, stream, DRAIN_READS)
        if self.held_master is not None:
            os.close(self.held_master)
            self.held_master = None
        self._release_sandbox()
        self.exited = True
        info = {
            "code": code,
            "cpu_s": usage.ru_utime + usage.ru_stime,  # type: ignore[attr-defined]
            "max_rss_kib": int(usage.ru_maxrss),  # type: ignore[attr-defined]
        }
        if not self.abandon and self.streams and self._held_back():
            # The drain could not read (back-pressure): the pipe may still hold the
            # child's last output, whose seqs must come before the exit's.
            self.exit_info = info
            return
        self._record_exit(info)

    def _record_pending_exit(self) -> None:
        """The budget lets the drain go on: read what the pipes hold, then record the
        exit unless the budget stops the drain again."""
        info = self.exit_info
        if info is None or self._held_back():
            return
        for fd, stream in list(self.streams.items()):
            self._read(fd, stream, DRAIN_READS)
        if self.streams and self._held_back():
            return
        self.exit_info = None
        self._record_exit(info)
        self._flush()

    def _record_exit(self, info: dict[str, Any]) -> None:
        self._event(KIND_EXIT, json.dumps(info).encode())
        if self.abandon or not self.streams:
            self._abandon_streams()
        else:
            self.drain_mark = self.seq
            self.drain_deadline = time.monotonic() + self.drain_timeout

    def _release_sandbox(self) -> None:
        """The sandbox is gone: give back its host resources. A mount point made for
        a protected name is removed as the daemon's last release would remove it
        (execserver/sandbox/mounts.py): only when it carries the daemon's mark, is
        still the directory we hold, is empty, and nobody else (a daemon's running
        sandbox) holds it: the exclusive lock says so."""
        if self.status_fd is not None:
            os.close(self.status_fd)
            self.status_fd = None
        mounts, self.mounts = self.mounts, []
        for fd, path in mounts:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.getxattr(fd, MOUNT_MARK)
                here, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
                if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                    os.rmdir(path)
            except OSError:
                pass  # held elsewhere, not marked, gone or not empty: not ours to remove
            finally:
                os.close(fd)

    # ---- killing ---------------------------------------------------------------------

    def _kill_tree(self) -> None:
        """SIGKILL the child and everything below it or re-parented to us."""
        for directory in self.cgroups:
            try:
                with open(os.path.join(directory, "cgroup.kill"), "w") as handle:
                    handle.write("1")
            except OSError:
                pass
        if self.pid and not self.exited:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        me = os.getpid()
        for _ in range(5):
            if _childless():
                break
            targets = _descendants(me)
            if not targets:
                break
            for pid in targets:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def _finish(self) -> None:
        """Kill the tree, reap it, remove our files and stop."""
        self._kill_tree()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            self._reap()
            if _childless() or not _descendants(os.getpid()):
                break
            time.sleep(0.005)
        self._reap()
        self._release_sandbox()  # a child killed before its exit was seen
        for directory in self.cgroups:
            for _ in range(100):
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        for fd in self.net_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.net_fds = []
        for directory in self.net_dirs:
            _remove_tree(directory)
        _remove_tree(self.dir)
        self.done = True

    def _remove_session_if_last(self) -> None:
        """No daemon came back: the last process of its session also removes the
        session's file (a session with no process left has nothing to resume)."""
        session_dir = os.path.dirname(self.dir)
        try:
            if any(e.is_dir() for e in os.scandir(session_dir)):
                return
            os.unlink(os.path.join(session_dir, "session.json"))
            os.rmdir(session_dir)
        except OSError:
            pass

    # ---- stdin -----------------------------------------------------------------------

    def _write_stdin(self, data: bytes) -> None:
        if self.stdin_fd is None or not data:
            return
        self.stdin_queue.append(data)
        if not self.stdin_waiting:
            self._flush_stdin()

    def _flush_stdin(self) -> None:
        fd = self.stdin_fd
        while self.stdin_queue and fd is not None:
            try:
                n = os.write(fd, self.stdin_queue[0])
            except BlockingIOError:
                if not self.stdin_waiting:
                    self.stdin_waiting = True
                    self._watch_stdin(True)
                return
            except OSError:
                self.stdin_queue.clear()
                break
            if n == len(self.stdin_queue[0]):
                self.stdin_queue.pop(0)
            else:
                self.stdin_queue[0] = self.stdin_queue[0][n:]
        if self.stdin_waiting:
            self.stdin_waiting = False
            self._watch_stdin(False)

    def _watch_stdin(self, on: bool) -> None:
        fd = self.stdin_fd
        if fd is None:
            return
        if fd == self.master:
            return  # the master is polled for output already; retried on each wake-up
        if on:
            self.sel.register(fd, selectors.EVENT_WRITE, "stdin")
        else:
            self.sel.unregister(fd)

    def _close_stdin(self) -> None:
        fd = self.stdin_fd
        if fd is None:
            return
        if self.stdin_waiting:
            self._watch_stdin(False)
            self.stdin_waiting = False
        self.stdin_fd = None
        self.stdin_queue.clear()
        if fd != self.master:
            os.close(fd)

    # ---- the daemon's link ---------------------------------------------------------------

    def _on_accept(self) -> None:
        assert self.listener is not None
        try:
            sock, _ = self.listener.accept()
        except BlockingIOError:
            return
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", creds)
        # Only the daemon's account, and never anything a keeper holds: this one's
        # child or anything it started, nor another keeper's (a sandboxed command
        # could otherwise drive an unsandboxed process's stdin).
        if uid != os.getuid() or held_by_a_keeper(pid):
            sock.close()
            return
        if self.link is not None:
            self._drop_link()
        if self.net_fds:
            # Before anything else on the link: one byte carrying them (it fits any
            # fresh socket's buffer, so the non-blocking send is whole).
            try:
                socket.send_fds(sock, [NET_FDS_MARK], self.net_fds)
            except OSError:
                sock.close()
                return
        self.link = Link(sock)
        self.sel.register(sock, selectors.EVENT_READ, "link")
        self.orphan_deadline = None

    def _drop_link(self) -> None:
        link = self.link
        if link is None:
            return
        self.link = None
        self.sel.unregister(link.sock)
        link.sock.close()
        self.orphan_deadline = time.monotonic() + self.ttl

    def _on_link_readable(self) -> None:
        link = self.link
        assert link is not None
        try:
            data = link.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop_link()
            return
        link.inbox += data
        while b"\n" in link.inbox and not self.done:
            line, link.inbox = link.inbox.split(b"\n", 1)
            self._command(json.loads(line))

    def _command(self, command: dict[str, Any]) -> None:
        op = command.get("op")
        assert self.journal is not None
        if op == "ack":
            before = len(self.journal.segments)
            self.journal.ack(int(command["seq"]))
            if self.link is not None:
                self.link.segment = max(
                    0, self.link.segment - (before - len(self.journal.segments))
                )
            self._update_reading()
        elif op == "hello":  # a re-adopting daemon: replay from its seq
            assert self.link is not None
            self.link.segment, self.link.offset = self.journal.position_of(int(command["from"]))
            # First, how far the replay goes (the last seq journaled now): the daemon
            # answers nothing about the process before it has all of it (a closed
            # process read back from seq 0 came back empty while the replay was
            # still on its way, processes/kept.py).
            self.link.extra = replay_mark(self.seq)
            self._flush()
        elif op == "write":
            self._write_stdin(base64.b64decode(command["data"]))
        elif op == "signal":
            self._interrupt()
        elif op == "terminate":
            if not self.exited:
                self.abandon = True
                self._kill_tree()
        elif op in ("kill", "release"):
            self._finish()

    def _interrupt(self) -> None:
        if self.exited:
            return
        group = self.pid
        if self.master is not None and self.master in self.streams:
            try:
                group = os.tcgetpgrp(self.master)
            except OSError:
                pass
        try:
            os.killpg(group, signal.SIGINT)
        except OSError:
            pass

    def _flush(self) -> None:
        link = self.link
        if link is None or self.journal is None:
            return
        try:
            if link.extra:
                sent = link.sock.send(link.extra)
                link.extra = link.extra[sent:]
                if link.extra:
                    self._want_write(True)
                    return
            segments = self.journal.segments
            while link.segment < len(segments):
                seg = segments[link.segment]
                if link.offset < seg[3]:
                    sent = os.sendfile(
                        link.sock.fileno(), seg[2], link.offset, seg[3] - link.offset
                    )
                    link.offset += sent
                    if link.offset < seg[3]:
                        continue
                if link.segment + 1 < len(segments):
                    link.segment += 1
                    link.offset = 0
                else:
                    break
        except BlockingIOError:
            self._want_write(True)
            return
        except OSError:
            self._drop_link()
            return
        self._want_write(False)

    def _want_write(self, on: bool) -> None:
        link = self.link
        if link is None:
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if on else 0)
        self.sel.modify(link.sock, events, "link")


def _move_high(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    os.close(fd)
    return high


def _keeper(ctl: socket.socket, link_fd: int) -> None:
    """In the forked keeper: let go of the zygote's socket, get ready, then wait on the
    link for the daemon's request (a warm keeper: the fork and this set-up are done
    before a spawn needs them, off its path)."""
    ctl.close()
    os.setsid()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_DUMPABLE, 0)
    link = socket.socket(fileno=_move_high(link_fd))
    ready = Ready()
    received = _receive_request(link)
    if received is None:
        return  # the daemon let go of its warm keeper (or is gone): nothing to keep
    request, fds = received
    moved = [_move_high(fd) for fd in fds]
    wanted = list(request["plan"]["pass_fds"])
    # After the plan's own: a sandbox's host resources, held here (close-on-exec,
    # high) and never passed on to the child (Keeper.held).
    moved, held = moved[: len(wanted)], moved[len(wanted) :]
    pass_fds: list[int] = []
    for high, number in zip(moved, wanted, strict=True):
        os.dup2(high, number, inheritable=True)
        os.close(high)
        pass_fds.append(number)
    keeper = Keeper(request, link, pass_fds, held, ready)
    try:
        keeper.start()
    except SystemExit:
        raise
    except BaseException as exc:
        # Not the child's fault (the state dir, the socket): the daemon is told why.
        if keeper.child is not None:
            keeper._finish()
        keeper._answer({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        raise
    try:
        keeper.run()
    except BaseException:
        keeper._finish()
        raise


def _receive_request(link: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The spawn request on a warm keeper's link: REQUEST_HEAD (its length), the
    JSON, and the plan's pass_fds by SCM_RIGHTS with the first bytes. None at EOF."""
    data, fds, _, _ = socket.recv_fds(link, 1 << 16, 256)
    head = REQUEST_HEAD.size
    while len(data) < head or len(data) < head + REQUEST_HEAD.unpack_from(data)[0]:
        more = link.recv(1 << 16)
        if not more:
            for fd in fds:
                os.close(fd)
            return None
        data += more
    (length,) = REQUEST_HEAD.unpack_from(data)
    request: dict[str, Any] = json.loads(data[head : head + length])
    return request, list(fds)


def zygote(ctl_fd: int, nice: int = 0) -> None:
    """Fork a keeper on each request; ``nice``: steps below the daemon for the
    zygote, so for every keeper and what it runs (execserver/priority.py)."""
    if nice > 0:
        os.nice(nice)
    ctl = socket.socket(fileno=ctl_fd)
    _prctl(PR_SET_DUMPABLE, 0)
    # What every keeper inherits stays shared: no collection touches (copies) it.
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, lambda *_: _reap_keepers())
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(ctl, 64, 4)
        except InterruptedError:
            continue
        if not message:
            return  # the daemon is gone: keepers live on, the zygote does not
        if len(fds) != 1:  # one message, one warm keeper: the link's other end
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _keeper(ctl, fds[0])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0
            except BaseException as exc:  # STATE_DIR/keepers.log shows why
                import traceback  # only on this path: every keeper's start stays light

                sys.stderr.write(f"execserver keeper {os.getpid()}: {exc!r}\n")
                traceback.print_exc()
                sys.stderr.flush()
                code = 1
            os._exit(code)
        for fd in fds:
            os.close(fd)


def _reap_keepers() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    if len(argv) in (2, 3) and argv[0] == "zygote":
        zygote(int(argv[1]), int(argv[2]) if len(argv) == 3 else 0)
        return 0
    sys.stderr.write("usage: program.py zygote FD [NICE]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
