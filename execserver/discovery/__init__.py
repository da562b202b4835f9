"""Capability discovery (skills) and executor config reading (protocol §8.3, §8.22, §8.23)."""
