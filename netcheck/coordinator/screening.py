"""Detection in the running coordinator: screening rounds, analysis, confirmation, flags.

docs/detection.md describes the method; the statistics are the pure functions of
:mod:`netcheck.analysis`. This module wires them to live rounds and to storage:

1. **Screening rounds** (:meth:`Screening.screening_round`): each node connected with
   the profile is loaded with probability 1/2 from the secret schedule
   (:func:`netcheck.analysis.schedule.screening_plan`, keyed by the coordinator's
   ``schedule_secret_file`` and the round id); every ``screening_full_every``-th round
   loads every node (a full-load capacity round). A background timer can run them
   (``screening_interval_s``).
2. **Analysis** (:func:`analyse`): the stored raw rows of the most recent
   ``screening_window_rounds`` screening and full rounds -> :class:`TimingRow` ->
   :func:`log_service_matrix` -> :func:`median_polish` -> :func:`detect` -> suspect
   groups.
3. **Confirmation** (:meth:`Screening.confirm_group`): rounds loading only the group
   interleaved with rounds loading each member alone (:func:`plan_confirmation`),
   judged by :func:`judge_confirmation` after every ``confirm_cycles`` cycles until
   confirmed or ``confirm_max_cycles``; a confirmed group becomes a ``shared-backend``
   flag, an unconfirmed one a ``cleared`` record (it stays in screening).
4. **After every round** (:meth:`Screening.after_round`): answer-level proof
   (:func:`find_result_sharing` -> ``result-sharing`` flag at once), capacity strikes
   (``capacity_strikes`` ``late``/``missing`` verdicts among a node's last
   ``capacity_window`` -> ``capacity`` flag) and the relay test.
5. **Relay** (:func:`relay_check`): over a node's ``RELAY_WINDOW_ROUNDS`` most recent
   rounds, the fastest compute-probe RTT of each round (docs/protocol.md §5.9) against
   that round's echo RTT plus the profile's ``probe_ref_s``
   (:func:`~netcheck.analysis.confirm.relay_excess`) -> ``relay`` flag (``confirmed``);
   a node that answers echoes but no probe correctly in ``RELAY_MIN_ROUNDS`` rounds ->
   ``relay`` flag (``pending``).

Pure helpers (no I/O, no clock): :func:`round_kind`, :func:`hmac_load_rule`,
:func:`timing_rows`, :func:`analyse`, :func:`confirmation_observation`,
:func:`capacity_check`, :func:`probe_pairs`, :func:`relay_check`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import math
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netcheck.analysis.answers import NodeResult, find_result_sharing
from netcheck.analysis.confirm import (
    CLEARED,
    RELAY,
    SHARED_BACKEND,
    ConfirmationObservation,
    ConfirmConfig,
    RelayResult,
    relay_excess,
)
from netcheck.analysis.confirm_run import ConfirmationRun, prior_attempts
from netcheck.analysis.detectors import Detection, DetectorConfig, SuspectGroup, detect
from netcheck.analysis.schedule import MIN_SECRET_BYTES, screening_plan
from netcheck.analysis.timing import TimingMatrix, TimingRow, log_service_matrix, median_polish
from netcheck.analysis.verdicts import NodeOutcome, Verdict
from netcheck.config import Profile
from netcheck.errors import ConfigError, NetcheckError, RoundError
from netcheck.storage.flags import FlagStore, StoredRounds, jsonable

if TYPE_CHECKING:
    from aiohttp import web

    from netcheck.coordinator.planner import RoundPlan
    from netcheck.coordinator.rounds import RoundReport
    from netcheck.coordinator.server import Coordinator

log = logging.getLogger("netcheck.screening")

SECRET_BYTES = 32
CAPACITY = "capacity"
RESULT_SHARING = "result-sharing"
STRIKE_VERDICTS = frozenset({str(Verdict.LATE), str(Verdict.MISSING)})
SCREEN_KINDS = ("screening", "full")
HMAC_RULE = "hmac-sha256/netcheck/1"
SCHEDULE_RULE_TEXT = (
    "loaded = HMAC-SHA256(secret, b'netcheck/1 schedule\\0' + round_id + b'\\0' + "
    "node_key)[0] >> 7 (netcheck.analysis.schedule); full rounds load every node"
)


# --- the secret ----------------------------------------------------------------------


def load_or_create_secret(path: Path) -> bytes:
    """Read the schedule secret at ``path``; create it (32 random bytes, mode 0600,
    parent directories as needed) if it does not exist.

    Raises:
        ConfigError: unreadable, or shorter than 16 bytes.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = secrets.token_bytes(SECRET_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # created concurrently: use that one
            return load_or_create_secret(path)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        log.info("created screening schedule secret %s (mode 0600)", path)
        return data
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read schedule secret: {exc.strerror or exc}") from None
    if len(data) < MIN_SECRET_BYTES:
        raise ConfigError(f"{path}: schedule secret must be at least {MIN_SECRET_BYTES} bytes")
    if os.name == "posix" and path.stat().st_mode & 0o077:
        log.warning("schedule secret %s is readable by group/others; chmod 600 it", path)
    return data


# --- pure planning and analysis ---------------------------------------------------------


def round_kind(index: int, full_every: int) -> str:
    """Kind of the ``index``-th (0-based) screening round: every ``full_every``-th is
    ``full`` (indices ``full_every - 1``, ``2 * full_every - 1``, ...), else ``screening``.

    Raises:
        ValueError: ``index < 0`` or ``full_every < 1``.
    """
    if index < 0 or full_every < 1:
        raise ValueError("need index >= 0 and full_every >= 1")
    return "full" if index % full_every == full_every - 1 else "screening"


def hmac_load_rule(secret: bytes) -> Callable[[str, Sequence[str]], set[str]]:
    """The load rule of screening rounds: ``(round_id, node_keys) -> loaded keys``."""

    def rule(round_id: str, node_keys: Sequence[str]) -> set[str]:
        return {k for k, bit in screening_plan(secret, round_id, node_keys).items() if bit}

    return rule


def _arrived(row: Mapping[str, Any]) -> int | None:
    """Arrival of a *result* (a node's error reply carries no commitment: no result)."""
    return row.get("arrived_ns") if row.get("commitment") else None


def timing_rows(stored: StoredRounds) -> list[TimingRow]:
    """:class:`TimingRow` per stored result row, raw times unchanged.

    A node counts as loaded when its schedule bit is set *and* its release was written
    (a node skipped by the planner or that never acknowledged its job computed nothing);
    a loaded node without a result is left for :func:`log_service_matrix` to censor.
    """
    rows = []
    for r in stored.results:
        bit = stored.schedules.get(r["round_id"], {}).get(r["node_key"], False)
        released = r.get("released_ns")
        loaded = bool(bit) and released is not None
        rows.append(
            TimingRow(r["round_id"], r["node_key"], loaded, released, _arrived(r), r.get("rtt_s"))
        )
    return rows


@dataclass(frozen=True)
class Analysis:
    """Detector output over stored rounds, with the matrix it ran on."""

    matrix: TimingMatrix
    detection: Detection
    deadline_s: float


def analyse(stored: StoredRounds, deadline_s: float, cfg: DetectorConfig) -> Analysis:
    """Stored rows -> ``y`` matrix -> median polish -> detectors (pure).

    Nodes are every node in any stored schedule (sorted); a missing result is censored
    at ``deadline_s`` (the profile's deadline without the RTT terms). With
    ``cfg.drop_full_rounds`` only ``screening`` rounds (random designs) enter: in a full
    round every farm is slowed at once, which links unrelated identities.
    """
    keys = sorted({k for sched in stored.schedules.values() for k in sched})
    round_ids = [
        r for r in stored.round_ids
        if not cfg.drop_full_rounds or stored.kinds.get(r, "screening") == "screening"
    ]  # fmt: skip
    mat = log_service_matrix(timing_rows(stored), keys, round_ids, deadline_s)
    polish = median_polish(mat.y)
    detection = detect(polish.residuals, mat.loaded, tuple(keys), cfg, mat.censored)
    return Analysis(mat, detection, deadline_s)


def confirmation_observation(
    round_id: str,
    schedule: Mapping[str, bool],
    result_rows: Sequence[Mapping[str, Any]],
    deadline_s: float,
) -> ConfirmationObservation:
    """One confirmation round as :func:`judge_confirmation` wants it (pure)."""
    stored = StoredRounds(
        (round_id,), {round_id: "confirmation"}, {round_id: dict(schedule)},
        tuple(dict(r) for r in result_rows if r["round_id"] == round_id),
    )  # fmt: skip
    rows = [r for r in timing_rows(stored) if r.loaded]
    keys = [r.node_key for r in rows]
    mat = log_service_matrix(rows, keys, [round_id], deadline_s)
    values = dict(zip(keys, mat.y[:, 0].tolist(), strict=True))
    return ConfirmationObservation(round_id, frozenset(keys), values)


def capacity_check(
    recent_verdicts: Sequence[Mapping[str, Any]], window: int, strikes: int
) -> tuple[list[Mapping[str, Any]], bool]:
    """Capacity strikes (pure): the ``late``/``missing`` verdicts among the ``window``
    most recent (newest first), and whether there are at least ``strikes`` of them."""
    hits = [v for v in recent_verdicts[:window] if v["verdict"] in STRIKE_VERDICTS]
    return hits, len(hits) >= strikes


#: Relay test (docs/detection.md "Relay test"): a node's most recent this many rounds,
#: of which at least ``RELAY_MIN_ROUNDS`` need a probe RTT; floor and MAD factor are the
#: library defaults of :func:`relay_excess` (15 ms, 3).
RELAY_WINDOW_ROUNDS = 16
RELAY_MIN_ROUNDS = 5
RELAY_FLOOR_S = 0.015
RELAY_MAD_K = 3.0


@dataclass(frozen=True)
class ProbePairs:
    """Per round of one node (oldest first): the fastest correct probe RTT and the echo
    RTT (min of the round's echoes), both in seconds; plus the rounds where echoes were
    answered but no probe was answered correctly (``unanswered``: none came back in
    time, or the answers were wrong)."""

    round_ids: tuple[str, ...]
    probe_rtts_s: tuple[float, ...]
    echo_rtts_s: tuple[float, ...]
    unanswered: tuple[str, ...]


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def probe_pairs(rows: Sequence[Mapping[str, Any]]) -> ProbePairs:
    """Pair probe and echo RTTs per round from stored rows of one node (pure).

    ``rows``: ``results`` rows (oldest first) with ``round_id``, ``rtt_s`` and the
    ``extra`` JSON of :class:`~netcheck.coordinator.rounds.NodeTiming` (``probe_rtt_s``,
    ``probe_samples_s``, ``probe_missed``, ``probe_wrong``). Rows without an echo RTT
    are skipped.
    """
    rids: list[str] = []
    probes: list[float] = []
    echoes: list[float] = []
    unanswered: list[str] = []
    for row in rows:
        extra = row.get("extra") or {}
        echo = _float(row.get("rtt_s"))
        probe = _float(extra.get("probe_rtt_s")) if isinstance(extra, Mapping) else None
        if echo is None:
            continue
        if probe is not None:
            rids.append(str(row["round_id"]))
            probes.append(probe)
            echoes.append(echo)
        elif isinstance(extra, Mapping) and (extra.get("probe_missed") or extra.get("probe_wrong")):
            unanswered.append(str(row["round_id"]))
    return ProbePairs(tuple(rids), tuple(probes), tuple(echoes), tuple(unanswered))


def _relay_suspect(record: Mapping[str, Any], ref_probe_s: float) -> bool:
    """This round's timing of a node warrants the relay test: probe excess above the
    floor, or no correct probe answer while echoes were answered."""
    t = record.get("timing")
    if not isinstance(t, Mapping) or t.get("rtt_s") is None:
        return False
    probe = t.get("probe_rtt_s")
    if probe is None:
        return bool(t.get("probe_missed") or t.get("probe_wrong"))
    return bool(probe - t["rtt_s"] - ref_probe_s > RELAY_FLOOR_S)


def relay_check(pairs: ProbePairs, ref_probe_s: float) -> RelayResult | None:
    """The relay test on one node's pairs (pure): :func:`relay_excess` with the
    module's floor and MAD factor, paired per round; None with fewer than
    ``RELAY_MIN_ROUNDS`` rounds that have a probe RTT."""
    if len(pairs.probe_rtts_s) < RELAY_MIN_ROUNDS:
        return None
    return relay_excess(
        pairs.probe_rtts_s, pairs.echo_rtts_s, ref_probe_s, floor_s=RELAY_FLOOR_S,
        mad_k=RELAY_MAD_K, min_samples=RELAY_MIN_ROUNDS,
    )  # fmt: skip


# --- evidence helpers ---------------------------------------------------------------------


def _receipt(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in ("round_id", "node_key", "session_id", "commitment",
                                    "signature")}  # fmt: skip


def _latency(row: Mapping[str, Any]) -> dict[str, Any]:
    released, arrived, rtt = row.get("released_ns"), _arrived(row), row.get("rtt_s")
    service = None
    if released is not None and arrived is not None:
        service = (arrived - released) / 1e9 - (rtt or 0.0)
    return {"released_ns": released, "arrived_ns": row.get("arrived_ns"), "rtt_s": rtt,
            "result": bool(row.get("commitment")), "service_s": service}  # fmt: skip


def _member_evidence(
    members: Sequence[str], round_ids: Sequence[str], result_rows: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Latencies ``{round_id: {node: ...}}`` and receipts of ``members`` in ``round_ids``."""
    want, rids = set(members), set(round_ids)
    latencies: dict[str, dict[str, Any]] = {}
    receipts = []
    for row in sorted(result_rows, key=lambda r: (r["round_id"], r["node_key"])):
        if row["node_key"] in want and row["round_id"] in rids:
            latencies.setdefault(row["round_id"], {})[row["node_key"]] = _latency(row)
            if row.get("signature"):
                receipts.append(_receipt(row))
    return latencies, receipts


def _flag_statistic(run: ConfirmationRun, flag: Sequence[str]) -> tuple[float, float]:
    """Largest member p inside ``flag`` (the pair tests, or the group test of a pair)
    and the per-member level it was held to."""
    results = [r for pair, r in run.pair_results.items() if set(pair) <= set(flag)]
    if not results and run.group_result is not None:
        results = [run.group_result]
    ps = [t.p for r in results for t in r.members if t.node_key in flag]
    level = min((r.p_threshold for r in results), default=math.nan)
    return max(ps, default=math.nan), level


def _detection_summary(analysis: Analysis) -> dict[str, Any]:
    det = analysis.detection
    return {
        "n_nodes": len(analysis.matrix.node_keys),
        "n_rounds": len(analysis.matrix.round_ids),
        "z_crit": det.z_crit,
        "p_crit": det.p_crit,
        "edges": [dataclasses.asdict(e) for e in det.edges],
        "groups": [list(g.members) for g in det.groups],
    }


# --- the service --------------------------------------------------------------------------


class Screening:
    """Detection state of one coordinator: secret, flag store, timer (module docstring).

    Created by :class:`~netcheck.coordinator.server.Coordinator`; the schedule secret is
    read, or created on first start.

    Raises:
        ConfigError: the secret file is unusable.
        StorageError: the detection tables cannot be created.
    """

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        self.config = coord.config
        self.flags = FlagStore(coord.store)
        self.secret = load_or_create_secret(coord.config.schedule_secret_path)
        self.detector = DetectorConfig()
        self.confirm = ConfirmConfig()
        self.lock = asyncio.Lock()
        self._index: dict[str, int] = {}
        self._timer: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def attach(self, app: web.Application) -> None:
        """Start the screening timer with ``app`` (if configured) and stop it on shutdown."""
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)

    async def _on_startup(self, app: web.Application) -> None:
        if self.config.screening_interval_s > 0:
            self.start_timer()

    async def _on_shutdown(self, app: web.Application) -> None:
        await self.stop_timer()

    def start_timer(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Run :meth:`tick` every ``screening_interval_s`` in the background."""
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._timer_loop(sleep))

    async def stop_timer(self) -> None:
        """Cancel the timer task, if any, and wait for it."""
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    async def _timer_loop(self, sleep: Callable[[float], Awaitable[None]]) -> None:
        log.info("screening timer: one round per profile every %.1f s",
                 self.config.screening_interval_s)  # fmt: skip
        while True:
            await sleep(self.config.screening_interval_s)
            await self.tick()

    async def tick(self) -> None:
        """One timer step: a screening round per profile with connected nodes, and the
        analysis + confirmation every ``screening_analyze_every`` rounds. Errors are
        logged, never raised (the timer keeps going)."""
        for name in sorted(self.coord.profiles):
            if not self.coord.connected(name):
                continue
            try:
                async with self.lock:
                    await self.screening_round(name)
                    if self._index[name] % self.config.screening_analyze_every == 0:
                        await self.analyse_and_confirm(name)
            except NetcheckError as exc:
                log.warning("screening timer, profile %s: %s", name, exc)

    # -- rounds ------------------------------------------------------------------------

    def _profile(self, name: str) -> Profile:
        profile = self.coord.profiles.get(name)
        if profile is None:
            raise RoundError(f"unknown profile {name!r}")
        return profile

    async def screening_round(self, profile_name: str) -> RoundReport:
        """Run the next screening round of ``profile_name`` (every
        ``screening_full_every``-th is a full-load round)."""
        from netcheck.coordinator.rounds import run_round

        index = self._index.get(profile_name, 0)
        kind = round_kind(index, self.config.screening_full_every)
        self._index[profile_name] = index + 1
        if kind == "full":
            return await run_round(self.coord, profile_name, kind="full", rule="all")
        return await run_round(
            self.coord, profile_name, load=hmac_load_rule(self.secret), kind="screening",
            rule=HMAC_RULE,
        )  # fmt: skip

    async def run(self, profile_name: str, n_rounds: int) -> dict[str, Any]:
        """``n_rounds`` screening rounds, then analysis and confirmation (the admin
        ``POST /admin/screening``). Returns a JSON-ready report with the flags raised.

        Raises:
            RoundError: unknown profile, ``n_rounds < 0``, or no node connected.
        """
        self._profile(profile_name)
        if n_rounds < 0:
            raise RoundError("rounds must be >= 0")
        async with self.lock:
            reports = [await self.screening_round(profile_name) for _ in range(n_rounds)]
            outcome = await self.analyse_and_confirm(profile_name)
        round_flags = [f for r in reports for f in r.flags]
        outcome["rounds"] = [{"round_id": r.round_id, "kind": r.kind,
                              "loaded": sorted(k for k, b in r.schedule.items() if b)}
                             for r in reports]  # fmt: skip
        outcome["flags"] = [
            self._brief(i) for i in sorted(set(round_flags) | set(outcome["flag_ids"]))
        ]
        return jsonable(outcome)  # type: ignore[return-value]

    def _brief(self, flag_id: int) -> dict[str, Any]:
        flag = self.flags.get_flag(flag_id) or {"flag_id": flag_id}
        flag.pop("evidence", None)
        return flag

    # -- analysis and confirmation -------------------------------------------------------

    async def analyse_and_confirm(self, profile_name: str) -> dict[str, Any]:
        """Analyse the stored window of ``profile_name``, confirm every suspect group.

        Returns ``{"profile", "analysis", "confirmations", "flag_ids"}``.
        """
        profile = self._profile(profile_name)
        deadline_s = profile.deadline_s(0.0)
        kinds = ("screening",) if self.detector.drop_full_rounds else SCREEN_KINDS
        stored = await asyncio.to_thread(
            self.flags.recent_rounds, profile.name, kinds, self.config.screening_window_rounds,
        )  # fmt: skip
        flag_ids: list[int] = []
        confirmations: list[dict[str, Any]] = []
        if len(stored.round_ids) < 2:
            return {"profile": profile.name, "analysis": None, "confirmations": [],
                    "flag_ids": []}  # fmt: skip
        analysis = await asyncio.to_thread(analyse, stored, deadline_s, self.detector)
        summary = _detection_summary(analysis)
        log.info(
            "screening analysis %s: %d nodes x %d rounds, %d edges, %d suspect groups",
            profile.name, summary["n_nodes"], summary["n_rounds"], len(summary["edges"]),
            len(summary["groups"]),
        )  # fmt: skip
        for group in analysis.detection.groups:
            if await asyncio.to_thread(self._already_flagged, profile.name, group.members):
                confirmations.append({"group": list(group.members), "verdict": "already-flagged"})
                continue
            try:
                run, ids = await self.confirm_group(profile, group, stored, analysis)
            except RoundError as exc:  # e.g. the group's nodes left
                log.warning("confirmation of %s not run: %s", group.members, exc)
                confirmations.append({"group": list(group.members), "verdict": "not-run",
                                      "reason": str(exc)})  # fmt: skip
                continue
            flag_ids.extend(ids)
            confirmations.append({"group": list(group.members), "verdict": run.verdict,
                                  "flags": [list(f) for f in run.flags], "attempt": run.attempt,
                                  "flag_ids": ids})  # fmt: skip
        return {"profile": profile.name, "analysis": summary, "confirmations": confirmations,
                "flag_ids": flag_ids}  # fmt: skip

    def _shared_flags(self, profile: str, status: str | None) -> list[list[str]]:
        return [
            list(f["node_keys"])
            for f in self.flags.list_flags(kind=SHARED_BACKEND, status=status, limit=10_000)
            if f["profile"] == profile
        ]

    def _already_flagged(self, profile: str, members: Sequence[str]) -> bool:
        """Every pair of ``members`` is already inside one confirmed flag."""
        flagged = [set(f) for f in self._shared_flags(profile, "confirmed")]
        return all(
            any({a, b} <= f for f in flagged)
            for a, b in itertools.combinations(sorted(set(members)), 2)
        )

    async def confirm_group(
        self, profile: Profile, group: SuspectGroup, stored: StoredRounds, analysis: Analysis
    ) -> tuple[ConfirmationRun, list[int]]:
        """Confirmation rounds for one suspect group (:class:`ConfirmationRun`, the same
        driver the simulator uses); stores one ``shared-backend`` flag per confirmed
        clique, or one ``cleared`` record; returns the run and the flag ids."""
        from netcheck.coordinator.rounds import run_round

        members = list(group.members)
        earlier = await asyncio.to_thread(self._shared_flags, profile.name, None)
        run = ConfirmationRun(
            tuple(members), self.config.confirm_cycles, self.config.confirm_max_cycles,
            self.confirm, attempt=prior_attempts(members, earlier) + 1,
        )  # fmt: skip
        schedules: dict[str, dict[str, bool]] = {}
        look = 0
        while not run.done:
            block = []
            for load in run.next_block():
                report = await run_round(
                    self.coord, profile.name, load=load, kind="confirmation", rule="explicit",
                    context={"group": members, "phase": run.phase, "look": look},
                )  # fmt: skip
                rows = await asyncio.to_thread(self.flags.round_results, [report.round_id])
                schedules[report.round_id] = report.schedule
                block.append(
                    confirmation_observation(
                        report.round_id, report.schedule, rows, analysis.deadline_s
                    )  # fmt: skip
                )
            run.add(block)
            look += 1
        ids = await asyncio.to_thread(
            self._store_group_flags, profile, group, stored, analysis, run, schedules
        )
        log.warning("suspect group %s: %s %s (flags %s)", [m[:20] for m in members],
                    run.verdict, [[m[:12] for m in f] for f in run.flags], ids)  # fmt: skip
        return run, ids

    def _store_group_flags(
        self, profile: Profile, group: SuspectGroup, stored: StoredRounds, analysis: Analysis,
        run: ConfirmationRun, schedules: Mapping[str, dict[str, bool]],
    ) -> list[int]:  # fmt: skip
        members = list(group.members)
        observations = run.observations
        conf_ids = [o.round_id for o in observations]
        conf_rows = self.flags.round_results(conf_ids)
        lat_s, rec_s = _member_evidence(members, stored.round_ids, stored.results)
        lat_c, rec_c = _member_evidence(members, conf_ids, conf_rows)
        bits = {m: [int(stored.schedules[r].get(m, False)) for r in stored.round_ids]
                for m in members}  # fmt: skip
        group_res = run.group_result
        assert group_res is not None
        evidence: dict[str, Any] = {
            "rule": (
                "group phase: each member's co-loaded (whole group) minus alone mean log "
                "service time tested one-sided (Welch) against H0: effect <= effect_floor "
                "at p_threshold; split phase (unless the group is a pair): each pair of "
                "passing members loaded alone together vs each alone, both members must "
                "pass; a flag = a maximal clique of passing pairs; statistic = the "
                "largest p of the pair tests inside the flag (smallest p if cleared)"
            ),
            "group": members,
            "flags": [list(f) for f in run.flags],
            "attempt": run.attempt,
            "alpha_attempt": run.alpha,
            "screening": {
                "rounds": list(stored.round_ids),
                "kinds": [stored.kinds[r] for r in stored.round_ids],
                "schedule_rule": SCHEDULE_RULE_TEXT,
                "schedule_bits": bits,
                "edges": [dataclasses.asdict(e) for e in group.edges],
                "z_crit": analysis.detection.z_crit,
                "p_crit": analysis.detection.p_crit,
                "detector_config": dataclasses.asdict(self.detector),
                "censor_deadline_s": analysis.deadline_s,
                "latencies": lat_s,
            },
            "confirmation": {
                "rounds": [
                    {
                        "round_id": o.round_id,
                        "loaded": sorted(o.loaded),
                        "schedule": schedules[o.round_id],
                        "log_service": dict(o.log_service),
                    }
                    for o in observations
                ],  # fmt: skip
                "members": [dataclasses.asdict(t) for t in group_res.members],
                "p_threshold": group_res.p_threshold,
                "effect_floor": group_res.effect_floor,
                "beta_estimate": group_res.beta_estimate,
                "pairs": [
                    {
                        "pair": list(pair),
                        "members": [dataclasses.asdict(t) for t in r.members],
                        "p_threshold": r.p_threshold,
                    }
                    for pair, r in run.pair_results.items()
                ],  # fmt: skip
                "looks": run.looks,
                "confirm_config": dataclasses.asdict(run.judge_config()),
                "latencies": lat_c,
            },
            "receipts": rec_s + rec_c,
        }
        if not run.flags:
            p_min = min((t.p for t in group_res.members if math.isfinite(t.p)), default=math.nan)
            evidence["confirmed_members"] = list(group_res.confirmed_members)
            return [self.flags.add_flag(SHARED_BACKEND, CLEARED, profile.name, members, p_min,
                                        group_res.p_threshold, evidence)]  # fmt: skip
        ids = []
        for flag in run.flags:
            stat, level = _flag_statistic(run, flag)
            ids.append(self.flags.add_flag(SHARED_BACKEND, "confirmed", profile.name, flag,
                                           stat, level,
                                           {**evidence, "confirmed_members": list(flag)}))  # fmt: skip
        return ids

    # -- per-round checks ------------------------------------------------------------------

    async def after_round(
        self,
        profile: Profile,
        plan: RoundPlan,
        outcomes: Sequence[NodeOutcome],
        records: Mapping[str, Mapping[str, Any]],
    ) -> list[int]:
        """Answer-level proof and capacity strikes after a recorded round; returns the
        ids of new flags. Storage errors are logged, not raised (the round stands)."""
        try:
            ids = await asyncio.to_thread(self._result_sharing, profile, plan, records)
            ids += await asyncio.to_thread(self._capacity, profile, plan.round_id, outcomes)
            ids += await asyncio.to_thread(self._relay, profile, records)
        except NetcheckError as exc:
            log.error("round %s: detection checks failed: %s", plan.round_id, exc)
            return []
        return ids

    def _result_sharing(
        self, profile: Profile, plan: RoundPlan, records: Mapping[str, Mapping[str, Any]]
    ) -> list[int]:
        results: dict[str, NodeResult] = {}
        for key, rec in records.items():
            if rec.get("outputs") is not None:
                commit = rec.get("commitment")
                results[key] = NodeResult(bytes.fromhex(commit) if commit else None,
                                          rec["outputs"])  # fmt: skip
        prompts = {a.node_key: a.prompts for a in plan.assignments}
        ids = []
        for f in find_result_sharing(plan.round_id, results, prompts):
            receipts = [
                {"round_id": plan.round_id, "node_key": k, **{
                    x: records[k].get(x) for x in ("session_id", "commitment", "signature")}}
                for k in (f.a, f.b)
            ]  # fmt: skip
            evidence = {
                "rule": "distinct batches never give equal commitments or equal output rows "
                "for different prompts; statistic = matching rows (or 1 for a commitment)",
                "round_id": plan.round_id,
                "rounds": [plan.round_id],
                "evidence": f.evidence,
                "commitment": f.commitment_hex,
                "positions": [list(p) for p in f.positions],
                "prompts": {k: list(prompts.get(k, ())) for k in (f.a, f.b)},
                "outputs": {k: records[k].get("outputs") for k in (f.a, f.b)},
                "receipts": receipts,
            }
            stat = float(len(f.positions) or 1)
            ids.append(self.flags.add_flag(RESULT_SHARING, "confirmed", profile.name,
                                           [f.a, f.b], stat, 1.0, evidence))  # fmt: skip
            log.warning("round %s: result sharing between %s and %s (%s)",
                        plan.round_id, f.a[:20], f.b[:20], f.evidence)  # fmt: skip
        return ids

    def _capacity(
        self, profile: Profile, round_id: str, outcomes: Sequence[NodeOutcome]
    ) -> list[int]:
        window, need = self.config.capacity_window, self.config.capacity_strikes
        ids = []
        for o in outcomes:
            if str(o.verdict) not in STRIKE_VERDICTS:
                continue
            recent = self.flags.recent_verdicts(o.node_key, window)
            hits, failed = capacity_check(recent, window, need)
            if not failed or self._capacity_flagged(o.node_key, [v["round_id"] for v in recent]):
                continue
            rounds_ = [v["round_id"] for v in recent]
            rows = [r for r in self.flags.round_results(rounds_) if r["node_key"] == o.node_key]
            evidence = {
                "rule": "capacity when late/missing verdicts among the node's last "
                "capacity_window verdicts >= capacity_strikes (statistic = strikes)",
                "rounds": rounds_,
                "strike_rounds": [v["round_id"] for v in hits],
                "verdicts": [dict(v) for v in recent],
                "window": window,
                "deadline_params": profile.deadline.model_dump(),
                "latencies": {r["round_id"]: _latency(r) for r in rows},
                "receipts": [_receipt(r) for r in rows if r.get("signature")],
            }
            ids.append(self.flags.add_flag(CAPACITY, "confirmed", profile.name, [o.node_key],
                                           float(len(hits)), float(need), evidence))  # fmt: skip
            log.warning("node %s: capacity flag (%d strikes in %d verdicts)",
                        o.node_key[:20], len(hits), len(recent))  # fmt: skip
        return ids

    def _relay(self, profile: Profile, records: Mapping[str, Mapping[str, Any]]) -> list[int]:
        """The relay test over the recent rounds' stored probe and echo RTTs of every
        node whose probe in this round exceeded the floor or went unanswered (a
        persistent excess shows in most rounds; docs/detection.md "Relay test")."""
        store = self.flags.store
        suspects = [k for k, rec in records.items() if _relay_suspect(rec, profile.probe_ref_s)]
        by_round: dict[str, dict[str, dict[str, Any]]] = {}

        def row(round_id: str, node_key: str) -> dict[str, Any] | None:
            if round_id not in by_round:
                by_round[round_id] = {r["node_key"]: r for r in store.round_verdicts(round_id)}
            return by_round[round_id].get(node_key)

        ids = []
        for node in sorted(suspects):
            recent = self.flags.recent_verdicts(node, RELAY_WINDOW_ROUNDS)[::-1]
            rows = [r for v in recent if (r := row(v["round_id"], node)) is not None]
            pairs = probe_pairs(rows)
            res = relay_check(pairs, profile.probe_ref_s)
            flagged = res is not None and res.flagged
            silent = res is None and len(pairs.unanswered) >= RELAY_MIN_ROUNDS
            if not (flagged or silent):
                continue
            window = [v["round_id"] for v in recent]
            if self._relay_flagged(node, window):
                continue
            evidence = self._relay_evidence(profile, node, rows, pairs, res)
            if flagged:
                assert res is not None
                ids.append(self.flags.add_flag(RELAY, "confirmed", profile.name, [node],
                                               res.median_excess_s, res.threshold_s, evidence))  # fmt: skip
                log.warning("node %s: relay flag (probe excess %.1f ms > %.1f ms)",
                            node[:20], res.median_excess_s * 1e3, res.threshold_s * 1e3)  # fmt: skip
            else:
                ids.append(self.flags.add_flag(RELAY, "pending", profile.name, [node],
                                               float(len(pairs.unanswered)),
                                               float(RELAY_MIN_ROUNDS), evidence))  # fmt: skip
                log.warning("node %s: relay flag (pending): probes unanswered in %d rounds",
                            node[:20], len(pairs.unanswered))  # fmt: skip
        return ids

    @staticmethod
    def _relay_evidence(
        profile: Profile, node: str, rows: Sequence[Mapping[str, Any]], pairs: ProbePairs,
        res: RelayResult | None,
    ) -> dict[str, Any]:  # fmt: skip
        keys = ("echo_samples_s", "probe_samples_s", "probe_rtt_s", "probe_missed", "probe_wrong")
        return {
            "rule": (
                "relay when, over the node's rounds with a probe RTT (>= min_rounds), "
                "median(probe_rtt - echo_rtt - probe_ref_s) > floor_s + mad_k * MAD "
                "(statistic = median excess, s); pending when echoes were answered but "
                "no probe correctly in >= min_rounds rounds (statistic = such rounds)"
            ),
            "rounds": [r["round_id"] for r in rows],
            "probe_rounds": list(pairs.round_ids),
            "probe_rtts_s": list(pairs.probe_rtts_s),
            "echo_rtts_s": list(pairs.echo_rtts_s),
            "unanswered_rounds": list(pairs.unanswered),
            "probe_ref_s": profile.probe_ref_s,
            "floor_s": RELAY_FLOOR_S,
            "mad_k": RELAY_MAD_K,
            "min_rounds": RELAY_MIN_ROUNDS,
            "window_rounds": RELAY_WINDOW_ROUNDS,
            "relay": None if res is None else dataclasses.asdict(res),
            "samples": {
                r["round_id"]: {
                    "rtt_s": r.get("rtt_s"),
                    **{k: (r.get("extra") or {}).get(k) for k in keys},
                }
                for r in rows
            },  # fmt: skip
            "probe_definition": "netcheck.engines.probe (docs/protocol.md §5.9)",
            "receipts": [_receipt(r) for r in rows if r.get("signature")],
        }

    def _relay_flagged(self, node_key: str, window_rounds: Sequence[str]) -> bool:
        """A relay flag of this node already covers a round of the current window."""
        window = set(window_rounds)
        for f in self.flags.list_flags(kind=RELAY, node_key=node_key, limit=50):
            full = self.flags.get_flag(int(f["flag_id"]))
            if full and window & set(full["evidence"].get("rounds", [])):
                return True
        return False

    def _capacity_flagged(self, node_key: str, window_rounds: Sequence[str]) -> bool:
        """A capacity flag of this node already covers a round of the current window."""
        window = set(window_rounds)
        for f in self.flags.list_flags(kind=CAPACITY, node_key=node_key, limit=50):
            full = self.flags.get_flag(int(f["flag_id"]))
            if full and window & set(full["evidence"].get("strike_rounds", [])):
                return True
        return False
