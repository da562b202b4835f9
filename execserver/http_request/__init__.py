"""Executor-side HTTP client: the ``http/request`` method (protocol §8.21, §9.4)."""
