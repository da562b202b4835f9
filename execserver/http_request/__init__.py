"""Executor-side HTTP client: the ``http/request`` method."""

__all__: list[str] = []
