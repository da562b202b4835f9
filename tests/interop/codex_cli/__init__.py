"""Drive the real codex 0.169.0 CLI against an exec-server: a mock Responses-API
model, an isolated ``$CODEX_HOME`` harness and a JSON-RPC logging proxy."""
