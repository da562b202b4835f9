"""Unified exec: the model-facing ``exec_command`` / ``write_stdin`` tools over
a remote executor (core-client.md §5)."""
