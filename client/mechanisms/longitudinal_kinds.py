"""Memoized heavy hitters and ranges."""
