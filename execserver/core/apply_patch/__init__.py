"""apply_patch: parser, matcher and applier over an executor's file system
(core-client.md §7)."""
