"""Benchmarks: kolong and its reference measured side by side in one run."""
