"""The real servers the tests start: ours and the reference, on 127.0.0.1.

The starter itself is scripts/servers.py (the benchmarks use it too, without
importing the tests); this module is where the tests import it from.
"""

from __future__ import annotations

from scripts.servers import (
    PROJECT_ROOT,
    ReferenceUnavailable,
    RunningServer,
    execserver_command,
    reference_binary,
    reference_command,
    start_server,
    stop_process,
)

__all__ = [
    "PROJECT_ROOT",
    "ReferenceUnavailable",
    "RunningServer",
    "execserver_command",
    "reference_binary",
    "reference_command",
    "start_server",
    "stop_process",
]
