"""Executor-side HTTP client: the ``http/request`` method."""
