"""kolong's attention engine: masks, the kernels and the one table that chooses among them (`dispatch.py`).

It sits below `kolong.positions` and `kolong.models`, and imports neither.
"""
