"""Round planner (pure): who gets which mixed batch, where the canaries hide, which keys.

No I/O and no global randomness: every random choice comes from the ``rng`` argument
(``random.SystemRandom()`` in production, a seeded ``random.Random`` in tests).
docs/design.md, "A round", step 1.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from netcheck.config import Profile
from netcheck.errors import RoundError
from netcheck.records import Assignment, RoundPlan
from netcheck.storage.tables import ReferenceRow
from netcheck.workloads import Workload, get_workload

JOB_KEY_BYTES = 32
JOB_NONCE_BYTES = 12  # ChaCha20-Poly1305 nonce of the job payload (protocol/jobs.py)
#: Draw budget for ``n`` distinct decoys: ``DECOY_DRAW_FACTOR * n + DECOY_DRAW_EXTRA``
#: inputs. The llm prompt stream repeats itself (100,000 draws give ~73,500 distinct
#: prompts), so a fixed number of redraw passes sometimes ended one decoy short at
#: B = 16,384; a budget in draws does not.
DECOY_DRAW_FACTOR = 4
DECOY_DRAW_EXTRA = 1024
#: ``source(n)`` -> ``n`` fresh decoy inputs of the round's workload.
DecoySource = Callable[[int], list[str]]


@dataclass(frozen=True)
class PlanNode:
    """A connected node as the planner sees it: key text and claimed fingerprint id."""

    node_key: str
    fingerprint_id: str


class _DecoyStream:
    """One round's decoys: a single generator stream (seeded from the planner's rng),
    handed out node by node with nothing drawn wasted (bulk generation: a generator per
    node drawing at least 64 inputs for a handful of decoys cost ~4x the prompts and a
    seeding per node; docs/scaling.md, "Planning")."""

    def __init__(
        self, rng: random.Random, workload: Workload, source: DecoySource | None = None
    ) -> None:
        self._draw = source or workload.generator(rng.randbytes(16)).prompts
        self._name = workload.name
        self._spare: list[str] = []

    def take(self, n: int, taken: set[str]) -> list[str]:
        """``n`` inputs distinct from each other and from ``taken``.

        Raises:
            RoundError: the stream gave fewer than ``n`` distinct new inputs within the
                draw budget (``DECOY_DRAW_FACTOR * n + DECOY_DRAW_EXTRA``).
        """
        out: list[str] = []
        seen = set(taken)
        budget = DECOY_DRAW_FACTOR * n + DECOY_DRAW_EXTRA
        skipped: list[str] = []
        while len(out) < n:
            if not self._spare:
                if budget <= 0:
                    raise RoundError(f"{self._name} generator gave fewer than {n} distinct decoys")
                ask = min(budget, max(n - len(out), 64))
                budget -= ask
                self._spare = list(reversed(self._draw(ask)))
            p = self._spare.pop()
            if p in seen:
                skipped.append(p)  # a repeat for this batch: another node may use it
            else:
                seen.add(p)
                out.append(p)
        self._spare.extend(reversed(dict.fromkeys(skipped)))  # each repeat kept once
        return out


def plan_round(
    round_id: str,
    nodes: Sequence[PlanNode],
    canaries: Mapping[str, Sequence[ReferenceRow]],
    profile: Profile,
    rng: random.Random,
    decoys: DecoySource | None = None,
) -> RoundPlan:
    """Plan one round for ``nodes`` under ``profile``.

    For each node, in order: k ~ U[canaries_min, canaries_max]; k canaries drawn from
    ``canaries[node.fingerprint_id]`` (rows of this profile, unspent, not yet given to
    another node in this plan); B - k fresh decoys from the profile's workload (one
    ``get_workload(profile).generator(rng.randbytes(16))`` stream per round, handed out
    node by node: prompts for ``llm``, semiprimes for ``factoring``); k random positions; a fresh job key and nonce. A node whose fingerprint has fewer than k usable canaries is skipped.
    Every batch is distinct (fresh decoys; a repeat is redrawn).

    Args:
        round_id: caller-chosen round id.
        nodes: connected nodes; node keys must be distinct.
        canaries: unspent reference rows by fingerprint id.
        profile: gives B, max_new_tokens, canaries_min/max and the workload.
        rng: the only source of randomness, except ``decoys``.
        decoys: where decoys come from (``decoys(n)`` = ``n`` fresh inputs of the
            profile's workload, e.g. :meth:`DecoyReservoir.source
            <netcheck.workloads.reservoir.DecoyReservoir.source>`, generated ahead in
            worker processes); default: one stream seeded from ``rng``.

    Raises:
        RoundError: empty round id, duplicate node key, a canary answer of the wrong
            length, or the prompt generator cannot produce distinct decoys.
    """
    if not round_id:
        raise RoundError("round id must not be empty")
    keys = [n.node_key for n in nodes]
    if len(set(keys)) != len(keys):
        raise RoundError(f"round {round_id}: duplicate node key in the plan")
    b = profile.batch_size
    workload = get_workload(profile)
    batches: set[tuple[str, ...]] = set()
    assignments: list[Assignment] = []
    skipped: list[tuple[str, str]] = []
    # Usable rows per fingerprint, filtered once; drawn rows are swap-removed below, so
    # planning N nodes costs O(N + pool) instead of O(N * pool) (docs/scaling.md).
    pools: dict[str, list[ReferenceRow]] = {}
    stream = _DecoyStream(rng, workload, decoys)
    for node in nodes:
        k = rng.randint(profile.canaries_min, profile.canaries_max)
        pool = pools.get(node.fingerprint_id)
        if pool is None:
            pool = pools[node.fingerprint_id] = [
                c
                for c in canaries.get(node.fingerprint_id, ())
                if c.spent_round is None and c.profile == profile.name
            ]
        fp = node.fingerprint_id[:12]
        if not pool:
            skipped.append((node.node_key, f"no unspent canaries for fingerprint {fp}"))
            continue
        if len(pool) < k:
            reason = f"too few unspent canaries for fingerprint {fp} ({len(pool)} < {k})"
            skipped.append((node.node_key, reason))
            continue
        picks = rng.sample(range(len(pool)), k)  # the same draw as rng.sample(pool, k)
        chosen = [pool[i] for i in picks]
        for i in sorted(picks, reverse=True):
            pool[i] = pool[-1]
            pool.pop()
        for c in chosen:
            if len(c.answer) != profile.max_new_tokens:
                raise RoundError(
                    f"canary {c.ref_id}: answer has {len(c.answer)} tokens, "
                    f"profile {profile.name} wants {profile.max_new_tokens}"
                )
        positions = sorted(rng.sample(range(b), k))
        canary_prompts = {c.prompt for c in chosen}
        while True:
            fill = iter(stream.take(b - k, canary_prompts))
            slots = dict(zip(positions, chosen, strict=True))
            prompts = tuple(slots[i].prompt if i in slots else next(fill) for i in range(b))
            if prompts not in batches:
                break
        batches.add(prompts)
        ordered = [slots[i] for i in positions]
        assignments.append(
            Assignment(
                node_key=node.node_key,
                prompts=prompts,
                canary_positions=tuple(positions),
                canary_ids=tuple(c.ref_id for c in ordered),
                canary_answers=tuple(tuple(c.answer) for c in ordered),
                job_key=rng.randbytes(JOB_KEY_BYTES),
                job_nonce=rng.randbytes(JOB_NONCE_BYTES),
            )
        )
    return RoundPlan(
        round_id=round_id,
        profile=profile.name,
        batch_size=b,
        max_new_tokens=profile.max_new_tokens,
        assignments=tuple(assignments),
        skipped=tuple(skipped),
    )
