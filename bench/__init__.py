"""Benchmarks (pytest-benchmark) and the report that turns their JSON into tables and charts."""
