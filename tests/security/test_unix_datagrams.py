"""Restricted network: no datagram reaches a host unix socket (``/dev/log``, the
journal, ``NOTIFY_SOCKET``...). ``sendmsg`` with a destination address needs no
``connect`` and seccomp cannot read the address, so AF_UNIX datagram sockets
are refused outright (``socket`` and ``socketpair``); stream socketpairs keep
working. The same holds under a managed proxy.

Measured on the reference 0.169.0 (interop): the datagram arrives there.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.attacks import (
    ROOT_READ,
    attack,
    python,
    received_datagrams,
    sandbox,
    short_tmp_dir,
    unix_dgram_service,
)
from tests.support.netproxy import proxy_params
from tests.support.rpc import connect
from tests.support.servers import start_server

PAYLOAD = r"""
import errno, socket, sys
target = sys.argv[1]

def attempt(name, func):
    try:
        print(f"{name}={func()}", flush=True)
    except OSError as exc:
        print(f"{name}={errno.errorcode.get(exc.errno, exc.errno)}", flush=True)

def dgram_socket():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    return s.sendmsg([b"<1>from socket"], [], 0, target)

def dgram_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    return a.sendmsg([b"<1>from pair"], [], 0, target)

def stream_pair():
    a, b = socket.socketpair()
    a.sendmsg([b"hello"])
    return b.recv(5).decode()

def stream_pair_addressed():
    a, b = socket.socketpair()
    return a.sendmsg([b"<1>addressed"], [], 0, target)

attempt("dgram_socket", dgram_socket)
attempt("dgram_pair", dgram_pair)
attempt("stream_pair", stream_pair)
attempt("stream_pair_addressed", stream_pair_addressed)
"""


@pytest.mark.parametrize("managed", [False, True])
async def test_no_datagram_reaches_a_host_unix_socket(tmp_path: Path, managed: bool) -> None:
    sockets = Path(short_tmp_dir())
    extra: dict[str, Any] = (
        {
            "networkProxy": proxy_params(domains={"localhost": "allow"}),
            "enforceManagedNetwork": True,
        }
        if managed
        else {}
    )
    try:
        with unix_dgram_service(sockets, "log") as log:
            async with start_server("execserver") as server, connect(server.url) as client:
                result = await attack(
                    client,
                    python(PAYLOAD, str(sockets / "log")),
                    cwd=tmp_path,
                    context=sandbox([ROOT_READ]),
                    **extra,
                )
            arrived = received_datagrams(log)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    assert arrived == [], result.output
    assert result.marker("dgram_socket") == "EPERM", result.output
    assert result.marker("dgram_pair") == "EPERM", result.output
    assert result.marker("stream_pair") == "hello", result.output
    assert result.marker("stream_pair_addressed") in ("EOPNOTSUPP", "EISCONN"), result.output


@pytest.mark.interop
async def test_reference_delivers_the_datagram(tmp_path: Path) -> None:
    sockets = Path(short_tmp_dir())
    try:
        with unix_dgram_service(sockets, "log") as log:
            async with start_server("reference") as server, connect(server.url) as client:
                await attack(
                    client,
                    python(PAYLOAD, str(sockets / "log")),
                    cwd=tmp_path,
                    context=sandbox([ROOT_READ]),
                )
            arrived = received_datagrams(log)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    assert b"<1>from socket" in arrived
