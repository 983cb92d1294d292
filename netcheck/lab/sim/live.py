"""EMULATION: the live coordinator's detection loop on a simulated population.

This replays what :class:`netcheck.coordinator.detection.Screening` does, round by
round, through the same code paths; only the nodes are simulated
(:mod:`netcheck.lab.sim.population`):

- the round mix: the ``index``-th screening round is ``full`` (every node loaded) or
  ``screening`` (secret HMAC schedule) by :func:`~netcheck.coordinator.screening.round_kind`
  and :func:`~netcheck.analysis.schedule.screening_plan`, every ``screening_full_every``
  (4) rounds;
- verdicts at the real deadline: a loaded node's result is ``late`` when it arrives
  after :meth:`netcheck.config.Profile.deadline_s` of its RTT, ``missing`` when it never
  arrives; the capacity test (:func:`~netcheck.analysis.lateness.capacity_test`, as
  ``checks.capacity``) after every strike (screening, full and confirmation rounds)
  over the node's last ``capacity_window`` verdicts, its look = the node's strikes so
  far, its null at the window's own round shares (``q`` per screening round, 0 per
  alone round, 1 per full or other confirmation round, as ``checks.capacity`` reads
  them from the stored rules and rows), raises a ``capacity`` flag, one per set of
  uncovered strike rounds, as live;
- the analysis every ``screening_analyze_every`` (16) rounds over the
  ``screening_window_rounds`` (128) most recent rounds: stored rows (the ``results``
  columns) -> :func:`~netcheck.coordinator.screening.analyse` (the live function: y
  matrix, median polish, detectors, missing results censored at the deadline);
- confirmation of every suspect group not already covered by a flag, longest-waiting
  (the analyses its pairs were left unserved in a row) then strongest first within
  ``confirm_budget_rounds`` per analysis (as live,
  :mod:`~netcheck.analysis.confirm_budget`), driven by
  :class:`~netcheck.analysis.confirm_run.ConfirmationRun` (the live driver), each round
  turned into an observation by
  :func:`~netcheck.coordinator.screening.confirmation_observation`, with the attempt
  count of earlier confirmations (error spending); with ``confirm_coins`` the other
  nodes get screening coins (:meth:`ConfirmationBatch.held
  <netcheck.analysis.confirm_batch.ConfirmationBatch.held>` decides who is held) and
  the analysis reads those rounds, as live. One shortcut: the simulator draws these
  coins from its RNG instead of the HMAC schedule (both are fair independent coins
  to every node; 25 million HMACs cost 2 of the 7 minutes of one 1,000-node run to 32
  rounds), and stores only the ``coins`` part of the round's context (all the
  analysis reads);
- the persistent-slowness test (:func:`~netcheck.analysis.slowness.persistent_slowness`)
  at every analysis over the same window, against the profile's reference time;
- slowness nominees (the test's rejections first) confirmed on rounds loading each
  alone (:mod:`netcheck.analysis.alone`), each attempt on its fixed window of the
  node's alone rounds (any confirmation round that loaded it alone), topped up first,
  a promising attempt, or one whose successor's window is complete already (catch-up),
  followed at once by the next (``AloneConfig.max_attempts``, ``catch_up_attempts``):
  the ``slow`` flags (with ``SlownessConfig.direct_flags``, or ``alone=None``, a
  rejection of the screening test flags by itself, the behaviour before session 6);
- the relay test after every round for nodes whose probe exceeded the floor
  (:func:`~netcheck.coordinator.screening.relay_check`).

Answer-level proof (:func:`~netcheck.analysis.answers.find_result_sharing`) needs two
identities to return one computation; the simulated adversaries all compute their own
batches, so it never fires here (a farm that reuses outputs is caught by it at once).
Defaults come from :class:`netcheck.config.CoordinatorConfig`.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netcheck.analysis.alone import AloneConfig, alone_test, extend, nominees, rounds_short
from netcheck.analysis.coins import coin_context
from netcheck.analysis.confirm import ConfirmationObservation
from netcheck.analysis.confirm_batch import ConfirmationBatch, admit, batch_links
from netcheck.analysis.confirm_budget import (
    confirmation_order,
    first_block_rounds,
    fits,
    next_waits,
)
from netcheck.analysis.confirm_run import ConfirmationRun, prior_attempts
from netcheck.analysis.detectors import SuspectGroup
from netcheck.analysis.lateness import STRIKES, CapacityTestConfig, capacity_test, round_share
from netcheck.analysis.schedule import rule_name, screening_plan
from netcheck.analysis.screening import (
    ProbePairs,
    analyse,
    capacity_check,  # the fixed-count rule before the capacity test (baseline)
    confirmation_observation,
    relay_check,
    round_kind,
)
from netcheck.analysis.slowness import NodeSlowness, persistent_slowness
from netcheck.config import Profile
from netcheck.lab.sim.live_config import (  # re-exported: the public names
    LEGACY_CAPACITY,
    LiveConfig,
    Snapshot,
    legacy_config,
    sim_profile,
)
from netcheck.lab.sim.population import Population
from netcheck.records import StoredRounds

__all__ = ["LEGACY_CAPACITY", "LiveConfig", "LiveSimulation", "Snapshot", "legacy_config",
           "sim_profile"]  # fmt: skip


@dataclass
class _State:
    """Mutable loop state (the coordinator's database, in memory)."""

    round_ids: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    round_shares: dict[str, float] = field(default_factory=dict)  # lateness.round_share
    schedules: dict[str, dict[str, bool]] = field(default_factory=dict)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)  # coin rounds only
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    verdicts: dict[str, deque[dict[str, str]]] = field(default_factory=dict)
    probes: dict[str, deque[tuple[str, float, float]]] = field(default_factory=dict)
    capacity: dict[str, set[str]] = field(default_factory=dict)
    capacity_legacy: dict[str, set[str]] = field(default_factory=dict)
    strikes: dict[str, int] = field(default_factory=dict)
    relay: set[str] = field(default_factory=set)
    slow: set[str] = field(default_factory=set)
    shared: list[tuple[str, ...]] = field(default_factory=list)
    tested: list[tuple[str, ...]] = field(default_factory=list)
    cleared: int = 0
    suspects: list[frozenset[str]] = field(default_factory=list)
    confirmation_rounds: int = 0
    unserved: int = 0
    waits: dict[frozenset[str], int] = field(default_factory=dict)  # confirm_budget.next_waits
    analyses: int = 0
    clock_ns: int = 0
    conf_obs: dict[str, deque[ConfirmationObservation]] = field(default_factory=dict)
    alone: dict[str, list[tuple[str, float | None]]] = field(default_factory=dict)
    alone_attempts: dict[str, int] = field(default_factory=dict)
    alone_tests: dict[str, list[NodeSlowness]] = field(default_factory=dict)  # in order


class LiveSimulation:
    """EMULATION: the coordinator's detection loop on ``population`` (module docstring).

    Args:
        population: the simulated nodes.
        cfg: settings (:class:`LiveConfig`).
        rng: randomness of the service times.
        secret: the schedule secret (32 random bytes from ``rng`` if None).
        profile: the profile (deadline); if None, :func:`sim_profile` by
            ``cfg.deadline_rule``.
    """

    def __init__(
        self, population: Population, cfg: LiveConfig, rng: np.random.Generator,
        secret: bytes | None = None, profile: Profile | None = None,
    ) -> None:  # fmt: skip
        self.pop = population
        self.cfg = cfg
        self.rng = rng
        self.secret = secret if secret is not None else rng.bytes(32)
        self.profile = profile or sim_profile(population, rng, deadline_rule=cfg.deadline_rule)
        self.keys = population.node_keys
        self.deadline = np.array([self.profile.deadline_s(float(r)) for r in population.rtt_s])
        self.censor_s = self.profile.deadline_s(0.0)
        self.state = _State()
        self.index = 0
        # the load probability the floors are calibrated for (0.5: before session 9)
        self._floor_q = cfg.load_probability if cfg.floors_for_q else 0.5
        self._capacity_cfg = CapacityTestConfig(cfg.capacity_window, cfg.capacity_strikes,
                                                cfg.capacity_p0, cfg.capacity_alpha,
                                                self._floor_q, cfg.full_every)  # fmt: skip
        self._history = max(cfg.capacity_window, LEGACY_CAPACITY[0])

    # -- rounds ----------------------------------------------------------------------

    def _round(
        self, round_id: str, kind: str, bits: np.ndarray, coins: bool = False
    ) -> list[dict[str, Any]]:
        """Simulate one round: stored rows, verdicts, capacity and relay checks
        (``coins``: a confirmation round with screening coins)."""
        st, pop = self.state, self.pop
        service = pop.service_times(bits, self.rng)
        transit = pop.rtt_s + self.rng.exponential(pop.spec.rtt_jitter_s, len(self.keys))
        order = self.rng.permutation(np.flatnonzero(bits))
        # vectorised; the same values as one row at a time (np.rint rounds half to even
        # like round()), and the same random draws in the same order
        svc = service[order]
        ok = ~np.isnan(svc)
        elapsed = svc + transit[order]
        released = st.clock_ns + np.arange(len(order), dtype=np.int64) * pop.spec.release_gap_ns
        arrived = released + np.rint(np.where(ok, elapsed, 0.0) * 1e9).astype(np.int64)
        late = ok & (elapsed > self.deadline[order])
        shared = {v: {"round_id": round_id, "verdict": v} for v in ("pass", "late", "missing")}
        rows: list[dict[str, Any]] = []
        strikes: list[str] = []
        for i, rel, arr, good, lt, rtt in zip(order.tolist(), released.tolist(), arrived.tolist(),
                                              ok.tolist(), late.tolist(),
                                              pop.rtt_s[order].tolist(), strict=True):  # fmt: skip
            key = self.keys[i]
            rows.append({"round_id": round_id, "node_key": key, "released_ns": rel,
                         "arrived_ns": arr if good else None, "rtt_s": rtt,
                         "commitment": "sim" if good else None})  # fmt: skip
            verdict = "missing" if not good else ("late" if lt else "pass")
            hist = st.verdicts.get(key)
            if hist is None:
                hist = st.verdicts[key] = deque(maxlen=self._history)
            hist.appendleft(shared[verdict])  # read only: one dict per verdict and round
            if verdict in STRIKES:
                strikes.append(key)
        if pop.spec.relay_leg_s > 0:
            for i in order.tolist():
                self._probe(round_id, i)
        st.clock_ns += 10**11
        if kind == "confirmation" and len(rows) == 1:  # one node alone: alone-slowness data
            row = rows[0]
            ratio: float | None = None
            if row["arrived_ns"] is not None:  # TimingRow.service_s / t_ref
                alone_s = (row["arrived_ns"] - row["released_ns"]) / 1e9 - float(row["rtt_s"])
                ratio = max(alone_s, 0.0) / self.profile.reference_t_s
            st.alone.setdefault(row["node_key"], []).append((round_id, ratio))
        st.schedules[round_id] = {k: bool(b) for k, b in zip(self.keys, bits, strict=True)}
        st.kinds[round_id] = kind
        # as checks.stored_round_shares reads them: the screening rule's q, 0 for an
        # explicit confirmation round with one row (alone), else 1
        st.round_shares[round_id] = round_share(
            kind, rule_name(self.cfg.load_probability) if kind == "screening" else "",
            None if coins else len(rows))  # fmt: skip
        st.results[round_id] = rows
        for key in strikes:  # checks.capacity
            self._capacity(key)
        return rows

    def _capacity(self, key: str) -> None:
        """The capacity test at a strike of ``key`` (look = its strikes so far), and the
        fixed-count rule before it on the same verdicts; one flag per uncovered window."""
        st, cfg = self.state, self.cfg
        st.strikes[key] = st.strikes.get(key, 0) + 1
        if st.capacity.get(key) and st.capacity_legacy.get(key):
            return  # flagged by both rules: snapshots only ask whether a node is flagged
        recent = list(st.verdicts[key])
        window, need = LEGACY_CAPACITY
        hits, failed = capacity_check(recent, window, need)
        legacy = (failed, [v["round_id"] for v in recent[:window]],
                  [v["round_id"] for v in hits])  # fmt: skip
        # the window's own round shares, as checks.capacity reads them from the stored
        # rules (session 12); without floors_for_q the null of q = 1/2 (before session 9)
        shares = st.round_shares if cfg.floors_for_q else None
        test = capacity_test(recent, st.strikes[key], self._capacity_cfg, shares)
        new = (test.flagged, list(test.rounds), list(test.strike_rounds))
        for flags, (flagged, rounds, strike_rounds) in (
            (st.capacity_legacy, legacy),
            (st.capacity, legacy if cfg.capacity_legacy else new),
        ):  # fmt: skip
            covered = flags.setdefault(key, set())
            if flagged and not covered & set(rounds):
                covered.update(strike_rounds)

    def _probe(self, round_id: str, i: int) -> None:
        """Relay test inputs: the round's fastest probe RTT and echo RTT of node i."""
        pop, st = self.pop, self.state
        key = self.keys[i]
        leg = pop.spec.relay_leg_s if pop.farm_of[i] >= 0 else 0.0
        echo = float(pop.rtt_s[i])
        probe = echo + self.cfg.probe_ref_s + leg + float(self.rng.exponential(0.001))
        hist = st.probes.setdefault(key, deque(maxlen=16))
        hist.append((round_id, probe, echo))
        if probe - echo - self.cfg.probe_ref_s > 0.015 and key not in st.relay:
            pairs = ProbePairs(tuple(h[0] for h in hist), tuple(h[1] for h in hist),
                               tuple(h[2] for h in hist), ())  # fmt: skip
            res = relay_check(pairs, self.cfg.probe_ref_s)
            if res is not None and res.flagged:
                st.relay.add(key)

    def screening_round(self) -> str:
        """Run the next screening (or full) round; returns its kind."""
        kind = round_kind(self.index, self.cfg.full_every)
        rid = f"screen-{self.index:05d}"
        self.index += 1
        if kind == "full":
            bits = np.ones(len(self.keys), dtype=bool)
        else:
            plan = screening_plan(self.secret, rid, self.keys, self.cfg.load_probability)
            bits = np.array([plan[k] for k in self.keys])
        self.state.round_ids.append(rid)
        self._round(rid, kind, bits)
        return kind

    # -- analysis and confirmation ---------------------------------------------------

    def _window(self, coins: bool = True) -> list[str]:
        """Ids of the rounds the live analysis reads: the most recent ``window_rounds``
        of its kinds and (``coins``) of the confirmation rounds with coins."""
        st = self.state
        kinds = ("screening",) if self.cfg.detector.drop_full_rounds else ("screening", "full")
        ids = [r for r in st.round_ids if st.kinds[r] in kinds or (coins and r in st.contexts)]
        return ids[-self.cfg.window_rounds :]

    def _prune(self) -> None:
        """Forget the rows of coin rounds that left the window (memory stays flat)."""
        st = self.state
        if len(st.contexts) <= 2 * self.cfg.window_rounds:
            return
        keep = set(self._window())
        for rid in [r for r in st.contexts if r not in keep]:
            del st.results[rid], st.schedules[rid], st.contexts[rid], st.kinds[rid]
        st.round_ids = [r for r in st.round_ids if r in st.kinds]

    def stored(self, coins: bool = True) -> StoredRounds:
        """The window the live analysis reads (``recent_rounds`` of its kinds and
        ``kind_rules``); ``coins=False``: without the coin rounds (the slowness test's)."""
        st = self.state
        ids = self._window(coins)
        results = tuple(row for r in ids for row in st.results[r])
        return StoredRounds(tuple(ids), {r: st.kinds[r] for r in ids},
                            {r: st.schedules[r] for r in ids}, results,
                            {r: st.contexts[r] for r in ids if r in st.contexts})  # fmt: skip

    def analyse_and_confirm(self) -> None:
        """Analysis of the window, then confirmation of each new suspect group."""
        st = self.state
        stored = self.stored()
        if len(stored.round_ids) < 2:
            return
        analysis = analyse(stored, self.censor_s, self.cfg.detector)
        st.analyses += 1
        report = None
        if self.cfg.slowness is not None:  # Screening.slowness: look = the analysis index
            report = persistent_slowness(self.stored(coins=False), self.profile.reference_t_s, st.analyses,
                                         self.cfg.slowness, self._floor_q)  # fmt: skip
            # a rejection flags only with direct_flags (or with no alone stage to judge it)
            direct = report.flagged if self.cfg.alone is None else report.direct
            st.slow.update(n.node_key for n in direct)
        st.suspects.append(frozenset(k for g in analysis.detection.groups for k in g.members))
        groups = analysis.detection.groups
        links = batch_links([g.members for g in groups], [(e.a, e.b) for e in analysis.detection.edges],
                            analysis.matrix, self.cfg.confirm.effect_floor / 2)  # fmt: skip
        self._confirm(groups, links, f"{self.profile.name}/{stored.round_ids[-1]}")
        if report is not None and self.cfg.alone is not None:
            for key in nominees(report, self.cfg.alone, st.slow):
                self._confirm_alone(key, self.cfg.alone)

    def _confirm_alone(self, key: str, cfg: AloneConfig) -> None:
        """Alone rounds for one slowness nominee, as many as its next attempt's window
        lacks (``rounds_short``: its alone rounds are every confirmation round that
        loaded it alone, contention's too), then the test on that window; a promising
        attempt, or one whose successor's window is complete already (catch-up), is
        followed at once by the next (``extend``), as in the coordinator."""
        st = self.state
        bits = np.array([k == key for k in self.keys])
        for in_analysis in range(1, cfg.max_attempts + cfg.catch_up_attempts + 1):
            attempt = st.alone_attempts.get(key, 0) + 1
            for _ in range(rounds_short(len(st.alone.get(key, [])), attempt, cfg)):
                rid = f"confirm-{st.confirmation_rounds:06d}"
                st.confirmation_rounds += 1
                self._round(rid, "confirmation", bits)
                del st.results[rid], st.schedules[rid]
            st.alone_attempts[key] = attempt
            test = alone_test(key, st.alone.get(key, []), attempt, cfg)
            st.alone_tests.setdefault(key, []).append(test)
            if test.flagged:
                st.slow.add(key)
            if not extend(
                test, in_analysis, cfg, rounds_short(len(st.alone[key]), attempt + 1, cfg)
            ):
                return

    def _prior(self, members: Sequence[str]) -> tuple[ConfirmationObservation, ...]:
        """The run parts of the most recent ``pool_rounds`` confirmation rounds that
        loaded a member, as the coordinator reads them (ConfirmationRun keeps those
        within the group), oldest first (round ids are numbered in order)."""
        seen = {(o.round_id, o.phase, tuple(sorted(o.tested))): o
                for m in members for o in self.state.conf_obs.get(m, ())}  # fmt: skip
        keep = set(sorted({k[0] for k in seen})[-self.cfg.pool_rounds :])
        return tuple(seen[k] for k in sorted(seen) if k[0] in keep)

    def _covered(self, members: Sequence[str]) -> bool:
        flagged = [set(f) for f in self.state.shared]
        return all(any({a, b} <= f for f in flagged)
                   for a, b in itertools.combinations(sorted(set(members)), 2))  # fmt: skip

    def _confirm(
        self, groups: Sequence[SuspectGroup], links: Sequence[tuple[str, str]], batch_id: str
    ) -> list[tuple[str, ...]]:
        """The groups of one analysis (``confirm_groups``), longest-waiting then
        strongest first (:func:`~netcheck.analysis.confirm_budget.confirmation_order`
        with the state's wait counts; ``confirm_aging`` False: strongest first only):
        with batching, each starts at a step boundary when :func:`admit` lets it
        (disjoint from and unlinked to the running ones) and shares their rounds; else
        one at a time. A group already covered by a flag when it would start is
        dropped; one whose first block no longer fits in ``confirm_budget_rounds`` is
        left unserved (no round, no attempt; its pairs wait one more analysis,
        :func:`~netcheck.analysis.confirm_budget.next_waits`); a run the budget stops
        (:meth:`ConfirmationBatch.plan`) leaves its record, as one whose member left
        does live. Returns the members of the groups run, in the order they started."""
        st, cfg = self.state, self.cfg
        batch = ConfirmationBatch([], batch_id, self.secret if cfg.confirm_batching else None,
                                  self.secret if cfg.confirm_coins else None, links,
                                  budget=cfg.confirm_budget_rounds)  # fmt: skip
        pending = confirmation_order(groups, st.waits if cfg.confirm_aging else None)
        left: list[int] = []  # unserved by the budget
        index = {k: i for i, k in enumerate(self.keys)}
        recorded: set[int] = set()
        contexts: dict[frozenset[str], dict[str, Any]] = {}
        while True:
            pending = [i for i in pending if not self._covered(groups[i].members)]
            affordable = [i for i in pending if fits(
                first_block_rounds(len(groups[i].members), cfg.confirm_cycles), batch.remaining)]  # fmt: skip
            fitting = set(affordable)
            dropped = [i for i in pending if i not in fitting]  # the budget only shrinks
            left += dropped
            st.unserved += len(dropped)
            pending = affordable
            busy = {k for s in batch.active for k in batch.runs[s].members}
            if cfg.confirm_batching:
                picks = admit([groups[i].members for i in pending], busy, links)
            else:
                picks = [] if busy or not pending else [0]
            for j in picks:
                members = groups[pending[j]].members
                batch.add_run(ConfirmationRun(
                    tuple(members), cfg.confirm_cycles, cfg.confirm_max_cycles, cfg.confirm,
                    attempt=prior_attempts(members, st.tested) + 1, legacy=cfg.legacy_confirm,
                    prior=self._prior(members) if cfg.pool_rounds else (),
                ))  # fmt: skip
            pending = [i for j, i in enumerate(pending) if j not in set(picks)]
            if not batch.active:
                st.waits = next_waits([g.members for g in groups], left, st.waits)
                return [r.members for r in batch.runs]
            block = []
            for rnd in batch.plan():
                rid = f"confirm-{st.confirmation_rounds:06d}"
                st.confirmation_rounds += 1
                bits = np.zeros(len(self.keys), dtype=bool)
                bits[[index[k] for k in rnd.load]] = True
                held = batch.held()
                if batch.coins is not None:  # EMULATION: fair coins from the RNG (docstring)
                    free = np.ones(len(self.keys), dtype=bool)
                    free[[index[k] for k in held]] = False
                    bits |= free & (self.rng.random(len(self.keys)) < 0.5)
                rows = self._round(rid, "confirmation", bits, batch.coins is not None)
                planned = [r for r in rows if r["node_key"] in rnd.load]  # the runs read no other
                block.append(confirmation_observation(rid, st.schedules[rid], planned,
                                                      self.censor_s))  # fmt: skip
                if batch.coins is not None:  # screening reads it (analysis.coins)
                    st.round_ids.append(rid)
                    if held not in contexts:  # one context per held set (read only)
                        contexts[held] = coin_context(held)
                    st.contexts[rid] = contexts[held]
                    self._prune()
                else:
                    del st.results[rid], st.schedules[rid]  # not needed again; keeps memory flat
            batch.add(block)
            for slot, run in enumerate(batch.runs):  # finished or stopped runs leave records
                if (run.done or slot in batch.stopped) and slot not in recorded:
                    recorded.add(slot)
                    self._record(run)

    def _record(self, run: ConfirmationRun) -> None:
        """A finished run's flags or cleared record, attempt and pooled rounds (a run
        the budget stopped: its cleared record; it has judged its first look)."""
        st, cfg = self.state, self.cfg
        st.tested.append(tuple(run.members))
        if cfg.pool_rounds:  # as stored: each node's most recent confirmation rounds
            for obs in run.observations:  # restricted to the run's members
                for key in obs.loaded:
                    mine = st.conf_obs.setdefault(key, deque(maxlen=cfg.pool_rounds))
                    mine.append(obs)
        st.shared.extend(run.flags)
        st.cleared += not run.flags

    def snapshot(self) -> Snapshot:
        """The flags and counters so far."""
        st = self.state
        return Snapshot(
            self.index, tuple(st.shared), st.cleared,
            frozenset(k for k, rounds in st.capacity.items() if rounds), frozenset(st.relay),
            tuple(st.suspects), st.confirmation_rounds, st.analyses, frozenset(st.slow),
            frozenset(k for k, rounds in st.capacity_legacy.items() if rounds), st.unserved,
        )  # fmt: skip

    def run(self, checkpoints: Sequence[int]) -> list[Snapshot]:
        """Run screening rounds up to ``max(checkpoints)``, analysing and confirming
        every ``analyze_every`` rounds; a :class:`Snapshot` at each checkpoint (taken
        after that round's analysis)."""
        want = sorted(set(checkpoints))
        out = []
        while self.index < want[-1]:
            self.screening_round()
            if self.index % self.cfg.analyze_every == 0:
                self.analyse_and_confirm()
            if self.index in want:
                out.append(self.snapshot())
        return out
