"""Benchmarks of this collection against the tools users would pick instead (see bench/README.md).

Not part of the collection build (galaxy.yml ``build_ignore``); run with ``make bench``.
"""
