"""Directory upload through ``client.fs.upload`` to a local daemon, against
``tar c | tar x`` through a local pipe as the baseline (no ssh on this host, so
no scp/rsync-over-ssh figure). Not part of ``make bench``.

    .venv/bin/python -m benchmarks.transfer [--files 10000] [--size 10240] [--concurrency 16]

Both copies go from and to the same local disk; the daemon is a private
``execserver serve`` on 127.0.0.1 (``execserver.serve_local``). The tree is
``--files`` files of ``--size`` bytes in 100 directories (default ~100 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import execserver


def make_tree(root: Path, files: int, size: int) -> int:
    payload = os.urandom(size)
    for index in range(files):
        directory = root / f"d{index % 100:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{index:05d}").write_bytes(payload)
    return files * size


def tar_pipe(source: Path, destination: Path) -> float:
    destination.mkdir(parents=True)
    started = time.perf_counter()
    subprocess.run(
        f"tar cf - -C '{source}' . | tar xf - -C '{destination}'", shell=True, check=True
    )
    return time.perf_counter() - started


async def upload(source: Path, destination: Path, concurrency: int) -> float:
    async with execserver.serve_local() as client:
        started = time.perf_counter()
        await client.fs.upload(source, str(destination), concurrency=concurrency)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=10 * 1024)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="execserver-transfer-"))
    try:
        total = make_tree(work / "src", args.files, args.size)
        baseline = tar_pipe(work / "src", work / "tar")
        ours = asyncio.run(upload(work / "src", work / "up", args.concurrency))
        mb = total / 1e6
        print(f"tree: {args.files} files, {mb:.1f} MB")
        print(f"tar c | tar x (local pipe): {baseline:6.2f} s  {mb / baseline:7.1f} MB/s")
        print(
            f"fs.upload (concurrency {args.concurrency}): {ours:6.2f} s  {mb / ours:7.1f} MB/s  "
            f"{args.files / ours:7.0f} files/s  ({ours / baseline:.1f}x tar)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
