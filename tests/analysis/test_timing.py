"""Tests for netcheck.analysis.timing: the y matrix and median polish."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netcheck.analysis.timing import TimingRow, log_service_matrix, median_polish


def test_median_polish_removes_additive_effects_exactly() -> None:
    """A noiseless row + column table polishes to zero residuals and exact fits."""
    rng = np.random.default_rng(1)
    rows, cols = rng.normal(size=7), rng.normal(size=5)
    y = 3.0 + rows[:, None] + cols[None, :]
    pol = median_polish(y)
    assert np.allclose(pol.residuals, 0.0, atol=1e-12)
    fit = pol.overall + pol.row_effects[:, None] + pol.col_effects[None, :]
    assert np.allclose(fit, y)


def test_median_polish_with_missing_cells() -> None:
    """NaN cells stay NaN and do not disturb the fit of the others."""
    rng = np.random.default_rng(2)
    y = rng.normal(size=(6, 8))[:, :1] + rng.normal(size=(1, 8))
    y[0, 3] = y[4, 1] = np.nan
    pol = median_polish(y)
    assert np.isnan(pol.residuals[0, 3]) and np.isnan(pol.residuals[4, 1])
    assert np.nanmax(np.abs(pol.residuals)) < 1e-9


def test_median_polish_is_robust_to_one_outlier() -> None:
    """A single huge cell shows up in its residual, not in the effects."""
    y = np.zeros((5, 5))
    y[2, 2] = 100.0
    pol = median_polish(y)
    assert pol.residuals[2, 2] == pytest.approx(100.0)
    assert np.allclose(pol.row_effects, 0) and np.allclose(pol.col_effects, 0)


def test_log_service_matrix_subtracts_rtt_and_censors() -> None:
    """y = log(arrival - release - rtt); a missing loaded result is censored at the deadline."""
    rows = [
        TimingRow("r1", "a", True, 1_000_000_000, 3_100_000_000, 0.1),
        TimingRow("r1", "b", True, 0, None, 0.05),
        TimingRow("r1", "c", False, None, None, 0.05),
    ]
    mat = log_service_matrix(rows, ["a", "b", "c"], ["r1"], deadline_s=6.0)
    assert mat.y[0, 0] == pytest.approx(math.log(2.0))
    assert mat.y[1, 0] == pytest.approx(math.log(6.0)) and mat.censored[1, 0]
    assert np.isnan(mat.y[2, 0]) and not mat.loaded[2, 0]
    assert list(mat.loaded[:, 0]) == [True, True, False]
