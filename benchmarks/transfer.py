"""Directory upload and download through ``client.fs`` to a local daemon, against
``tar c | ssh tar x`` and ``ssh tar c | tar x`` through a private sshd on the
same loopback (what a harness author would otherwise use; it needs
openssh-server, else that baseline is skipped) and a plain local ``tar c | tar
x`` pipe. Not part of ``make bench``.

    .venv/bin/python -m benchmarks.transfer [--files 10000] [--size 10240] [--runs 3] [--dir D]

Both copies go from and to the same directory tree (``--dir``: where; tmpfs
takes the disk out of it); the daemon is a private ``execserver serve`` on
127.0.0.1 (``execserver.serve_local``). The tree is ``--files`` files of
``--size`` bytes in 100 directories (default ~100 MB). Each figure is the best
of ``--runs``, each run into a fresh destination.

Figures on the shared 2-vCPU development VM, 2026-12-06 (10 000 files of 10
KiB, 102.4 MB, best of 3):

    --dir /dev/shm (tmpfs)   tar pipe 0.24 s   tar | ssh up 0.92 s, down 0.94 s
      fs.upload   0.79 s  (0.85x tar | ssh)
      fs.download 1.35 s  (1.43x tar | ssh)
    its shared disk          tar pipe 3.99 s   tar | ssh up 3.83 s, down 3.15 s
      fs.upload   3.20 s  (0.84x tar | ssh)
      fs.download 3.62 s  (1.15x tar | ssh)

An earlier run on the disk, quieter: upload 0.90 s (0.70x tar | ssh), download
1.71 s (1.48x). The download's time goes to Python's extraction (``tarfile``
and the path checks; 0.57 s for this tree on tmpfs against GNU tar's 0.24 s)
and the 8 KiB output events it is fed from.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
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


class PrivateSshd:
    """An sshd of our own on 127.0.0.1 (a free port, its own host and client keys,
    only this user's key accepted) for the ``tar | ssh`` baseline: what a harness
    author compares a copy to. None of the host's ssh configuration is used."""

    def __init__(self, directory: Path) -> None:
        sshd = shutil.which("sshd") or (
            "/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None
        )
        if sshd is None or shutil.which("ssh") is None:
            raise FileNotFoundError("sshd (openssh-server) and ssh are needed")
        self.dir = directory
        directory.mkdir(mode=0o700)
        for name in ("host", "client"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / name)],
                check=True,
            )
        shutil.copy(directory / "client.pub", directory / "authorized_keys")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = directory / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {directory / 'host'}\n"
            f"AuthorizedKeysFile {directory / 'authorized_keys'}\nPidFile {directory / 'pid'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n"
        )
        os.makedirs("/run/sshd", exist_ok=True)  # its privilege separation directory
        self.process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)])
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("the private sshd did not start")
            time.sleep(0.05)

    def command(self, remote: str) -> str:
        options = (
            f"-p {self.port} -i '{self.dir / 'client'}' -o BatchMode=yes "
            "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
        )
        return f'ssh {options} 127.0.0.1 "{remote}"'

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def tar_pipe(
    source: Path, destination: Path, sshd: PrivateSshd | None = None, *, upload: bool = True
) -> float:
    """``tar c | tar x`` from ``source`` into ``destination``; with ``sshd`` one
    side runs through ssh: the extracting one for an upload, the archiving one
    for a download."""
    destination.mkdir(parents=True)
    create = f"tar cf - -C '{source}' ."
    extract = f"tar xf - -C '{destination}'"
    if sshd is not None:
        if upload:
            extract = sshd.command(extract)
        else:
            create = sshd.command(create)
    started = time.perf_counter()
    subprocess.run(f"{create} | {extract}", shell=True, check=True)
    return time.perf_counter() - started


async def measure(
    source: Path, work: Path, runs: int, sshd: PrivateSshd | None
) -> dict[str, float]:
    """Best of ``runs`` for each copy, interleaved (each run: the tar pipe, tar |
    ssh both ways, the upload, the download) so that the disk's state weighs on
    all alike; dirty pages are flushed before each step and not timed."""
    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, float("inf")), seconds)

    async with execserver.serve_local() as client:
        for run in range(runs):
            os.sync()
            keep("tar_pipe", tar_pipe(source, work / f"tar{run}"))
            if sshd is not None:
                os.sync()
                keep("ssh_up", tar_pipe(source, work / f"sshup{run}", sshd))
                os.sync()
                keep("ssh_down", tar_pipe(source, work / f"sshdown{run}", sshd, upload=False))
            os.sync()
            remote = work / f"up{run}"
            started = time.perf_counter()
            await client.fs.upload(source, str(remote))
            keep("upload", time.perf_counter() - started)
            os.sync()
            started = time.perf_counter()
            await client.fs.download(str(remote), work / f"down{run}")
            keep("download", time.perf_counter() - started)
            for name in ("tar", "sshup", "sshdown", "up", "down"):
                shutil.rmtree(work / f"{name}{run}", ignore_errors=True)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=10 * 1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", help="where the trees go (default: a new temporary directory)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="execserver-transfer-", dir=args.dir))
    sshd: PrivateSshd | None = None
    try:
        try:
            sshd = PrivateSshd(work / "sshd")
        except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
            print(f"no tar | ssh baseline: {exc} (apt-get install openssh-server)")
        total = make_tree(work / "src", args.files, args.size)
        best = asyncio.run(measure(work / "src", work, args.runs, sshd))
        mb = total / 1e6
        print(f"tree: {args.files} files, {mb:.1f} MB (best of {args.runs})")
        lines = [("tar c | tar x (local pipe):", best["tar_pipe"], "")]
        if sshd is not None:
            lines += [
                ("tar c | ssh tar x:", best["ssh_up"], ""),
                ("ssh tar c | tar x:", best["ssh_down"], ""),
            ]
        copies = (("fs.upload:", "upload", "ssh_up"), ("fs.download:", "download", "ssh_down"))
        for name, key, against in copies:
            ratio = f"({best[key] / best['tar_pipe']:.2f}x the pipe"
            if against in best:
                ratio += f", {best[key] / best[against]:.2f}x tar | ssh"
            lines.append((name, best[key], ratio + ")"))
        for name, seconds, note in lines:
            print(f"{name:28s} {seconds:6.2f} s  {mb / seconds:7.1f} MB/s  {note}".rstrip())
    finally:
        if sshd is not None:
            sshd.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
