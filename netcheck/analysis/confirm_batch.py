"""Confirmation of disjoint suspect groups in shared rounds (pure planner).

docs/confirmation-batches.md. The coordinator (:mod:`netcheck.coordinator.confirm_batches`)
and the simulator (:mod:`netcheck.lab.sim.live`) both drive :class:`ConfirmationBatch`, so
they batch alike:

1. :func:`admit`: at each step boundary, the waiting suspect groups of one analysis
   start, in the detector's order, when they share no node and no link (a detector
   edge or a loose screening link, :func:`contention_links`) with the running ones or
   with each other.
2. Each group keeps its own :class:`~netcheck.analysis.confirm_run.ConfirmationRun`
   (looks, spending, pooled evidence). At each step every active run's next block is put
   in a secret random order (:func:`block_order`: a random permutation within each of its
   cycles, keyed by HMAC-SHA256 as the screening schedule is); shared round ``j`` loads
   the union of the runs' ``j``-th load sets (:func:`merge_blocks`); a run whose block is
   shorter idles (none of its members is loaded by it).
3. After the longest block each run gets its rounds *restricted to its members*
   (:func:`restrict`: its members loaded, their log service times) and judges
   (``run.add``). Runs finish independently; a finished run's members are free for
   waiting groups at the next step; the batch goes on while any run is active or any
   group waits.
4. A stored shared round's context lists one entry per run (:func:`round_context`); a
   later attempt pools a round through the entry of its own group
   (:func:`context_parts`, which also reads the single-run context of older rounds).

**Why the error bound survives.** A run's test compares each member's log service time
in its co-loaded rounds with its alone rounds (``H0: effect <= floor``). The other runs
of the batch add load on other nodes only (the groups are disjoint). An honest member's
service time depends on another node's load only through a co-hosted neighbour's
benign coupling (at most 20% in all, below the 25% floor). Each run's block order is
an independent secret permutation, so whether another run loads a given node in a
shared round is independent of this run's condition in that round (each position of a
cycle is equally likely to hold each of its load sets, and idle positions past a
shorter block are as likely to hold either condition of this run): the coupling is
noise common to both conditions, not a bias between them; even a fully aligned
coupling (20%) stays below the tested floor. A farm member slowed by a sibling in
another group is slowed in both conditions alike: its effect is underestimated, which
costs power, not error. No node can tell which shared round tests what: the load set
it sees is a union, and the order is keyed by a secret.
"""

from __future__ import annotations

import hashlib
import hmac
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from netcheck.analysis.coins import COIN_RULE, coin_context, coin_load_rule
from netcheck.analysis.confirm import ConfirmationObservation
from netcheck.analysis.confirm_budget import BUDGET_SPENT, fits
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.schedule import MIN_SECRET_BYTES
from netcheck.analysis.timing import TimingMatrix

ORDER_LABEL = b"netcheck/1 confirm-order\0"


def admit(
    pending: Sequence[Sequence[str]], busy: Collection[str],
    links: Sequence[tuple[str, str]] = (), limit: int | None = None,
) -> list[int]:  # fmt: skip
    """Which ``pending`` groups (detector order) start now: greedily, each group that
    shares no node and no ``links`` edge with the ``busy`` nodes (the active runs'
    members) and with the groups picked before it; at most ``limit`` (None: no limit).
    Linked groups stay apart because they may be one farm cut into cliques by a missing
    edge: sharing rounds, each would load the other's siblings in both of its
    conditions and understate its slowdown (power, not error). Returns indices into
    ``pending``, ascending."""
    near: dict[str, set[str]] = {}
    for a, b in links:
        near.setdefault(a, set()).add(b)
        near.setdefault(b, set()).add(a)
    taken = set(busy)
    picked: list[int] = []
    for i, group in enumerate(pending):
        if limit is not None and len(picked) >= limit:
            break
        nodes = set(group)
        if taken & nodes.union(*(near.get(k, set()) for k in nodes)):
            continue
        picked.append(i)
        taken |= nodes
    return picked


#: One-sided z of a screening link (:func:`contention_links`): about p < 0.01 each way.
LINK_Z = 2.326


def contention_links(
    matrix: TimingMatrix, members: Collection[str], min_effect: float, z: float = LINK_Z
) -> list[tuple[str, str]]:
    """Pairs of ``members`` that the screening rounds loosely link: in either direction,
    the mean log service time of ``u`` in rounds loading ``v`` too minus in rounds
    loading ``u`` without ``v`` is above ``min_effect`` (log units) and its t (normal
    approximation of Welch's) above ``z``. Each round is centred on the median of its
    loaded nodes first (round effects); a pair needs 2+ rounds in each condition. A
    loose screen over the few nominated members, not a test at the detector's level: it
    only keeps groups that may be one farm cut by a missing detector edge out of one
    batch, where each would load the other's siblings in both of its conditions
    (:func:`admit`); a false link only costs sharing. ``matrix``:
    :class:`~netcheck.analysis.timing.TimingMatrix` ``(n, R)``; members not in it are
    ignored. Cost: ``O(m^2 R)`` for ``m`` members."""
    index = {k: i for i, k in enumerate(matrix.node_keys)}
    keys = [k for k in dict.fromkeys(members) if k in index]
    if len(keys) < 2 or not matrix.y.size:
        return []
    rows = [index[k] for k in keys]
    y = np.where(matrix.loaded, matrix.y, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rounds
        centre = np.nanmedian(y, axis=0)
    r = y[rows] - centre
    ok = np.isfinite(r)
    val = np.where(ok, r, 0.0)
    loaded = matrix.loaded[rows].astype(float)
    # [u, v]: sums over rounds with u observed and v loaded ("both") or not ("only")
    n_b, s_b, q_b = ok.astype(float) @ loaded.T, val @ loaded.T, (val * val) @ loaded.T
    n_o = ok.sum(axis=1)[:, None] - n_b
    s_o = val.sum(axis=1)[:, None] - s_b
    q_o = (val * val).sum(axis=1)[:, None] - q_b
    with np.errstate(divide="ignore", invalid="ignore"):
        m_b, m_o = s_b / n_b, s_o / n_o
        var = (q_b - n_b * m_b**2) / (n_b - 1) / n_b + (q_o - n_o * m_o**2) / (n_o - 1) / n_o
        effect = m_b - m_o
        t = effect / np.sqrt(np.maximum(var, 1e-12))
    link = (n_b >= 2) & (n_o >= 2) & (effect > min_effect) & (t > z)
    hit = link | link.T
    return [(keys[i], keys[j]) for i in range(len(keys)) for j in range(i + 1, len(keys))
            if hit[i, j]]  # fmt: skip


def batch_links(
    groups: Sequence[Sequence[str]], edges: Sequence[tuple[str, str]], matrix: TimingMatrix,
    min_effect: float,
) -> list[tuple[str, str]]:  # fmt: skip
    """The links :func:`admit` keeps apart: the detector ``edges`` and the
    :func:`contention_links` of the groups' members (``min_effect``: log units; the
    coordinator and the simulator use half the confirmation floor)."""
    members = [k for g in groups for k in g]
    return [*edges, *contention_links(matrix, members, min_effect)]


def _tag(secret: bytes, block_id: Sequence[str], position: int) -> bytes:
    parts = [*block_id, str(position)]
    if any("\0" in p for p in parts):
        raise ValueError("block id parts must not contain NUL")
    msg = ORDER_LABEL + b"\0".join(p.encode() for p in parts)
    return hmac.new(secret, msg, hashlib.sha256).digest()


def block_order(secret: bytes, block_id: Sequence[str], n_rounds: int, cycles: int) -> list[int]:
    """A secret random order of one block of ``n_rounds`` rounds made of ``cycles``
    equal cycles: a permutation of ``range(n_rounds)`` that keeps each cycle's rounds
    in their slice and orders each slice by ``HMAC-SHA256(secret, b"netcheck/1
    confirm-order\\0" + "\\0".join(block_id) + "\\0" + position)`` (RFC 2104; a uniform
    random permutation per cycle to anyone without the secret). Deterministic: with the
    secret, the order is re-checkable from ``block_id``.

    Raises:
        ValueError: ``secret`` shorter than 16 bytes, ``cycles < 1``, ``n_rounds`` not a
            multiple of ``cycles``, or a ``block_id`` part contains NUL.
    """
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"secret must be at least {MIN_SECRET_BYTES} bytes")
    if cycles < 1 or n_rounds < 0 or n_rounds % cycles:
        raise ValueError("n_rounds must be a non-negative multiple of cycles >= 1")
    size = n_rounds // cycles
    order: list[int] = []
    for c in range(cycles):
        cycle = range(c * size, (c + 1) * size)
        order.extend(sorted(cycle, key=lambda i: _tag(secret, block_id, i)))
    return order


@dataclass(frozen=True)
class SharedRound:
    """One shared round: ``load`` (the union) and ``parts`` (run slot -> that run's
    load set, for the runs with a round at this position)."""

    load: frozenset[str]
    parts: Mapping[int, frozenset[str]]


def merge_blocks(blocks: Mapping[int, Sequence[Collection[str]]]) -> list[SharedRound]:
    """Shared rounds of blocks run side by side: round ``j`` loads the union of every
    block's ``j``-th load set; blocks shorter than the longest idle after their end.
    ``blocks``: run slot -> its load sets in order.

    Raises:
        ValueError: two blocks load a common node (their runs are not disjoint).
    """
    owner: dict[str, int] = {}
    for slot, block in blocks.items():
        for load in block:
            for key in load:
                if owner.setdefault(key, slot) != slot:
                    raise ValueError(f"node {key!r} is in the blocks of two runs")
    length = max((len(b) for b in blocks.values()), default=0)
    out = []
    for j in range(length):
        parts = {s: frozenset(b[j]) for s, b in blocks.items() if j < len(b)}
        out.append(SharedRound(frozenset().union(*parts.values()), parts))
    return out


def restrict(
    obs: ConfirmationObservation, members: Sequence[str] | frozenset[str]
) -> ConfirmationObservation:
    """``obs`` as one run sees it: ``loaded`` = the members it loaded, ``log_service``
    = the members' entries only (round id, phase and tested kept)."""
    mine = frozenset(members)
    return replace(obs, loaded=obs.loaded & mine,
                   log_service={k: v for k, v in obs.log_service.items() if k in mine})  # fmt: skip


@dataclass(frozen=True)
class ContextPart:
    """One run's share of a stored confirmation round: its ``phase``, the set its block
    ``tested``, and the nodes it ``loaded``."""

    phase: str
    tested: frozenset[str]
    loaded: frozenset[str]


def context_parts(context: Mapping[str, Any], loaded: frozenset[str]) -> list[ContextPart]:
    """The run entries of a stored confirmation round's ``context``: the ``runs`` list
    of a shared round (:func:`round_context`), or the single-run context of older rounds
    (top-level ``phase`` and ``tested``; the whole round's ``loaded`` set is its part).
    Entries without a ``tested`` list (the alone stage's rounds, older ones) give
    nothing; malformed entries are skipped."""
    runs = context.get("runs")
    if isinstance(runs, list):
        out = []
        for entry in runs:
            if not isinstance(entry, Mapping):
                continue
            tested, part = entry.get("tested"), entry.get("loaded")
            if isinstance(tested, list) and isinstance(part, list):
                out.append(ContextPart(str(entry.get("phase", "")),
                                       frozenset(str(k) for k in tested),
                                       frozenset(str(k) for k in part) & loaded))  # fmt: skip
        return out
    tested = context.get("tested")
    if not isinstance(tested, list):
        return []
    return [ContextPart(str(context.get("phase", "")), frozenset(str(k) for k in tested), loaded)]


def round_context(batch_id: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON context stored with a shared round: ``{"batch": batch_id, "runs":
    entries}``, each entry ``{"group", "attempt", "phase", "look", "tested", "loaded"}``
    (:meth:`ConfirmationBatch.context`; batch, group and attempt identify a run when
    attempts are counted, :func:`~netcheck.analysis.confirm_run.stored_runs`)."""
    return {"batch": batch_id, "runs": [dict(e) for e in entries]}


@dataclass
class ConfirmationBatch:
    """Disjoint groups' :class:`ConfirmationRun` s confirmed in shared rounds (module
    docstring). Drive it: :meth:`add_run` the groups that can start (:func:`admit`);
    :meth:`plan` the next step's shared rounds; run each (its :meth:`live` form drops
    runs that :meth:`stop` ended meanwhile); hand the full observations to :meth:`add`;
    repeat while :attr:`active` or groups wait. A run that finishes frees its members
    for waiting groups at the next step.

    Args:
        runs: the runs (pairwise disjoint member sets).
        batch_id: identifies the batch in the block order keys and stored contexts
            (e.g. the profile and the analysis's newest round id).
        secret: the schedule secret (16+ bytes); None = blocks in their planned order
            (one group at a time, the behaviour before batching).
        coins: the schedule secret to draw screening coins for every node not
            :meth:`held` (:mod:`netcheck.analysis.coins`,
            docs/screening-in-confirmation.md); None = rounds load the runs' nodes only.
        links: the screening links (:func:`batch_links`): with coins, a linked
            neighbour of a run's member is held too (idle, no coin), since it may be a
            farm sibling that a coin would load in both of the run's conditions.
        budget: shared rounds the batch may run in all (one analysis's
            ``confirm_budget_rounds``, :mod:`netcheck.analysis.confirm_budget`); 0 = no
            bound. :meth:`plan` stops the runs whose next block does not fit in
            :attr:`remaining`; the drivers start a group only when its first block fits.

    Raises:
        ValueError: two runs share a member; a short secret.
    """

    runs: list[ConfirmationRun]
    batch_id: str
    secret: bytes | None = None
    coins: bytes | None = None
    links: Sequence[tuple[str, str]] = ()
    budget: int = 0
    spent: int = 0
    looks: list[int] = field(default_factory=list)
    stopped: dict[int, str] = field(default_factory=dict)
    _rounds: list[SharedRound] | None = None
    _held: tuple[tuple[int, ...], frozenset[str]] | None = None

    def __post_init__(self) -> None:
        for secret in (self.secret, self.coins):
            if secret is not None and len(secret) < MIN_SECRET_BYTES:
                raise ValueError(f"secret must be at least {MIN_SECRET_BYTES} bytes")
        if self.budget < 0:
            raise ValueError("budget must be >= 0 (0: no bound)")
        runs, self.runs, self.looks = list(self.runs), [], []
        for run in runs:
            self.add_run(run)

    def add_run(self, run: ConfirmationRun) -> int:
        """Start ``run`` with the next step (between steps only); returns its slot.

        Raises:
            ValueError: a step is planned and not yet added, or ``run`` shares a member
                with an active run.
        """
        if self._rounds is not None:
            raise ValueError("add runs between steps only")
        if {k for s in self.active for k in self.runs[s].members} & set(run.members):
            raise ValueError("the runs of a batch must be disjoint")
        self.runs.append(run)
        self.looks.append(0)
        return len(self.runs) - 1

    @property
    def active(self) -> list[int]:
        """Slots of the runs neither done nor stopped."""
        return [i for i, r in enumerate(self.runs) if not r.done and i not in self.stopped]

    @property
    def remaining(self) -> int | None:
        """Rounds left in the :attr:`budget` (None: no budget): ``budget - spent``,
        :attr:`spent` counting the shared rounds run (an observation, not None, handed
        to :meth:`add`)."""
        return None if self.budget <= 0 else max(self.budget - self.spent, 0)

    def stop(self, slot: int, reason: str) -> None:
        """End run ``slot`` without judging the rest of its block (a member left, no node
        connected, the budget); the other runs go on. The run is closed at its last
        judged look (:meth:`~netcheck.analysis.confirm_run.ConfirmationRun.close`: the
        pairs its split phase confirmed there are its flags), whatever the reason: a
        member leaving after the split phase's first look must not turn a confirmed pair
        into a cleared record (brk10, session 10)."""
        self.stopped.setdefault(slot, reason)
        self.runs[slot].close()

    def _order(self, slot: int, block: list[set[str]]) -> list[set[str]]:
        if self.secret is None or not block:
            return block
        run = self.runs[slot]
        block_id = (self.batch_id, ",".join(run.members), str(run.attempt), str(self.looks[slot]))
        order = block_order(self.secret, block_id, len(block), run.block_cycles())
        return [block[i] for i in order]

    def plan(self) -> list[SharedRound]:
        """The shared rounds of the next step: every active run's next block, ordered
        (:func:`block_order`) and merged (:func:`merge_blocks`); empty when no run is
        active. With a :attr:`budget`, a run whose next block does not fit in
        :attr:`remaining` is stopped first (reason
        :data:`~netcheck.analysis.confirm_budget.BUDGET_SPENT`) and closed at its last
        look (:meth:`~netcheck.analysis.confirm_run.ConfirmationRun.close`: the pairs its
        split phase confirmed there are its flags): the step's shared rounds, as long
        as its longest block, then fit."""
        blocks = {s: self.runs[s].next_block() for s in self.active}
        for slot, block in blocks.items():
            if not fits(len(block), self.remaining):
                self.stop(slot, BUDGET_SPENT)
        blocks = {s: self._order(s, b) for s, b in blocks.items() if s not in self.stopped}
        self._rounds = merge_blocks(blocks)
        return list(self._rounds)

    def live(self, rnd: SharedRound) -> SharedRound | None:
        """``rnd`` without the parts of stopped runs; None if none is left."""
        parts = {s: p for s, p in rnd.parts.items() if s not in self.stopped}
        if not parts:
            return None
        return SharedRound(frozenset().union(*parts.values()), parts)

    def held(self) -> frozenset[str]:
        """The nodes no coin loads: the members of the active runs (loaded by plan only)
        and their :attr:`links` neighbours (idle). Cached per set of active runs."""
        active = tuple(self.active)
        if self._held is None or self._held[0] != active:
            self._held = (active, self._held_by(active))
        return self._held[1]

    def _held_by(self, active: Sequence[int]) -> frozenset[str]:
        members = {k for s in active for k in self.runs[s].members}
        near = {y for a, b in self.links for x, y in ((a, b), (b, a)) if x in members}
        return frozenset(members | near)

    def load(self, rnd: SharedRound) -> set[str] | Callable[[str, Sequence[str]], set[str]]:
        """What ``run_round`` loads for ``rnd``: its planned set, or with :attr:`coins`
        the rule that adds a screening coin for every node not :meth:`held`
        (:func:`~netcheck.analysis.coins.coin_load_rule`)."""
        if self.coins is None:
            return set(rnd.load)
        return coin_load_rule(self.coins, rnd.load, self.held())

    @property
    def rule(self) -> str:
        """The ``rule`` stored with the batch's rounds: ``explicit``, or
        :data:`~netcheck.analysis.coins.COIN_RULE` with coins."""
        return "explicit" if self.coins is None else COIN_RULE

    def context(self, rnd: SharedRound) -> dict[str, Any]:
        """The context to store with ``rnd`` (:func:`round_context`), with the coin
        entry (:func:`~netcheck.analysis.coins.coin_context`) when :attr:`coins`."""
        entries = []
        for slot, part in sorted(rnd.parts.items()):
            run = self.runs[slot]
            entries.append({"group": list(run.members), "attempt": run.attempt,
                            "phase": run.phase, "look": self.looks[slot],
                            "tested": sorted(run.tested), "loaded": sorted(part)})  # fmt: skip
        context = round_context(self.batch_id, entries)
        if self.coins is not None:
            context.update(coin_context(self.held()))
        return context

    def add(self, observations: Sequence[ConfirmationObservation | None]) -> None:
        """The observations of the planned step's rounds (one per shared round of
        :meth:`plan`, full, not restricted; None for a round not run): each active run
        gets those of its rounds restricted to its members (:func:`restrict`) and judges
        (``run.add``).

        Raises:
            ValueError: no step planned since the last :meth:`add`, or not one
                observation per planned round.
        """
        if self._rounds is None:
            raise ValueError("plan() the step first")
        if len(observations) != len(self._rounds):
            raise ValueError("need one observation (or None) per planned round")
        for slot in self.active:
            run = self.runs[slot]
            mine = [restrict(o, run.members) for r, o in zip(self._rounds, observations, strict=True)
                    if o is not None and slot in r.parts]  # fmt: skip
            run.add(mine)
            self.looks[slot] += 1
        self.spent += sum(o is not None for o in observations)
        self._rounds = None
