"""The auto schedule of a matrix product stays within 1.25x of the tight bound in every regime.

Rows are the shapes of ``tests/cost/regimes.py`` (also the table of ``docs/cost.md``): the
three regimes of Al Daas et al.'s bound, both boundaries between them, and two fixed shapes
that cross regimes as ``P`` grows. The chosen schedule is compiled and its exact
``stats()`` compared with ``matmul_bound``; every ``dist="auto"`` tensor must hold one copy
of every element.
"""

from __future__ import annotations

import pytest

from .regimes import POWERS_OF_TWO, REGIMES, measure

CUBES = {8, 64, 512, 4096}


def _expected_case(regime: str, shape: tuple[int, int, int], P: int) -> int | None:
    """The regime the row's name promises (None: the fixed shapes cross regimes)."""
    d1, d2, d3 = sorted(shape, reverse=True)
    if regime == "boundary 1/2":
        assert P * d2 == d1
        return 1
    if regime == "boundary 2/3":
        assert P * d3 * d3 == d1 * d2
        return 2
    return {"square": 3, "one large": 1, "two large": 2}.get(regime)


@pytest.mark.parametrize("P", POWERS_OF_TWO)
@pytest.mark.parametrize("regime", list(REGIMES))
def test_auto_within_bound(regime, P):
    row = measure(regime, P)
    expected = _expected_case(regime, row.shape, P)
    if expected is not None:
        assert row.case == expected, row
    assert row.one_copy, row
    assert row.ratio >= 1 - 1e-9, row  # a plan below a lower bound would be a bug
    limit = 1.0 + 1e-9 if (regime == "square" and P in CUBES) else 1.25
    assert row.ratio <= limit, row
