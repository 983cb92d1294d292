"""Prometheus metrics of the coordinator (prometheus-client), served at ``GET /metrics``.

Two sources:

- Round metrics, updated by :func:`observe_round` (a round-finished hook of the round
  runner, called once per finished round): ``netcheck_rounds_total{profile,status}``,
  ``netcheck_verdicts_total{profile,verdict}``, and the histograms
  ``netcheck_release_skew_seconds`` (first release write to last) and
  ``netcheck_round_duration_seconds`` (plan to verified). They live in the module-level
  :data:`REGISTRY` (not prometheus-client's global one, which other libraries fill).
- Live state, read from the coordinator at scrape time: ``netcheck_connected_nodes
  {profile}``, ``netcheck_handshake_failures_total``, ``netcheck_sessions_refused_total``
  (session caps, docs/protocol.md §3.3c), and the canary pool:
  ``netcheck_reference_unspent{profile,fingerprint}`` (unspent references) and
  ``netcheck_reference_rounds_left{profile,fingerprint}`` (full rounds the pool still
  covers for the nodes connected now; :mod:`netcheck.references.pool`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from netcheck.records import RoundReport
    from netcheck.web.view import CoordinatorView

REGISTRY = CollectorRegistry(auto_describe=True)

ROUNDS = Counter(
    "netcheck_rounds", "Validation rounds finished, by profile and status.",
    ["profile", "status"], registry=REGISTRY,
)  # fmt: skip
VERDICTS = Counter(
    "netcheck_verdicts", "Per-node verdicts recorded, by profile and verdict.",
    ["profile", "verdict"], registry=REGISTRY,
)  # fmt: skip
RELEASE_SKEW = Histogram(
    "netcheck_release_skew_seconds",
    "Time from the first release write to the end of the last one, per round.",
    buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0),
    registry=REGISTRY,
)
ROUND_DURATION = Histogram(
    "netcheck_round_duration_seconds",
    "Wall time of a round from planning to verified verdicts.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)


def observe_round(report: RoundReport | Mapping[str, Any]) -> None:
    """Record one finished round: counts of rounds and verdicts, skew and duration.

    Args:
        report: the round runner's :class:`~netcheck.records.RoundReport`, or
            its ``as_dict()`` form (as the admin API returns it).
    """
    data = report if isinstance(report, Mapping) else report.as_dict()
    profile = str(data.get("profile", ""))
    ROUNDS.labels(profile, str(data.get("status", ""))).inc()
    for v in data.get("verdicts", ()):
        VERDICTS.labels(profile, str(v["verdict"])).inc()
    phases = data.get("phases") or {}
    skew = phases.get("release_skew_s")
    if isinstance(skew, int | float):
        RELEASE_SKEW.observe(float(skew))
    total = phases.get("total_s")
    if isinstance(total, int | float):
        ROUND_DURATION.observe(float(total))


class CoordinatorCollector(Collector):
    """Live gauges read from one coordinator at scrape time."""

    def __init__(self, coord: CoordinatorView) -> None:
        self.coord = coord

    def collect(self) -> Iterable[Metric]:
        connected = GaugeMetricFamily(
            "netcheck_connected_nodes", "Nodes with an open session, by claimed profile.",
            labels=["profile"],
        )  # fmt: skip
        for profile, n in sorted(self.coord.connected_per_profile().items()):
            connected.add_metric([profile], n)
        yield connected
        failures = CounterMetricFamily(
            "netcheck_handshake_failures",
            "Handshakes rejected or timed out since the coordinator started.",
        )
        failures.add_metric([], self.coord.handshake_failures)
        yield failures
        refused = CounterMetricFamily(
            "netcheck_sessions_refused",
            "Websocket upgrades refused over max_sessions or max_sessions_per_source "
            "since the coordinator started.",
        )
        refused.add_metric([], self.coord.sessions_refused)
        yield refused
        yield from self._pool()

    def _pool(self) -> Iterable[Metric]:
        unspent = GaugeMetricFamily(
            "netcheck_reference_unspent",
            "Unspent canary references, by profile and fingerprint id.",
            labels=["profile", "fingerprint"],
        )
        left = GaugeMetricFamily(
            "netcheck_reference_rounds_left",
            "Full rounds the canary pool still covers for the nodes connected now.",
            labels=["profile", "fingerprint"],
        )
        for e in self.coord.reference_pool():
            unspent.add_metric([e.profile, e.fingerprint_id], e.unspent)
            left.add_metric([e.profile, e.fingerprint_id], e.rounds_left)
        yield unspent
        yield left


def metrics_text(coord: CoordinatorView) -> bytes:
    """The Prometheus text exposition: round metrics plus this coordinator's live state."""
    live = CollectorRegistry(auto_describe=False)
    live.register(CoordinatorCollector(coord))
    for collector in coord.extra_collectors():  # e.g. a gateway's own gauges
        live.register(collector)
    return generate_latest(REGISTRY) + generate_latest(live)
