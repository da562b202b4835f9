"""Assembles the method table from every service that registers methods."""

from __future__ import annotations

from execserver.discovery import service as discovery
from execserver.fs import service as fs
from execserver.http_request import service as http_request
from execserver.netproxy import service as netproxy
from execserver.processes import service as processes
from execserver.server import environment
from execserver.server.rpc import MethodTable

__all__ = ["build_method_table"]


def build_method_table() -> MethodTable:
    table = MethodTable()
    environment.register(table)
    processes.register(table)
    fs.register(table)
    http_request.register(table)
    discovery.register(table)
    netproxy.register(table)
    return table
