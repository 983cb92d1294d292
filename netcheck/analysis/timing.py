"""Timing model (pure): log service times from raw timing rows, and median polish.

detection.md §2, "Measurement": for node ``i`` in round ``r`` the coordinator stamps
the release write and the result arrival on its own monotonic clock, and knows the
node's application-level echo RTT. The service-time estimate is::

    y[i, r] = log(t_result - t_release - rtt_i)        (seconds inside the log)

Logs turn a multiplicative slowdown (a shared GPU serving k batches takes
``1 + beta * (k - 1)`` times as long) into an additive effect, and make log-normal
timing noise Gaussian. :func:`median_polish` then removes per-node speed and per-round
effects, leaving residuals in which contention between nodes shows up.

The one definition of a *loaded* node (:func:`effectively_loaded`), of a result's
arrival (:func:`result_arrived_ns`) and of service time (:meth:`TimingRow.service_s`)
lives here; the detectors (:mod:`netcheck.analysis.screening`), the flags' evidence and
the dashboard's evidence plots all go through :func:`stored_timing_row`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MIN_SERVICE_S = 1e-6  # service estimates at or below zero are clamped here before the log


@dataclass(frozen=True)
class TimingRow:
    """One node in one round, as the coordinator stores it (``results`` table).

    ``loaded``: the node's schedule bit (it was sent work). ``released_ns`` /
    ``arrived_ns``: coordinator ``time.monotonic_ns()`` at the release write and at the
    result's arrival (``None``: not released / no result). ``rtt_s``: the node's
    application-level echo RTT in seconds (min of a few echoes), ``None`` if unknown.
    """

    round_id: str
    node_key: str
    loaded: bool
    released_ns: int | None
    arrived_ns: int | None
    rtt_s: float | None

    def service_s(self) -> float | None:
        """``arrived - released - rtt`` in seconds, or ``None`` without a result."""
        if not self.loaded or self.released_ns is None or self.arrived_ns is None:
            return None
        return (self.arrived_ns - self.released_ns) / 1e9 - (self.rtt_s or 0.0)


def effectively_loaded(
    scheduled: bool,
    released_ns: int | None,
    acked_ns: object | None = None,
    job_written_ns: object | None = None,
) -> bool:
    """The one definition of *loaded* (detectors and dashboard alike): the node's
    schedule bit was set (it was sent work) *and* its job was written to it in full
    (its stamp ``job_written_ns``; an ack stamp ``acked_ns`` or a release
    ``released_ns`` imply it, and rows stored before that stamp have only those). A
    node skipped by the planner, or gone before its job was written, computed nothing.
    One that held its job and left before its release, acknowledged or not, is loaded,
    without a result (censored at the deadline): leaving when co-loaded must look slow
    exactly when co-loaded, as dropping the result does (docs/detection.md, "What
    escapes")."""
    return bool(scheduled) and (
        released_ns is not None or acked_ns is not None or job_written_ns is not None
    )


def result_arrived_ns(arrived_ns: int | None, commitment: object) -> int | None:
    """Arrival of a *result*: a node's error reply carries no commitment and is no
    result (its arrival is not a service time)."""
    return arrived_ns if commitment else None


def stored_timing_row(
    round_id: str, node_key: str, scheduled: bool, row: Mapping[str, Any]
) -> TimingRow:
    """:class:`TimingRow` of one stored ``results`` row (``released_ns``, ``arrived_ns``,
    ``rtt_s``, ``commitment``, and ``acked_ns`` and ``job_written_ns`` where the reader
    took them from the row's ``extra``), raw times unchanged, with :func:`effectively_loaded` and
    :func:`result_arrived_ns` applied; ``scheduled``: the node's schedule bit (or, where no
    schedule is stored, whether it had an assignment)."""
    released = row.get("released_ns")
    return TimingRow(
        round_id,
        node_key,
        effectively_loaded(scheduled, released, row.get("acked_ns"), row.get("job_written_ns")),
        released,
        result_arrived_ns(row.get("arrived_ns"), row.get("commitment")),
        row.get("rtt_s"),
    )


@dataclass(frozen=True)
class TimingMatrix:
    """Log service times of ``n`` nodes over ``R`` rounds.

    ``y``: shape ``(n, R)``, ``log(service_s)``, NaN where the node was not loaded (or
    returned nothing and no deadline was given). ``loaded``: shape ``(n, R)`` bool, the
    schedule bits. ``censored``: ``(n, R)`` bool, entries set to ``log(deadline_s)``
    because a loaded node returned no result. Row/column order: ``node_keys`` /
    ``round_ids``.
    """

    y: FloatArray
    loaded: BoolArray
    censored: BoolArray
    node_keys: tuple[str, ...]
    round_ids: tuple[str, ...]


def log_service_matrix(
    rows: Iterable[TimingRow],
    node_keys: Sequence[str],
    round_ids: Sequence[str],
    deadline_s: float | None = None,
) -> TimingMatrix:
    """Build the ``y`` matrix ``log(t_result - t_release - rtt)`` from raw rows.

    A loaded node that returned no result is *censored*: it took at least the deadline,
    so with ``deadline_s`` given its entry is ``log(deadline_s)`` (an adversary that
    drops results when co-loaded then looks slow exactly when co-loaded, which is what
    the detectors test); without ``deadline_s`` it is NaN. Service estimates at or below
    zero are clamped to 1 µs. Rows for unknown nodes or rounds are ignored.

    Raises:
        ValueError: if ``deadline_s`` is not positive.
    """
    if deadline_s is not None and deadline_s <= 0:
        raise ValueError("deadline_s must be positive")
    node_index = {key: i for i, key in enumerate(node_keys)}
    round_index = {rid: r for r, rid in enumerate(round_ids)}
    shape = (len(node_keys), len(round_ids))
    y = np.full(shape, np.nan)
    loaded = np.zeros(shape, dtype=bool)
    censored = np.zeros(shape, dtype=bool)
    for row in rows:
        i = node_index.get(row.node_key)
        r = round_index.get(row.round_id)
        if i is None or r is None or not row.loaded:
            continue
        loaded[i, r] = True
        service = row.service_s()
        if service is not None:
            y[i, r] = math.log(max(service, MIN_SERVICE_S))
        elif deadline_s is not None:
            y[i, r] = math.log(deadline_s)
            censored[i, r] = True
    return TimingMatrix(y, loaded, censored, tuple(node_keys), tuple(round_ids))


@dataclass(frozen=True)
class Polish:
    """Result of :func:`median_polish`: ``y = overall + row[:, None] + col[None, :] + resid``
    at every observed entry; ``resid`` is NaN where ``y`` is."""

    overall: float
    row_effects: FloatArray
    col_effects: FloatArray
    residuals: FloatArray
    iterations: int


def _nanmedian_or_zero(a: FloatArray, axis: int) -> FloatArray:
    """``nanmedian`` along ``axis``; 0 for all-NaN slices (no warning)."""
    observed = np.isfinite(a)
    out = np.zeros(a.shape[1 - axis])
    has = observed.any(axis=axis)
    if has.any():
        sub = a[has, :] if axis == 1 else a[:, has]
        out[has] = np.nanmedian(sub, axis=axis)
    return out


def median_polish(
    y: FloatArray, max_iter: int = 10, tol: float = 1e-9, col_prior_cells: int = 0
) -> Polish:
    """Tukey's median polish of a two-way table with missing cells, optionally with
    column effects shrunk toward 0.

    Source: J. W. Tukey, *Exploratory Data Analysis*, Addison-Wesley 1977, ch. 11
    (also Mosteller & Tukey 1977). Alternately sweeps row medians and column medians
    out of the table (ignoring NaN), moving the median of the effects into the overall
    term each time, until no sweep changes the residuals by more than ``tol`` (in the
    units of ``y``) or ``max_iter`` full sweeps were made. Robust to a minority of
    outlying cells, unlike a least-squares two-way fit.

    ``col_prior_cells = k > 0``: the column sweep minimizes the least-absolute-deviation
    fit plus ``k * |col effect|`` (an L1 penalty on each column effect: the LAD-lasso of
    H. Wang, G. Li & G. Jiang, "Robust regression shrinkage and consistent variable
    selection through the LAD-Lasso", *J. Business & Economic Statistics* 25 (2007)
    347-355, whose criterion is an unpenalized LAD fit on data augmented with
    pseudo-observations). Its exact coordinate step is the median of the column's
    residuals together with ``k`` pseudo-cells at the column's current effect
    negated, i.e. at a total column effect of 0. A column effect then needs a majority
    against ``k`` cells at 0: ``m`` cells of which ``K`` share one shift move it only if
    ``K > m - K + k``; a column with no cells gets effect 0. Why the detectors need it
    (rounds = columns): with ~3 loaded nodes in a round, two identities of one farm are
    the median and Tukey's sweep reads their contention as the round's effect (the
    honest node gets the negative residual, the farm none). ``k = 0`` is Tukey's
    polish.

    Args:
        y: shape ``(n_nodes, n_rounds)``, NaN = missing.
        col_prior_cells: ``k`` above (0 = none).
    Returns:
        :class:`Polish`, with ``y == overall + row + col + residuals`` on observed cells.
    Raises:
        ValueError: if ``y`` is not 2-D or ``col_prior_cells`` is negative.
    """
    if y.ndim != 2:
        raise ValueError("y must be a 2-D array")
    if col_prior_cells < 0:
        raise ValueError("col_prior_cells must be >= 0")
    resid = np.array(y, dtype=np.float64)
    row = np.zeros(resid.shape[0])
    col = np.zeros(resid.shape[1])
    overall = 0.0
    iterations = 0
    for iterations in range(1, max_iter + 1):  # noqa: B007 (reported)
        rmed = _nanmedian_or_zero(resid, axis=1)
        resid -= rmed[:, None]
        row += rmed
        shift = float(np.median(col)) if col.size else 0.0
        col -= shift
        overall += shift
        if col_prior_cells:
            prior = np.broadcast_to(-col, (col_prior_cells, col.size))
            cmed = np.nanmedian(np.vstack([resid, prior]), axis=0)
        else:
            cmed = _nanmedian_or_zero(resid, axis=0)
        resid -= cmed[None, :]
        col += cmed
        shift = float(np.median(row)) if row.size else 0.0
        row -= shift
        overall += shift
        change = max(
            float(np.max(np.abs(rmed))) if rmed.size else 0.0,
            float(np.max(np.abs(cmed))) if cmed.size else 0.0,
        )
        if change <= tol:
            break
    return Polish(overall, row, col, resid, iterations)
