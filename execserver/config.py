"""One configuration object, built from the command line and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_LISTEN = "ws://127.0.0.1:0"
# The reference keeps detached sessions and exited processes for about 80 s (protocol §5.2, §8.4.3).
DEFAULT_SESSION_TTL_S = 80.0
DEFAULT_EXITED_RETENTION_S = 80.0
# Inbound limits of the reference: < 16 MiB per frame, 64 MiB per reassembled message (§1.2).
MAX_INBOUND_MESSAGE_BYTES = 64 * 1024 * 1024
PING_INTERVAL_S = 30.0


@dataclass(frozen=True)
class ServerConfig:
    listen: str = DEFAULT_LISTEN
    concurrent_requests: int = 1
    exit_on_stdin_close: bool = False
    session_ttl_s: float = DEFAULT_SESSION_TTL_S
    exited_process_retention_s: float = DEFAULT_EXITED_RETENTION_S
    max_message_bytes: int = MAX_INBOUND_MESSAGE_BYTES
    ping_interval_s: float = PING_INTERVAL_S
    outbound_queue_messages: int = 1024
    # Filled in by later features (auth, limits, audit); kept here so there is one config.
    extra: dict[str, object] = field(default_factory=dict)
