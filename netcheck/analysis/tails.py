"""Student-t and normal upper tails (:mod:`scipy.stats`), elementwise, with netcheck's
NaN conventions; used by the detectors (:mod:`netcheck.analysis.detector_a`) and the
confirmation test (:mod:`netcheck.analysis.confirm`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.stats import norm
from scipy.stats import t as student_t

FloatArray = npt.NDArray[np.float64]


def t_sf(t: FloatArray | float, df: FloatArray | float) -> FloatArray:
    """One-sided upper tail ``P(T > t)`` of Student's t with ``df`` (may be fractional),
    elementwise: :data:`scipy.stats.t` ``.sf``. NaN where ``t`` or ``df`` is not finite
    or ``df <= 0``."""
    t_arr, df_arr = np.broadcast_arrays(np.asarray(t, float), np.asarray(df, float))
    ok = np.isfinite(t_arr) & np.isfinite(df_arr) & (df_arr > 0)
    p = student_t.sf(np.where(ok, t_arr, 0.0), np.where(ok, df_arr, 1.0))
    return np.asarray(np.where(ok, p, np.nan), dtype=np.float64)


def normal_sf(z: FloatArray | float) -> FloatArray:
    """``P(Z > z)`` for a standard normal, elementwise (:data:`scipy.stats.norm` ``.sf``)."""
    return np.asarray(norm.sf(np.asarray(z, float)), dtype=np.float64)


def t_isf(p: float, df: float) -> float:
    """``t`` with ``P(T > t) = p`` for Student's t (:data:`scipy.stats.t` ``.isf``)."""
    return float(student_t.isf(p, df))
