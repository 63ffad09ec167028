"""Benchmarks of jupyter_agents against stock Jupyter terminals (issue 8).

Run ``bench/run`` (full, writes BENCHMARKS.md) or ``bench/run --quick`` (CI). See
:mod:`bench.suite`.
"""
