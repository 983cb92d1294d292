"""How the round runner meets the rest of the coordinator: the :class:`RoundHost` it
runs on (the server's ``Coordinator`` implements it) and the :class:`RoundHooks` that
run around each round (detection's after-round checks, Prometheus metrics). The runner
imports neither the server nor detection nor web/."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import Profile
from netcheck.coordinator.rtt import RttProber
from netcheck.coordinator.session import NodeSession
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan, RoundReport
from netcheck.storage import Store
from netcheck.storage.durable import Recorder
from netcheck.storage.flags import FlagStore
from netcheck.workloads.reservoir import DecoyReservoir


class AfterRound(Protocol):
    """A hook run after a round's verdicts are stored (detection checks); returns the ids
    of flags it raised, which the round's report lists. ``strict=True``: a transient
    storage failure (:class:`~netcheck.errors.StorageUnavailable`) is raised, not only
    logged, so the round's checks can be run again later (docs/spool.md)."""

    def __call__(
        self, profile: Profile, plan: RoundPlan, outcomes: Sequence[NodeOutcome],
        records: Mapping[str, NodeRecord], *, strict: bool = False,
    ) -> Awaitable[list[int]]: ...  # fmt: skip


#: A hook told of every finished round's report (e.g. Prometheus metrics).
RoundObserver = Callable[[RoundReport], None]


@dataclass
class RoundHooks:
    """What runs around a round besides the runner itself, attached by the coordinator:
    ``after_round`` hooks (in order; their flag ids are concatenated) and ``finished``
    observers (called with the complete report)."""

    after_round: list[AfterRound] = field(default_factory=list)
    finished: list[RoundObserver] = field(default_factory=list)


class RoundHost(Protocol):
    """What the round runner needs of the coordinator (the server's ``Coordinator``
    implements it): profiles, storage, the round lock, hooks and the live sessions."""

    @property
    def profiles(self) -> Mapping[str, Profile]: ...

    @property
    def store(self) -> Store: ...

    @property
    def recorder(self) -> Recorder:
        """Durable round writes: retry, then the local spool (docs/spool.md)."""
        ...

    @property
    def flags(self) -> FlagStore:
        """Where each round's schedule is stored (``round_schedules``)."""
        ...

    @property
    def round_lock(self) -> asyncio.Lock: ...

    @property
    def stopping(self) -> bool:
        """True once the coordinator is shutting down (a round in flight aborts)."""
        ...

    @property
    def round_hooks(self) -> RoundHooks: ...

    @property
    def identity(self) -> Ed25519PrivateKey:
        """The coordinator's identity key: signs verdict notices (docs/protocol.md §5.11)."""
        ...

    @property
    def decoys(self) -> DecoyReservoir:
        """Decoys generated ahead of each round (the planner's decoy source)."""
        ...

    @property
    def rtt(self) -> RttProber:
        """Each node's echo and probe RTT sets, taken between rounds."""
        ...

    def connected(self, profile: str | None = None) -> list[NodeSession]: ...
