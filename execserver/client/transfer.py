"""``fs.upload`` / ``fs.download``: a directory tree to and from the executor.

The protocol's file methods read and write file contents only: no mode bits,
no symlink creation, no ``readlink``. So the contents go through
``fs/createDirectory``, ``fs/writeFile`` and ``fs/readFile`` (``concurrency``
of them in flight: many small files are bound by round trips), and the rest
through commands on the executor, like ``run`` (under the file system's
sandbox, if it has one):

* modes: ``xargs -0 chmod MODE`` once per distinct mode (upload); download
  lists the tree with GNU ``find -printf`` (type, mode, size, path, link
  target), so it needs GNU find on the executor;
* symlinks are kept as symlinks: the link's own target text is copied as it
  is (``ln -sfn`` remotely, ``os.symlink`` locally), never followed, whether it
  points inside the tree, outside it, or nowhere. What it points to is not
  copied;
* other file types (fifos, sockets, devices) are skipped and named in
  ``TransferSummary.skipped``.

Existing files at the destination are overwritten; nothing else there is
removed.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Protocol

from execserver.aio.tasks import TaskSet
from execserver.client.errors import ExecServerError

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
# Told (bytes done, bytes total) after each file.
Progress = Callable[[int, int], object]

# $1 the tree. Type, octal mode, size, path relative to $1, link target; NUL-separated.
LIST_SCRIPT: Final = "exec find \"$1\" -printf '%y\\0%m\\0%s\\0%P\\0%l\\0'"


@dataclass
class TransferSummary:
    """What a transfer did."""

    files: int = 0
    directories: int = 0
    symlinks: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)


class TransferError(ExecServerError):
    """A step on the executor (chmod, ln, find) failed; ``detail`` is its stderr."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"{step} failed on the executor: {detail.strip() or 'no message'}")
        self.step = step
        self.detail = detail


class TransferFileSystem(Protocol):
    """What a transfer needs of ``client.fs`` (its client must have ``run``).
    Stated here rather than imported: fs.py offers upload/download itself."""

    sandbox: object

    @property
    def caller(self) -> object: ...

    async def create_directory(self, path: str) -> None: ...

    async def write_file(self, path: str, data: bytes) -> None: ...

    async def read_file(self, path: str) -> bytes: ...


async def _sh(fs: TransferFileSystem, step: str, script: str, args: list[str], stdin: bytes) -> str:
    run: Callable[..., Awaitable[Any]] | None = getattr(fs.caller, "run", None)
    if run is None:
        raise TypeError("upload/download need a client that can run commands (ExecServerClient)")
    result = await run(
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


async def _bounded(concurrency: int, jobs: Iterable[Callable[[], Awaitable[None]]]) -> None:
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
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


def _scan(
    root: str, skipped: list[str]
) -> tuple[list[tuple[str, int]], list[tuple[str, int, int]], list[tuple[str, str]]]:
    """Directories (mode), regular files (mode, size) and symlinks (target) under
    ``root``, as paths relative to it; anything else goes to ``skipped``."""
    if not os.path.isdir(root):
        raise NotADirectoryError(f"not a local directory: {root!r}")
    directories: list[tuple[str, int]] = [("", stat.S_IMODE(os.stat(root).st_mode))]
    files: list[tuple[str, int, int]] = []
    links: list[tuple[str, str]] = []
    # os.walk does not descend into symlinked directories (followlinks=False).
    for top, dirnames, filenames in os.walk(root):
        rel_top = os.path.relpath(top, root)
        rel_top = "" if rel_top == "." else rel_top
        for name in [*dirnames, *filenames]:
            rel = os.path.join(rel_top, name)
            st = os.lstat(os.path.join(root, rel))
            if stat.S_ISLNK(st.st_mode):
                links.append((rel, os.readlink(os.path.join(root, rel))))
            elif stat.S_ISDIR(st.st_mode):
                directories.append((rel, stat.S_IMODE(st.st_mode)))
            elif stat.S_ISREG(st.st_mode):
                files.append((rel, stat.S_IMODE(st.st_mode), st.st_size))
            else:
                skipped.append(rel)
    return directories, files, links


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


async def upload(
    fs: TransferFileSystem,
    local_dir: str | os.PathLike[str],
    remote_dir: str,
    *,
    progress: Progress | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> TransferSummary:
    root = os.fspath(local_dir)
    summary = TransferSummary()
    directories, files, links = await asyncio.to_thread(_scan, root, summary.skipped)
    total = sum(size for _, _, size in files)

    def remote(rel: str) -> str:
        return posixpath.join(remote_dir, rel) if rel else remote_dir

    # Leaves only: creating them creates their parents.
    parents = {posixpath.dirname(rel) for rel, _ in directories}
    leaves = [rel for rel, _ in directories if rel not in parents or rel == ""]
    await _bounded(concurrency, [partial(fs.create_directory, remote(rel)) for rel in leaves])

    done = 0

    async def send(rel: str, size: int) -> None:
        nonlocal done
        data = await asyncio.to_thread(_read_local, os.path.join(root, rel))
        await fs.write_file(remote(rel), data)
        done += len(data)
        summary.files += 1
        if progress is not None:
            progress(done, max(total, done))

    await _bounded(concurrency, [partial(send, rel, size) for rel, _, size in files])
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
    return summary


async def download(
    fs: TransferFileSystem,
    remote_dir: str,
    local_dir: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> TransferSummary:
    root = os.fspath(local_dir)
    listing = await _sh(fs, "find", LIST_SCRIPT, [remote_dir], b"")
    fields = listing.split("\0")
    summary = TransferSummary()
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
    await asyncio.to_thread(_make_dirs, root, directories)
    total = sum(size for _, _, size in files)
    done = 0

    async def fetch(rel: str, mode: int) -> None:
        nonlocal done
        data = await fs.read_file(posixpath.join(remote_dir, rel))
        await asyncio.to_thread(_write_local, os.path.join(root, rel), data, mode)
        done += len(data)
        summary.files += 1
        if progress is not None:
            progress(done, max(total, done))

    await _bounded(concurrency, [partial(fetch, rel, mode) for rel, mode, _ in files])
    await asyncio.to_thread(_finish_local, root, directories, links)
    summary.files, summary.directories, summary.symlinks = len(files), len(directories), len(links)
    summary.bytes = done
    if progress is not None and not files:
        progress(0, 0)
    return summary
