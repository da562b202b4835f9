"""execserver: a wire-compatible Codex exec-server daemon and its core-side client."""

__version__ = "0.1.0"

# The protocol version we are wire-compatible with (reported as executorVersion).
REFERENCE_VERSION = "0.169.0"
