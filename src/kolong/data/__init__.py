"""Data readers and built-in samples."""
