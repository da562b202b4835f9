"""``python -m tests.support.netproxy_serve NAME=ADDR,... [serve flags]``: ``execserver serve``
with the managed-network proxy's resolver overrides injected.

The overrides make names resolve without DNS and exempt their addresses from
the local-address block, so they are a test hook that no flag or environment
variable can set: only code that builds the ``ServerConfig`` (this module) can.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence

from execserver.cli import build_parser, config_from_args, serve
from execserver.netproxy.resolver import parse_hosts


def command(hosts: Mapping[str, str]) -> list[str]:
    """The ``serve`` argv for tests.support.servers.start_server."""
    text = ",".join(f"{name}={address}" for name, address in hosts.items())
    return [sys.executable, "-m", "tests.support.netproxy_serve", text]


def main(argv: Sequence[str]) -> int:
    hosts, flags = argv[0], argv[1:]
    args = build_parser().parse_args(["serve", *flags])
    config = config_from_args(args)
    return serve(args, dataclasses.replace(config, netproxy_host_overrides=parse_hosts(hosts)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
