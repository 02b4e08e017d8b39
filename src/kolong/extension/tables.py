"""Building a longer position table from a pretrained one.

Every function here takes the *real* rows of a learned absolute table, shape (n, d), and returns a
table of shape (new_rows, d) whose first rows are the old ones wherever the method keeps them. The
functions are pure tensor code (vectorised, no Python loop over rows), so extending a BERT-base
table to 4096 rows takes milliseconds.

`interpolate` generalises the paper's doubling (seeds.md §1):

    EMB_2n(2p)   = EMB_n(p)
    EMB_2n(2p+1) = (EMB_n(p) + EMB_n(p+1)) / 2,   with EMB_n(n) := EMB_n(n-1)   (tail rule)

Doubling m times equals sampling the piecewise-linear curve through the original rows at
x = r / 2^m and clamping x at n - 1. kolong uses that closed form for any target N:

    EMB_N(r) = (1 - w) EMB_n(floor(x)) + w EMB_n(floor(x) + 1),   x = min(r * n / N, n - 1),  w = x - floor(x)

so N = n * 2^m reproduces repeated doubling, and any other N interpolates linearly between the two
original rows that surround x. Rows past the last original row copy it; nothing wraps to row 0.
"""

from __future__ import annotations

import torch

METHODS = ("interpolate", "copy", "last", "random")


def _check(table: torch.Tensor, new_rows: int) -> None:
    if table.dim() != 2:
        raise ValueError(f"a position table has shape (rows, dim); got {tuple(table.shape)}")
    if new_rows <= table.shape[0]:
        raise ValueError(
            f"the new table must have more rows than the old one ({new_rows} <= {table.shape[0]})"
        )


def interpolation_coordinates(old_rows: int, new_rows: int) -> torch.Tensor:
    """x_r = min(r * n / N, n - 1): the original-table coordinate that row r of the new table samples."""
    rows = torch.arange(new_rows, dtype=torch.float64)
    return (rows * old_rows / new_rows).clamp(max=old_rows - 1)


def interpolate_rows(table: torch.Tensor, new_rows: int) -> torch.Tensor:
    """Linear interpolation of the rows (the paper's midpoint doubling, generalised; see module doc)."""
    _check(table, new_rows)
    n = table.shape[0]
    x = interpolation_coordinates(n, new_rows).to(table.device)
    lower = x.floor().long()
    upper = (lower + 1).clamp(max=n - 1)
    # Half-precision tables are interpolated in float32 and cast back once.
    compute_dtype = torch.promote_types(table.dtype, torch.float32)
    weight = (x - lower).to(compute_dtype).unsqueeze(1)  # (N, 1)
    rows = table.to(compute_dtype)
    out = rows[lower] * (1 - weight) + rows[upper] * weight  # (N, d)
    return out.to(table.dtype)


def copy_rows(table: torch.Tensor, new_rows: int) -> torch.Tensor:
    """Tile the table (Longformer): row r is row r mod n, so inputs of <= n tokens are unchanged."""
    _check(table, new_rows)
    index = torch.arange(new_rows, device=table.device) % table.shape[0]
    return table[index]  # advanced indexing already copies


def last_rows(table: torch.Tensor, new_rows: int) -> torch.Tensor:
    """Keep the n rows and repeat the last one for every new position."""
    _check(table, new_rows)
    index = torch.arange(new_rows, device=table.device).clamp(max=table.shape[0] - 1)
    return table[index]  # advanced indexing already copies


def random_rows(
    table: torch.Tensor, new_rows: int, std: float = 0.02, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Keep the n rows; new rows ~ N(0, std) (the model's initializer_range). A baseline for experiments."""
    _check(table, new_rows)
    n, dim = table.shape
    fresh = torch.randn(new_rows - n, dim, generator=generator, dtype=torch.float32) * std
    return torch.cat([table, fresh.to(device=table.device, dtype=table.dtype)], dim=0)


def extend_rows(
    table: torch.Tensor,
    new_rows: int,
    method: str = "interpolate",
    std: float = 0.02,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Dispatch on `method` (one of METHODS)."""
    if method == "interpolate":
        return interpolate_rows(table, new_rows)
    if method == "copy":
        return copy_rows(table, new_rows)
    if method == "last":
        return last_rows(table, new_rows)
    if method == "random":
        return random_rows(table, new_rows, std=std, generator=generator)
    raise ValueError(f"unknown extension method {method!r}; choose one of {', '.join(METHODS)}")
