"""Capability discovery (skills) and executor config reading."""

__all__: list[str] = []
