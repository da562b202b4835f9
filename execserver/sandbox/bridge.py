"""In-sandbox bridge: loopback TCP ports -> the process's proxy on unix sockets.

Run inside bwrap (own network namespace, only ``lo``) as
``python -I -S bridge.py [--hold-fd N ...] --route PORT=SOCKET [--route ...] --
COMMAND...``.
Stdlib only, no execserver import (same reasons as sandbox/launcher.py).

It listens on 127.0.0.1:PORT *inside* the namespace (the same port the proxy
variables name, so the child's environment needs no rewriting), forks a
forwarder that relays each connection to SOCKET (the proxy's unix socket, as
``/proc/self/fd/N/NAME`` through the socket directory's descriptor ``N`` that
the daemon passed: see proxy_routed.py), and execs COMMAND, which is
sandbox/launcher.py applying the proxy-routed seccomp filter. Every
``--hold-fd`` descriptor is the forwarder's alone: made close-on-exec before
the exec, so the command never inherits it. The forwarder itself is not filtered (it must
accept), but everything it can reach is the namespace's loopback and SOCKET.
It dies with the command (PR_SET_PDEATHSIG, and bwrap's pid namespace).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
EXIT_SETUP_FAILED = 125


def _parse(argv: list[str]) -> tuple[list[tuple[int, str]], list[int], list[str]]:
    routes: list[tuple[int, str]] = []
    held: list[int] = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] not in ("--route", "--hold-fd") or i + 1 >= len(argv):
            raise ValueError(f"unexpected argument {argv[i]!r}")
        if argv[i] == "--hold-fd":
            held.append(int(argv[i + 1]))
        else:
            port, _, path = argv[i + 1].partition("=")
            routes.append((int(port), path))
        i += 2
    command = argv[i + 1 :]
    if not command:
        raise ValueError("missing command")
    return routes, held, command


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _serve_one(conn: socket.socket, path: str) -> None:
    try:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(path)
    except OSError:
        conn.close()
        return
    back = threading.Thread(target=_copy, args=(upstream, conn), daemon=True)
    back.start()
    _copy(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def _accept_loop(listener: socket.socket, path: str) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_one, args=(conn, path), daemon=True).start()


def _forwarder(listeners: list[tuple[socket.socket, str]]) -> None:
    # Never hold the command's output pipes: process/closed waits for their EOF.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    threads = [threading.Thread(target=_accept_loop, args=item, daemon=True) for item in listeners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main(argv: list[str]) -> int:
    try:
        routes, held, command = _parse(argv)
        for fd in held:
            # The forwarder (forked below) keeps it; the command's exec drops it.
            os.set_inheritable(fd, False)
        listeners = []
        for port, path in routes:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen(128)
            listeners.append((listener, path))
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"execserver-sandbox: failed to start the proxy bridge: {exc}\n")
        return EXIT_SETUP_FAILED
    parent = os.getpid()
    if os.fork() == 0:
        try:
            # Die with the command; checked after arming, so no exit is missed.
            libc = ctypes.CDLL(None)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            # Not dumpable: the (filtered) command cannot write our memory through
            # /proc/PID/mem, which seccomp's ptrace ban does not cover.
            libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
            if os.getppid() == parent:
                _forwarder(listeners)
        finally:
            os._exit(0)
    for listener, _ in listeners:
        listener.close()
    os.execv(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
