"""Benchmarks that print tables (speed goals live here, never in timed tests)."""
