"""The gateway class: :class:`~netcheck.gateway.service.GatewayBase` with the round
logic plugged in (leader, participant, metrics)."""

from __future__ import annotations

from typing import Any

from netcheck.gateway.leader import run_cluster_round
from netcheck.gateway.leader import take_over as _take_over
from netcheck.gateway.metrics import GatewayCollector
from netcheck.gateway.participant import participate as _participate
from netcheck.gateway.service import GatewayBase
from netcheck.records import RoundReport


class Gateway(GatewayBase):
    """A gateway process (docs/gateways.md); arguments as :class:`GatewayBase`."""

    async def start_round(self, profile: str) -> RoundReport:
        """Run a cluster round now (this gateway must be the leader).

        Raises:
            RoundError: not the leader, or as
                :func:`netcheck.gateway.leader.run_cluster_round`.
        """
        return await run_cluster_round(self, profile)

    async def participate(self, round_id: str) -> None:
        await _participate(self, round_id)

    async def take_over(self) -> None:
        await _take_over(self)

    def extra_collectors(self) -> list[Any]:
        return [GatewayCollector(self)]
