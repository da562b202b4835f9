"""``fs.upload`` / ``fs.download``: a directory tree to and from the executor.

The protocol's file methods read and write file contents only (no modes,
times or symlinks), and each costs a round trip. So a tree goes as one tar
stream through a process on the executor, started like ``run`` (under the
file system's sandbox, if it has one):

* upload: ``tarfile`` builds the archive here (stream mode ``w|``, pax
  format) from one walk of the tree and sends it in 1 MiB ``process/write``
  chunks, a few in flight, to ``tar -x`` on the executor. ``process/write``
  is answered once the bytes are queued, not written, so it carries no
  back-pressure: the remote tar reports what it has read (GNU
  ``--checkpoint``: a dot per ~1 MB read) and no more than ``WINDOW_BYTES``
  are sent ahead of that. A pipe's stdin cannot be closed through the
  protocol; tar ends at the archive's end-of-archive blocks.
* download: ``tar -c`` on the executor (``--hard-dereference``, so a hard
  link arrives as a file), read here with ``tarfile`` (``r|``) as its output
  arrives and extracted by our own checks, not ``extractall``: a member whose
  path is absolute, has a ``..`` component or goes through a symlink (one
  from the archive or one already at the destination) is refused before
  anything is written for it (:class:`TransferError`, step ``extract``), and
  so is a hard link; links are created as links and never followed.

Both keep contents, modes (set after the contents: a read-only directory
still gets its files), modification times (to the nanosecond) and symlinks as
symlinks: the link's own target text is copied as it is, whether it points
inside the tree, outside it, or nowhere. What it points to is not copied.
Other file types (fifos, sockets, devices) are skipped and named in
``TransferSummary.skipped``. Existing files at the destination are replaced
(unlinked first: a hard link or symlink there is not written through);
nothing else there is removed.

Without GNU tar on the executor (checked once per client with ``tar
--version``), the old per-file path is the fallback: ``fs/createDirectory``,
``fs/writeFile`` and ``fs/readFile`` (``concurrency`` of them in flight),
``xargs -0 chmod`` per distinct mode and ``ln -sfn`` for links, GNU ``find
-printf`` to list a tree to download. It keeps modes and links but not times,
and it is several times slower on many small files.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import posixpath
import queue
import re
import stat
import tarfile
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import IO, Any, Final, Protocol

import pybase64

from execserver.aio.tasks import TaskSet
from execserver.client.errors import ExecServerError
from execserver.client.events import Closed, Failed, Output
from execserver.wire import methods
from execserver.wire.process import WriteParams

__all__ = [
    "DEFAULT_CONCURRENCY",
    "Progress",
    "TransferError",
    "TransferFileSystem",
    "TransferSummary",
    "download",
    "upload",
]

DEFAULT_CONCURRENCY: Final = 16
# Told (bytes done, bytes total) as file contents go through.
Progress = Callable[[int, int], object]

# The tar stream: chunks of CHUNK_BYTES, WRITES_IN_FLIGHT process/write calls at
# once (benchmarks/transfer.py: 2-4 in flight reach ~490 MB/s on loopback, 1
# only ~210), at most WINDOW_BYTES ahead of what the remote tar has read.
CHUNK_BYTES: Final = 1024 * 1024
WRITES_IN_FLIGHT: Final = 4
WINDOW_BYTES: Final = 16 * 1024 * 1024
# tar reads records of 20 blocks (10240 bytes) from a pipe; a dot every 100.
_RECORD_BYTES: Final = tarfile.RECORDSIZE
_CHECKPOINT_RECORDS: Final = 100

# Exit codes of our scripts for the cases that have an OSError of their own.
_EXIT_NOT_FOUND: Final = 65
_EXIT_NOT_DIRECTORY: Final = 66

# $1 the destination.
UNTAR_SCRIPT: Final = (
    'mkdir -p -- "$1" && cd -- "$1" && exec tar -x -f - -p --no-same-owner '
    f"--checkpoint={_CHECKPOINT_RECORDS} --checkpoint-action=dot"
)
# $1 the tree. First line of stdout: the total size of its regular files; then the archive.
TAR_SCRIPT: Final = (
    f'[ -e "$1" ] || [ -L "$1" ] || exit {_EXIT_NOT_FOUND}; '
    f'[ -d "$1" ] || exit {_EXIT_NOT_DIRECTORY}; '
    'cd -- "$1" || exit 1; '
    "find . -type f -printf '%s\\n' | awk '{ s += $1 } END { printf \"%.0f\\n\", s }' "
    "|| exit 1; "
    "exec tar -c -f - --format=posix --hard-dereference "
    "--pax-option=delete=atime,delete=ctime ."
)
# $1 the tree. Type, octal mode, size, path relative to $1, link target; NUL-separated.
LIST_SCRIPT: Final = "exec find \"$1\" -printf '%y\\0%m\\0%s\\0%P\\0%l\\0'"

_SOCKET_IGNORED = re.compile(r"^tar: (.*): socket ignored$", re.MULTILINE)


@dataclass
class TransferSummary:
    """What a transfer did."""

    files: int = 0
    directories: int = 0
    symlinks: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)


class TransferError(ExecServerError):
    """A step failed: on the executor (``tar``, ``chmod``, ``ln``, ``find``;
    ``detail`` is its stderr), or ``extract`` here (a member refused)."""

    def __init__(self, step: str, detail: str) -> None:
        # ``extract`` is this client's own check of a downloaded archive.
        where = "here, refusing the executor's archive" if step == "extract" else "on the executor"
        super().__init__(f"{step} failed {where}: {detail.strip() or 'no message'}")
        self.step = step
        self.detail = detail


class TransferFileSystem(Protocol):
    """What a transfer needs of ``client.fs`` (its client must have ``run`` and
    ``start_process``). Stated here rather than imported: fs.py offers
    upload/download itself."""

    sandbox: object

    @property
    def caller(self) -> object: ...

    async def create_directory(self, path: str) -> None: ...

    async def write_file(self, path: str, data: bytes) -> None: ...

    async def read_file(self, path: str) -> bytes: ...


def _client_method(fs: TransferFileSystem, name: str) -> Callable[..., Awaitable[Any]]:
    method: Callable[..., Awaitable[Any]] | None = getattr(fs.caller, name, None)
    if method is None:
        raise TypeError("upload/download need a client that can run commands (ExecServerClient)")
    return method


async def _sh(fs: TransferFileSystem, step: str, script: str, args: list[str], stdin: bytes) -> str:
    result = await _client_method(fs, "run")(
        ["/bin/sh", "-c", script, "execserver-transfer", *args],
        cwd="/",
        stdin=stdin or None,
        sandbox=fs.sandbox,
    )
    stdout, stderr = result.stdout, result.stderr
    assert isinstance(stdout, bytes) and isinstance(stderr, bytes)
    if result.exit_code != 0:
        raise TransferError(step, stderr.decode("utf-8", "replace"))
    return stdout.decode("utf-8", "surrogateescape")


# ---- is there a GNU tar on the executor? -----------------------------------------

_HAS_TAR: weakref.WeakKeyDictionary[object, bool] = weakref.WeakKeyDictionary()


async def has_gnu_tar(fs: TransferFileSystem) -> bool:
    """Whether the executor runs GNU tar (``--checkpoint`` is GNU's); asked once
    per client with one command, under the fs's sandbox."""
    caller = fs.caller
    try:
        return _HAS_TAR[caller]
    except (KeyError, TypeError):
        pass
    result = await _client_method(fs, "run")(
        ["/bin/sh", "-c", "exec tar --version"], cwd="/", sandbox=fs.sandbox
    )
    stdout = result.stdout
    assert isinstance(stdout, bytes)
    found = result.exit_code == 0 and b"GNU tar" in stdout
    try:
        _HAS_TAR[caller] = found
    except TypeError:  # not weakly referenceable: ask every time
        pass
    return found


# ---- the local tree ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    rel: str  # "" for the root
    kind: str  # "dir", "file", "link"
    mode: int
    size: int
    mtime_ns: int
    target: str = ""


def _walk(root: str, skipped: list[str]) -> list[_Entry]:
    """The tree under ``root`` depth first: each directory followed at once by
    everything below it. Fifos, sockets and devices go to ``skipped``.

    Depth first because GNU ``tar -x`` sets a directory's time and mode when the
    first member outside it arrives: in ``os.walk``'s order (a directory's
    children before any grandchild) a file written into a directory after that
    changed the directory's time again, and a read-only one lost its time.
    """
    if not os.path.isdir(root):
        raise NotADirectoryError(f"not a local directory: {root!r}")
    st = os.stat(root)
    entries = [_Entry("", "dir", stat.S_IMODE(st.st_mode), 0, st.st_mtime_ns)]
    # A stack of (directory, its entries not yet visited); symlinked directories
    # are entries, never descended into.
    stack: list[tuple[str, Iterator[os.DirEntry[str]]]] = [("", iter(_listing(root)))]
    while stack:
        rel_top, pending = stack[-1]
        item = next(pending, None)
        if item is None:
            stack.pop()
            continue
        rel = os.path.join(rel_top, item.name)
        st = item.stat(follow_symlinks=False)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            entries.append(_Entry(rel, "link", mode, 0, st.st_mtime_ns, os.readlink(item.path)))
        elif stat.S_ISDIR(st.st_mode):
            entries.append(_Entry(rel, "dir", mode, 0, st.st_mtime_ns))
            stack.append((rel, iter(_listing(item.path))))
        elif stat.S_ISREG(st.st_mode):
            entries.append(_Entry(rel, "file", mode, st.st_size, st.st_mtime_ns))
        else:
            skipped.append(rel)
    return entries


def _listing(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as found:
        return list(found)


def _summarize(entries: Iterable[_Entry], summary: TransferSummary) -> None:
    for entry in entries:
        if entry.kind == "dir":
            summary.directories += 1
        elif entry.kind == "file":
            summary.files += 1
        else:
            summary.symlinks += 1


# ---- upload through tar -x ---------------------------------------------------------


class _Aborted(Exception):
    """The sending side gave up; the archive builder stops."""


class _ChunkSink:
    """The file object tarfile writes the archive to: cuts it into chunks and
    hands each to the event loop, blocking (in the builder's thread) while
    ``slots`` chunks are already waiting to be sent."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, ready: asyncio.Queue[tuple[str, int, int] | None]
    ) -> None:
        self._loop = loop
        self._ready = ready
        self._buffer = bytearray()
        self.slots = threading.Semaphore(WRITES_IN_FLIGHT * 2)
        self.sent = 0
        self.aborted = False
        self.file_bytes = 0  # file contents read so far

    def write(self, data: bytes) -> int:
        self._buffer += data
        if len(self._buffer) >= CHUNK_BYTES:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if not self._buffer:
            return
        self.slots.acquire()
        if self.aborted:
            raise _Aborted
        # Encoded here, off the event loop (pybase64: ~15x the stdlib's speed).
        chunk = pybase64.b64encode(self._buffer).decode("ascii")
        item = (chunk, len(self._buffer), self.file_bytes)
        self._buffer = bytearray()
        self._loop.call_soon_threadsafe(self._ready.put_nowait, item)

    def abort(self) -> None:
        self.aborted = True
        self.slots.release(WRITES_IN_FLIGHT * 2 + 1)


class _CountedReader:
    def __init__(self, handle: IO[bytes], sink: _ChunkSink) -> None:
        self._handle = handle
        self._sink = sink

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self._sink.file_bytes += len(data)
        return data


def _tarinfo(entry: _Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.rel or ".")
    info.mode = entry.mode
    info.uid = info.gid = 0
    seconds, nanoseconds = divmod(entry.mtime_ns, 1_000_000_000)
    info.mtime = seconds
    if nanoseconds:
        # tarfile would write str(float); the exact value goes in the pax header.
        info.pax_headers = {"mtime": f"{seconds}.{nanoseconds:09d}"}
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "link":
        info.type = tarfile.SYMTYPE
        info.linkname = entry.target
    else:
        info.size = entry.size
    return info


def _build_archive(root: str, entries: list[_Entry], sink: _ChunkSink) -> None:
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as archive:  # type: ignore[call-overload]
        for entry in entries:
            info = _tarinfo(entry)
            if entry.kind == "file":
                with open(os.path.join(root, entry.rel), "rb") as handle:
                    archive.addfile(info, _CountedReader(handle, sink))
            else:
                archive.addfile(info)
    sink.flush()


class _RemoteTar:
    """Reads a remote tar's events: stdout to ``on_stdout``, stderr kept."""

    def __init__(self, on_stdout: Callable[[bytes], None]) -> None:
        self._on_stdout = on_stdout
        self.stderr = bytearray()
        self.failure: str | None = None
        self.changed = asyncio.Event()
        self.ended = False

    async def follow(self, proc: Any) -> None:
        try:
            async for event in proc.events(raise_on_failure=False):
                if isinstance(event, Output):
                    if event.stream == "stdout":
                        self._on_stdout(event.data)
                    else:
                        self.stderr += event.data
                elif isinstance(event, Failed):
                    self.failure = event.message
                elif isinstance(event, Closed):
                    break
                self.changed.set()
        finally:
            self.ended = True
            self.changed.set()

    def error_text(self) -> str:
        return self.failure or self.stderr.decode("utf-8", "replace")


async def _stop(proc: Any) -> None:
    if not proc.finished:
        try:
            await proc.terminate()
        except ExecServerError:
            pass


async def _upload_tar(
    fs: TransferFileSystem,
    root: str,
    entries: list[_Entry],
    remote_dir: str,
    progress: Progress | None,
) -> int:
    total = sum(entry.size for entry in entries)
    loop = asyncio.get_running_loop()
    ready: asyncio.Queue[tuple[str, int, int] | None] = asyncio.Queue()
    sink = _ChunkSink(loop, ready)
    read_records = 0

    def count_dots(data: bytes) -> None:
        nonlocal read_records
        read_records += data.count(b".") * _CHECKPOINT_RECORDS

    tar = _RemoteTar(count_dots)
    proc = await _client_method(fs, "start_process")(
        ["/bin/sh", "-c", UNTAR_SCRIPT, "execserver-transfer", remote_dir],
        cwd="/",
        pipe_stdin=True,
        sandbox=fs.sandbox,
    )
    tasks = TaskSet("execserver-upload")
    done = 0
    reported = -1

    def report(value: int) -> None:
        nonlocal done, reported
        done = max(done, value)
        if progress is not None and done != reported:
            reported = done
            progress(done, max(total, done))

    async def build() -> None:
        try:
            await asyncio.to_thread(_build_archive, root, entries, sink)
        finally:
            ready.put_nowait(None)

    stopped = False  # a write was refused: the remote tar is gone

    call: Callable[..., Awaitable[Any]] = _client_method(fs, "call")

    async def send(chunk: str, file_bytes: int) -> None:
        nonlocal stopped
        # RemoteProcess.write, with the chunk already in base64.
        params = WriteParams(process_id=proc.process_id, chunk=chunk, write_id=uuid.uuid4().hex)
        try:
            status = (await call(methods.PROCESS_WRITE, params)).status
        finally:
            sink.slots.release()
        if status == "accepted":
            report(file_bytes)
        else:
            stopped = True
            tar.changed.set()

    try:
        follower = tasks.spawn(tar.follow(proc), name="tar events", log_failures=False)
        builder = tasks.spawn(build(), name="tar build", log_failures=False)
        writes: set[asyncio.Task[None]] = set()
        sent = 0
        complete = False

        def halted() -> bool:
            return tar.ended or stopped

        while not halted():
            item = await ready.get()
            if item is None:
                complete = True
                break
            chunk, size, file_bytes = item
            # Back-pressure: the remote tar's checkpoints say what it has read.
            while sent - read_records * _RECORD_BYTES > WINDOW_BYTES:
                if halted():
                    break
                tar.changed.clear()
                await tar.changed.wait()
            else:
                while len(writes) >= WRITES_IN_FLIGHT:
                    finished, writes = await asyncio.wait(
                        writes, return_when=asyncio.FIRST_COMPLETED
                    )
                    for task in finished:
                        task.result()
                writes.add(tasks.spawn(send(chunk, file_bytes), name="write", log_failures=False))
                sent += size
        if writes:
            for task in (await asyncio.wait(writes))[0]:
                task.result()
        if not complete:
            sink.abort()
        await asyncio.wait([builder])
        failure = builder.exception()
        if failure is not None and not isinstance(failure, _Aborted):
            raise failure  # the archive is incomplete: the remote tar is stopped below
        await follower
        status = await proc.wait()
        if status.exit_code != 0 or tar.failure is not None:
            raise TransferError("tar -x", tar.error_text())
        if not complete:
            raise TransferError("tar -x", "tar ended before the archive did")
        report(total)
        return total
    finally:
        sink.abort()
        await _stop(proc)
        await tasks.aclose()


# ---- download through tar -c -------------------------------------------------------


class _FeedReader:
    """A read-only file object over chunks put in ``feed`` (``None`` ends it)."""

    def __init__(self, feed: queue.SimpleQueue[bytes | None]) -> None:
        self._feed = feed
        self._buffer = b""
        self._offset = 0
        self._eof = False

    def read(self, size: int = -1) -> bytes:
        while self._offset >= len(self._buffer) and not self._eof:
            item = self._feed.get()
            if item is None:
                self._eof = True
            else:
                self._buffer, self._offset = item, 0
        start = self._offset
        end = len(self._buffer) if size < 0 else min(len(self._buffer), start + size)
        self._offset = end
        if start == 0 and end == len(self._buffer):
            return self._buffer
        return self._buffer[start:end]


def _refused(name: str, why: str) -> TransferError:
    return TransferError("extract", f"refused archive member {name!r}: {why}")


def _member_path(name: str) -> str:
    """The member's path relative to the destination ("" for the root)."""
    if name.startswith("/"):
        raise _refused(name, "absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _refused(name, "a '..' component leaves the destination")
    return "/".join(parts)


def _mtime_ns(member: tarfile.TarInfo) -> int:
    exact = member.pax_headers.get("mtime")
    if exact is not None:
        whole, _, fraction = exact.partition(".")
        try:
            seconds = int(whole)
            nanoseconds = int((fraction + "000000000")[:9]) if fraction else 0
        except ValueError:
            pass
        else:
            negative = whole.startswith("-")
            return seconds * 1_000_000_000 + (-nanoseconds if negative else nanoseconds)
    return int(member.mtime) * 1_000_000_000


def _clear(path: str) -> None:
    """Remove what is at ``path`` unless it is a directory (that stays, and the
    create that follows fails on it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)


def _create(path: str) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileExistsError:
        _clear(path)  # a file, or a link (a hard link is not written through)
        return os.open(path, flags, 0o600)


class _Extractor:
    def __init__(self, root: str, summary: TransferSummary, on_file: Callable[[int], None]) -> None:
        self.root = root
        self.summary = summary
        self.on_file = on_file
        # Paths (relative) known to be real directories, not links.
        self.directories: set[str] = {""}
        self.dir_attributes: list[tuple[str, int, int]] = []

    def ensure_directory(self, rel: str, member: str) -> None:
        if rel in self.directories:
            return
        self.ensure_directory(posixpath.dirname(rel), member)
        path = os.path.join(self.root, rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            os.mkdir(path)
        else:
            if stat.S_ISLNK(st.st_mode):
                raise _refused(member, f"{rel!r} is a symlink (it is never followed)")
            if not stat.S_ISDIR(st.st_mode):
                raise _refused(member, f"{rel!r} is not a directory")
        self.directories.add(rel)

    def member(self, archive: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        rel = _member_path(member.name)
        if member.islnk():
            raise _refused(member.name, "hard links are not extracted")
        if not (member.isdir() or member.isreg() or member.issym()):
            self.summary.skipped.append(rel)
            return
        if rel == "" and not member.isdir():
            raise _refused(member.name, "the root must be a directory")
        self.ensure_directory(posixpath.dirname(rel), member.name)
        path = os.path.join(self.root, rel)
        mtime = _mtime_ns(member)
        mode = member.mode & 0o7777
        if member.isdir():
            if rel not in self.directories:
                _clear(path)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path)
                self.ensure_directory(rel, member.name)
            self.dir_attributes.append((rel, mode, mtime))
            self.summary.directories += 1
            return
        self.directories.discard(rel)
        if member.issym():
            _clear(path)
            os.symlink(member.linkname, path)
            os.utime(path, ns=(mtime, mtime), follow_symlinks=False)
            self.summary.symlinks += 1
            return
        source = archive.extractfile(member)
        assert source is not None
        with open(_create(path), "wb", buffering=0) as out:
            while data := source.read(CHUNK_BYTES):
                out.write(data)
            os.fchmod(out.fileno(), mode)
            os.utime(out.fileno(), ns=(mtime, mtime))
        self.summary.files += 1
        self.summary.bytes += member.size
        self.on_file(member.size)

    def finish(self) -> None:
        # Deepest first, so a read-only parent is set after its children, and a
        # directory's time after its entries changed it.
        for rel, mode, mtime in sorted(
            self.dir_attributes, key=lambda item: item[0].count("/"), reverse=True
        ):
            path = os.path.join(self.root, rel)
            os.chmod(path, mode)
            os.utime(path, ns=(mtime, mtime))


def _extract(
    feed: queue.SimpleQueue[bytes | None],
    root: str,
    summary: TransferSummary,
    on_file: Callable[[int], None],
) -> None:
    os.makedirs(root, exist_ok=True)
    extractor = _Extractor(root, summary, on_file)
    with tarfile.open(fileobj=_FeedReader(feed), mode="r|") as archive:  # type: ignore[call-overload]
        for member in archive:
            extractor.member(archive, member)
    extractor.finish()


async def _download_tar(
    fs: TransferFileSystem,
    remote_dir: str,
    root: str,
    progress: Progress | None,
    summary: TransferSummary,
) -> None:
    loop = asyncio.get_running_loop()
    feed: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    header = bytearray()
    total: int | None = None
    done = 0

    def on_stdout(data: bytes) -> None:
        nonlocal total
        if total is not None:
            feed.put(data)
            return
        header.extend(data)
        end = header.find(b"\n")
        if end >= 0:
            total = int(header[:end] or b"0")
            if rest := bytes(header[end + 1 :]):
                feed.put(rest)
            header.clear()

    def report(size: int) -> None:
        nonlocal done
        done += size
        if progress is not None:
            progress(done, max(total or 0, done))

    def on_file(size: int) -> None:  # in the extracting thread
        loop.call_soon_threadsafe(report, size)

    tar = _RemoteTar(on_stdout)
    proc = await _client_method(fs, "start_process")(
        ["/bin/sh", "-c", TAR_SCRIPT, "execserver-transfer", remote_dir],
        cwd="/",
        sandbox=fs.sandbox,
    )
    tasks = TaskSet("execserver-download")

    async def follow() -> None:
        try:
            await tar.follow(proc)
        finally:
            feed.put(None)

    try:
        follower = tasks.spawn(follow(), name="tar events", log_failures=False)
        extractor = tasks.spawn(
            asyncio.to_thread(_extract, feed, root, summary, on_file),
            name="extract",
            log_failures=False,
        )
        await asyncio.wait([follower, extractor], return_when=asyncio.FIRST_EXCEPTION)
        if extractor.done() and isinstance(extractor.exception(), TransferError):
            extractor.result()  # a refused member: the remote tar is stopped below
        await follower
        status = await proc.wait()
        if status.exit_code == _EXIT_NOT_FOUND:
            raise FileNotFoundError(errno.ENOENT, "no such directory on the executor", remote_dir)
        if status.exit_code == _EXIT_NOT_DIRECTORY:
            raise NotADirectoryError(f"not a directory on the executor: {remote_dir!r}")
        if status.exit_code != 0 or tar.failure is not None:
            raise TransferError("tar -c", tar.error_text())
        await extractor
    finally:
        feed.put(None)
        await _stop(proc)
        await tasks.aclose()
    stderr = tar.stderr.decode("utf-8", "surrogateescape")
    summary.skipped.extend(_member_path(name) for name in _SOCKET_IGNORED.findall(stderr))
    if progress is not None and done == 0:
        progress(0, 0)


# ---- the fallback: one fs/* call per file --------------------------------------------


async def _bounded(concurrency: int, jobs: Iterable[Callable[[], Awaitable[None]]]) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await job()

    # As asyncio.TaskGroup would: the first failure cancels the other jobs and
    # all failures are raised together; but the jobs are a TaskSet's, as every
    # task of the package is.
    running = TaskSet("execserver-transfer")
    started: list[asyncio.Task[None]] = []
    try:
        started.extend(
            running.spawn(one(job), name=f"job {number}", log_failures=False)
            for number, job in enumerate(jobs)
        )
        if started:
            await asyncio.wait(started, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        await running.aclose()
    failures = [
        failure
        for task in started
        if not task.cancelled() and (failure := task.exception()) is not None
    ]
    if failures:
        raise BaseExceptionGroup("transfer failed", failures)


def _nul(parts: Iterable[str]) -> bytes:
    return b"".join(os.fsencode(part) + b"\0" for part in parts)


def _read_local(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _write_local(path: str, data: bytes, mode: int) -> None:
    if os.path.islink(path):
        os.unlink(path)  # replace the link, do not write through it
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def _finish_local(
    root: str, directories: list[tuple[str, int]], links: list[tuple[str, str]]
) -> None:
    for rel, target in links:
        local = os.path.join(root, rel)
        if os.path.lexists(local):
            os.unlink(local)
        os.symlink(target, local)
    # Deepest first, so a read-only parent is set after its children.
    for rel, mode in sorted(directories, key=lambda item: item[0].count("/"), reverse=True):
        os.chmod(os.path.join(root, rel), mode)


def _make_dirs(root: str, directories: list[tuple[str, int]]) -> None:
    for rel, _ in directories:
        os.makedirs(os.path.join(root, rel), exist_ok=True)


async def _upload_files(
    fs: TransferFileSystem,
    root: str,
    entries: list[_Entry],
    remote_dir: str,
    progress: Progress | None,
    concurrency: int,
    summary: TransferSummary,
) -> None:
    directories = [(e.rel, e.mode) for e in entries if e.kind == "dir"]
    files = [(e.rel, e.mode, e.size) for e in entries if e.kind == "file"]
    links = [(e.rel, e.target) for e in entries if e.kind == "link"]
    total = sum(size for _, _, size in files)

    def remote(rel: str) -> str:
        return posixpath.join(remote_dir, rel) if rel else remote_dir

    # Leaves only: creating them creates their parents.
    parents = {posixpath.dirname(rel) for rel, _ in directories}
    leaves = [rel for rel, _ in directories if rel not in parents or rel == ""]
    await _bounded(concurrency, [partial(fs.create_directory, remote(rel)) for rel in leaves])

    done = 0

    async def send(rel: str) -> None:
        nonlocal done
        data = await asyncio.to_thread(_read_local, os.path.join(root, rel))
        await fs.write_file(remote(rel), data)
        done += len(data)
        summary.files += 1
        if progress is not None:
            progress(done, max(total, done))

    await _bounded(concurrency, [partial(send, rel) for rel, _, _ in files])
    summary.bytes = done
    if links:
        pairs = [part for rel, target in links for part in (target, remote(rel))]
        await _sh(fs, "ln", "exec xargs -0 -n 2 ln -sfn --", [], _nul(pairs))
        summary.symlinks = len(links)
    by_mode: dict[int, list[str]] = {}
    for rel, mode, _ in files:
        by_mode.setdefault(mode, []).append(remote(rel))
    # Directories last: a read-only directory must not stop the writes into it.
    dir_modes: dict[int, list[str]] = {}
    for rel, mode in directories:
        dir_modes.setdefault(mode, []).append(remote(rel))
    for groups in (by_mode, dir_modes):
        for mode, paths in groups.items():
            await _sh(fs, "chmod", 'exec xargs -0 chmod "$1" --', [f"{mode:o}"], _nul(paths))
    summary.directories = len(directories)
    if progress is not None and not files:
        progress(0, 0)


async def _download_files(
    fs: TransferFileSystem,
    remote_dir: str,
    root: str,
    progress: Progress | None,
    concurrency: int,
    summary: TransferSummary,
) -> None:
    listing = await _sh(fs, "find", LIST_SCRIPT, [remote_dir], b"")
    fields = listing.split("\0")
    directories: list[tuple[str, int]] = []
    files: list[tuple[str, int, int]] = []
    links: list[tuple[str, str]] = []
    for index in range(0, len(fields) - 4, 5):
        kind, mode_text, size_text, rel, target = fields[index : index + 5]
        mode = int(mode_text, 8)
        if kind == "d":
            directories.append((rel, mode))
        elif kind == "f":
            files.append((rel, mode, int(size_text)))
        elif kind == "l":
            links.append((rel, target))
        else:
            summary.skipped.append(rel)
    if not directories or directories[0][0] != "":
        raise NotADirectoryError(f"not a directory on the executor: {remote_dir!r}")
    for rel in [*(f[0] for f in files), *(link[0] for link in links)]:
        _member_path(rel)  # find -printf %P gives no such path; a liar's is refused
    await asyncio.to_thread(_make_dirs, root, directories)
    total = sum(size for _, _, size in files)
    done = 0

    async def fetch(rel: str, mode: int) -> None:
        nonlocal done
        data = await fs.read_file(posixpath.join(remote_dir, rel))
        await asyncio.to_thread(_write_local, os.path.join(root, rel), data, mode)
        done += len(data)
        if progress is not None:
            progress(done, max(total, done))

    await _bounded(concurrency, [partial(fetch, rel, mode) for rel, mode, _ in files])
    await asyncio.to_thread(_finish_local, root, directories, links)
    summary.files, summary.directories, summary.symlinks = len(files), len(directories), len(links)
    summary.bytes = done
    if progress is not None and not files:
        progress(0, 0)


# ---- the entry points --------------------------------------------------------------


async def upload(
    fs: TransferFileSystem,
    local_dir: str | os.PathLike[str],
    remote_dir: str,
    *,
    progress: Progress | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> TransferSummary:
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    root = os.fspath(local_dir)
    summary = TransferSummary()
    entries = await asyncio.to_thread(_walk, root, summary.skipped)
    if await has_gnu_tar(fs):
        summary.bytes = await _upload_tar(fs, root, entries, remote_dir, progress)
        _summarize(entries, summary)
    else:
        await _upload_files(fs, root, entries, remote_dir, progress, concurrency, summary)
    return summary


async def download(
    fs: TransferFileSystem,
    remote_dir: str,
    local_dir: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> TransferSummary:
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    root = os.fspath(local_dir)
    summary = TransferSummary()
    if await has_gnu_tar(fs):
        await _download_tar(fs, remote_dir, root, progress, summary)
    else:
        await _download_files(fs, remote_dir, root, progress, concurrency, summary)
    return summary
