"""Prometheus gauges and counters of one gateway (served at its ``GET /metrics``).

Every series carries the ``gateway`` label, so one scrape config over all gateways gives
per-gateway series that aggregate with ``sum by``: nodes held, leadership, the clock
offset to the database and its uncertainty, the last release loop, and rounds by how
this gateway took part (``joined``, ``excluded``, ``reported``, ``failed``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from netcheck.gateway.service import GatewayBase as Gateway


class GatewayCollector(Collector):
    """Live state of one gateway, read at scrape time."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    def collect(self) -> Iterable[Metric]:
        gw, gid = self.gw, self.gw.gateway_id
        nodes = GaugeMetricFamily(
            "netcheck_gateway_nodes", "Node sessions this gateway holds, by profile.",
            labels=["gateway", "profile"],
        )  # fmt: skip
        per: dict[str, int] = dict.fromkeys(gw.profiles, 0)
        for s in gw.sessions.values():
            per[s.claim.profile] = per.get(s.claim.profile, 0) + 1
        for profile, n in sorted(per.items()):
            nodes.add_metric([gid, profile], n)
        yield nodes
        leader = GaugeMetricFamily(
            "netcheck_gateway_leader", "1 while this gateway holds the round-leader lock.",
            labels=["gateway"],
        )  # fmt: skip
        leader.add_metric([gid], 1.0 if gw.control.is_leader else 0.0)
        yield leader
        if gw.clock is not None:
            for name, value, doc in (
                ("netcheck_gateway_clock_offset_seconds", gw.clock.offset_s,
                 "Database clock minus this gateway's wall clock, last measurement."),
                ("netcheck_gateway_clock_uncertainty_seconds", gw.clock.uncertainty_s,
                 "Half the round trip of the best clock sample, last measurement."),
            ):  # fmt: skip
                g = GaugeMetricFamily(name, doc, labels=["gateway"])
                g.add_metric([gid], value)
                yield g
        loop = GaugeMetricFamily(
            "netcheck_gateway_release_loop_seconds",
            "First to last release write of this gateway in its last round.",
            labels=["gateway"],
        )
        loop.add_metric([gid], gw.stats.last_release_loop_s)
        yield loop
        rounds = CounterMetricFamily(
            "netcheck_gateway_rounds", "Rounds by how this gateway took part.",
            labels=["gateway", "part"],
        )  # fmt: skip
        for part, n in sorted(gw.stats.rounds.items()):
            rounds.add_metric([gid, part], n)
        yield rounds
