"""Golden tests of the table-building formulas (kolong.extension.tables)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kolong.extension.tables import (
    copy_rows,
    extend_rows,
    interpolate_rows,
    interpolation_coordinates,
    last_rows,
    random_rows,
)


def table(n: int = 8, d: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def double_once(rows: torch.Tensor) -> torch.Tensor:
    """The paper's doubling written out: EMB_2n(2p) = EMB_n(p), EMB_2n(2p+1) = midpoint, last row repeated."""
    n = rows.shape[0]
    following = torch.cat([rows[1:], rows[-1:]])
    out = torch.empty(2 * n, rows.shape[1], dtype=rows.dtype)
    out[0::2] = rows
    out[1::2] = (rows + following) / 2
    return out


def test_doubling_keeps_even_rows_and_takes_midpoints():
    old = table()
    new = interpolate_rows(old, 16)
    assert torch.equal(new[0::2], old)  # EMB_2n(2p) == EMB_n(p)
    assert torch.equal(new[1:-1:2], (old[:-1] + old[1:]) / 2)  # EMB_2n(2p+1) == midpoint
    assert torch.equal(new, double_once(old))


def test_tail_rule_repeats_the_last_row_and_never_wraps():
    old = table()
    new = interpolate_rows(old, 16)
    assert torch.equal(new[15], old[7])
    assert not torch.allclose(new[15], (old[7] + old[0]) / 2)


@pytest.mark.parametrize("factor", [4, 8])
def test_repeated_doubling(factor):
    old = table()
    expected = old
    while expected.shape[0] < 8 * factor:
        expected = double_once(expected)
    new = interpolate_rows(old, 8 * factor)
    torch.testing.assert_close(new, expected, rtol=0, atol=1e-6)
    assert torch.equal(new[::factor], old)  # every k-th row is an original row, exactly
    # Rows past (n - 1) * k all repeat the last original row.
    assert torch.equal(new[7 * factor :], old[7].expand(factor, -1))


def test_quarter_rows_for_factor_four():
    old = table()
    new = interpolate_rows(old, 32)
    torch.testing.assert_close(new[1], 0.75 * old[0] + 0.25 * old[1])
    torch.testing.assert_close(new[3], 0.25 * old[0] + 0.75 * old[1])


def test_target_that_is_not_a_power_of_two_interpolates_between_the_surrounding_rows():
    old = table(n=4)
    new = interpolate_rows(old, 6)  # x_r = r * 4 / 6 = 0, 2/3, 4/3, 2, 8/3, 10/3 -> clamped at 3
    torch.testing.assert_close(
        interpolation_coordinates(4, 6), torch.tensor([0, 2 / 3, 4 / 3, 2, 8 / 3, 3.0], dtype=torch.float64)
    )
    torch.testing.assert_close(new[1], old[0] / 3 + old[1] * 2 / 3)
    torch.testing.assert_close(new[2], old[1] * 2 / 3 + old[2] / 3)
    assert torch.equal(new[3], old[2])
    torch.testing.assert_close(new[4], old[2] / 3 + old[3] * 2 / 3)
    assert torch.equal(new[5], old[3])


def test_copy_tiles_the_rows():
    old = table()
    new = copy_rows(old, 20)
    assert torch.equal(new[:8], old) and torch.equal(new[8:16], old) and torch.equal(new[16:], old[:4])


def test_last_repeats_the_final_row():
    old = table()
    new = last_rows(old, 12)
    assert torch.equal(new[:8], old) and torch.equal(new[8:], old[7].expand(4, -1))


def test_random_keeps_old_rows_and_draws_new_ones_with_the_given_std():
    old = table(n=8, d=256)
    new = random_rows(old, 4008, std=0.02, generator=torch.Generator().manual_seed(0))
    assert torch.equal(new[:8], old)
    assert abs(new[8:].std().item() - 0.02) < 0.001 and abs(new[8:].mean().item()) < 0.001


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("method", ["interpolate", "copy", "last", "random"])
def test_dtype_is_preserved(method, dtype):
    assert extend_rows(table().to(dtype), 16, method).dtype == dtype


def test_refusals():
    with pytest.raises(ValueError, match="more rows"):
        interpolate_rows(table(), 8)
    with pytest.raises(ValueError, match="unknown extension method"):
        extend_rows(table(), 16, "nearest")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 40), extra=st.integers(1, 200), seed=st.integers(0, 10_000))
def test_interpolated_rows_lie_between_their_neighbours(n, extra, seed):
    old = table(n=n, d=3, seed=seed)
    new_rows = n + extra
    new = interpolate_rows(old, new_rows)
    x = interpolation_coordinates(n, new_rows)
    lower = x.floor().long()
    upper = (lower + 1).clamp(max=n - 1)
    low = torch.minimum(old[lower], old[upper]) - 1e-6
    high = torch.maximum(old[lower], old[upper]) + 1e-6
    assert bool(((new >= low) & (new <= high)).all())
    # Rows that sample an integer coordinate are original rows, exactly.
    exact = x == x.floor()
    assert torch.equal(new[exact], old[x[exact].long()])
