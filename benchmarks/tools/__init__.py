"""Diagnostics beside `kolong bench` (docs/benchmarks.md), run from a checkout's root as
`python -m benchmarks.tools.NAME`."""
