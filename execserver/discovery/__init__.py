"""Capability discovery (skills) and executor config reading."""
