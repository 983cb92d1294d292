"""Detection wired into a live in-process coordinator (real loopback websockets, fake
engines): load sets, stored schedules, result-sharing and capacity flags, admin API, timer,
earlier confirmation rounds read back for pooling."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.detector_config import DetectorConfig
from netcheck.analysis.slowness import NodeSlowness, SlownessReport, spent_level
from netcheck.config import DeadlineParams
from netcheck.coordinator.alone import confirm_alone
from netcheck.coordinator.jobs import ConfirmProgress
from netcheck.coordinator.rounds import run_round
from netcheck.errors import EngineError
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.testing import (
    FAKE_FINGERPRINT,
    RunningCoordinator,
    canary_store,
    running_coordinator,
    small_profile,
)
from netcheck.storage import Store

T = 8
PROFILE = small_profile(
    "test", prompt_len=16, max_new_tokens=T, deadline=DeadlineParams(t_ref_s=1.0),
    dispatch_timeout_s=5.0, result_timeout_s=5.0,
)  # fmt: skip
FP = FAKE_FINGERPRINT


class Constant:
    """Returns the same rows for every prompt: two such nodes share one computation."""

    fingerprint = FP

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        return [[5] * T for _ in prompts]


class Failing:
    """Reports an engine error for every batch (verdict ``missing``)."""

    fingerprint = FP

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        raise EngineError("boom")


def _store(tmp_path: Path, n: int = 200) -> Store:
    return canary_store(tmp_path / "netcheck.db", PROFILE, FP, n, answer=(1,) * T)


async def _join(rc: RunningCoordinator, workers: dict[str, Any]) -> dict[str, str]:
    names = rc.start_named(workers, PROFILE.name)
    await rc.wait_connected(len(workers))
    return names


async def test_round_with_load_set_stores_full_schedule(tmp_path: Path) -> None:
    """Only loaded nodes get a job; the schedule of every connected node is stored."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        keys = await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(3)})
        report = await run_round(rc.coord, PROFILE.name, load={keys["n1"]}, kind="screening")
        assert [o.node_key for o in report.outcomes] == [keys["n1"]]
        assert report.schedule == {k: k == keys["n1"] for k in keys.values()}
        row = rc.coord.screening.flags.schedule(report.round_id)
        assert row is not None and row["kind"] == "screening" and row["rule"] == "explicit"
        assert row["schedule"] == report.schedule
        raw = rc.coord.store.result_row(report.round_id, keys["n1"])
        assert raw is not None and raw["released_ns"] < raw["arrived_ns"]
        assert rc.coord.store.result_row(report.round_id, keys["n0"]) is None
        with pytest.raises(Exception, match="kind"):
            await run_round(rc.coord, PROFILE.name, kind="bogus")


async def test_identical_results_raise_result_sharing_flag(tmp_path: Path) -> None:
    """Two nodes returning one computation for different batches are flagged at once."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        keys = await _join(rc, {"a": Constant(), "b": Constant(), "h": MadeUpWorker(FP, T)})
        report = await run_round(rc.coord, PROFILE.name)
        assert len(report.flags) == 1
        flag = rc.coord.screening.flags.get_flag(report.flags[0])
        assert flag is not None
        assert (flag.kind, flag.status) == ("result-sharing", "confirmed")
        assert list(flag.node_keys) == sorted([keys["a"], keys["b"]])
        ev = flag.evidence
        assert ev is not None
        assert ev["evidence"] == "commitment" and ev["round_id"] == report.round_id
        assert all(r["signature"] and r["session_id"] for r in ev["receipts"])


async def test_capacity_strikes_raise_one_flag(tmp_path: Path) -> None:
    """Missing results raise one capacity flag (the capacity test: 2 strikes in a row
    at p0 = 0.001), not one per round."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        update = {
            "capacity_window": 3,
            "capacity_strikes": 2,
            "capacity_p0": 0.001,
            "screening_load_probability": 0.5,
        }  # p0 is stated at q 1/2; these all-nodes rounds count at share 1
        cfg = rc.coord.config.model_copy(update=update)
        rc.coord.config = rc.coord.screening.config = cfg
        keys = await _join(rc, {"bad": Failing(), "ok": MadeUpWorker(FP, T)})
        fs = rc.coord.screening.flags

        def capacity_flags(report: Any) -> list[int]:  # "ok" answers wrong: answer-failure
            return [
                f
                for f in report.flags
                if (g := fs.get_flag(f)) is not None and g.kind == "capacity"
            ]

        first = await run_round(rc.coord, PROFILE.name)
        assert capacity_flags(first) == []
        second = await run_round(rc.coord, PROFILE.name)
        assert len(capacity_flags(second)) == 1
        third = await run_round(rc.coord, PROFILE.name)
        assert capacity_flags(third) == []  # the same strikes are already covered
        flag = rc.coord.screening.flags.get_flag(capacity_flags(second)[0])
        assert flag is not None and flag.kind == "capacity"
        assert flag.node_keys == (keys["bad"],)
        # P(the other strike) = the null: p0 scaled for the share of the first round, an
        # all-nodes round (share 1, session 12: p0 / coupled_share(1/2, 4) = p0 / 0.7)
        assert flag.evidence is not None and flag.evidence["coupled_share"] == 1.0
        assert flag.statistic == pytest.approx(0.001 / 0.7)
        assert flag.threshold == pytest.approx(0.03 * 6 / math.pi**2)  # 1st look
        assert flag.evidence is not None
        assert flag.evidence["strike_rounds"] == [second.round_id, first.round_id]


async def test_admin_screening_and_flag_routes(tmp_path: Path) -> None:
    """POST /admin/screening runs screening and full rounds; flags are listed and shown."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        # The four in-process nodes share the coordinator's event loop, i.e. one backend:
        # on a loaded machine their co-loaded rounds really run late, and since session 9
        # (one testable direction, all-loaded screening rounds kept) three rounds can
        # nominate and confirm a pair of them (seen once in a full-suite run). This test
        # is about the routes: contention edges are switched off by an unreachable floor.
        rc.coord.screening.detector = DetectorConfig(effect_floor=10.0, use_correlation=False)
        await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(4)})
        headers = {"Authorization": f"Bearer {rc.coord.config.admin_token}"}
        base = f"http://127.0.0.1:{rc.port}"
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.post(f"{base}/admin/screening", json={"rounds": 4}) as resp:
                assert resp.status == 200, await resp.text()
                body = await resp.json()
            assert [r["kind"] for r in body["rounds"]] == ["screening"] * 3 + ["full"]
            # the full round is no random design: the analysis reads the 3 others
            assert body["analysis"]["n_rounds"] == 3 and body["analysis"]["n_nodes"] == 4
            # every node answers with made-up tokens: answer-failure flags, nothing else
            assert {f["kind"] for f in body["flags"]} <= {"answer-failure"}
            assert body["confirmations"] == []
            async with http.post(f"{base}/admin/screening", json={"rounds": -1}) as resp:
                assert resp.status == 400
            fid = rc.coord.screening.flags.add_flag("relay", "pending", "test", ["k"], 1.0, 0.5, {})
            async with http.get(f"{base}/admin/flags?kind=relay") as resp:
                assert [f["flag_id"] for f in (await resp.json())["flags"]] == [fid]
            async with http.get(f"{base}/admin/flags/{fid}") as resp:
                assert (await resp.json())["evidence"] == {}
            async with http.get(f"{base}/admin/flags/{fid + 1}") as resp:
                assert resp.status == 404


async def test_timer_runs_screening_rounds(tmp_path: Path) -> None:
    """The timer runs one screening round per tick (injected sleep, no wall-clock wait)."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        await _join(rc, {f"n{i}": MadeUpWorker(FP, T) for i in range(2)})
        ticks = 0
        third = asyncio.Event()

        async def fake_sleep(_s: float) -> None:
            nonlocal ticks
            ticks += 1
            if ticks == 3:
                third.set()
                await asyncio.Event().wait()  # park the timer

        rc.coord.screening.start_timer(fake_sleep)
        await asyncio.wait_for(third.wait(), 30)
        await rc.coord.screening.stop_timer()
        rounds = rc.coord.store.list_rounds()
        assert len(rounds) == 2
        kinds = {rc.coord.screening.flags.schedule(r["round_id"])["kind"] for r in rounds}  # type: ignore[index]
        assert kinds == {"screening"}


class _Slow(MadeUpWorker):
    """Made-up tokens after 3 s: a round stays in flight long enough to shut down in."""

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        await asyncio.sleep(3.0)
        return await super().run(prompts)


async def test_shutdown_ends_a_timer_round_in_flight_as_aborted(tmp_path: Path) -> None:
    """SIGTERM while a timer round waits for results: the round is stored ``aborted``
    with no verdicts, as an admin-run round is (tests/adversarial, "shutdown mid
    round"); before, the timer was cancelled mid-round and the round stayed
    ``planned`` until the next start."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        await _join(rc, {f"n{i}": _Slow(FP, T) for i in range(2)})
        sleeps = 0

        async def fake_sleep(_s: float) -> None:
            nonlocal sleeps
            sleeps += 1
            if sleeps > 1:
                await asyncio.Event().wait()  # one round only

        screening = rc.coord.screening  # every round full: a screening round's coins
        # could load neither node (1 in 9), and such a round is never released
        screening.config = screening.config.model_copy(update={"screening_full_every": 1})
        screening.start_timer(fake_sleep)
        loop = asyncio.get_running_loop()
        end = loop.time() + 15.0
        while not any(s._results for s in rc.coord.sessions.values()):  # released
            assert loop.time() < end, "the timer round was never released"
            await asyncio.sleep(0.02)
        await rc.runner.shutdown()  # the on_shutdown handlers, as SIGTERM runs them
        end = loop.time() + 10.0
        while (rounds := rc.coord.store.list_rounds())[0]["status"] == "planned":
            if loop.time() > end:
                break
            await asyncio.sleep(0.05)
        assert [r["status"] for r in rounds] == ["aborted"], rounds
        assert rc.coord.store.round_verdicts(rounds[0]["round_id"]) == []


async def test_earlier_confirmation_rounds_of_the_group_are_read_back(tmp_path: Path) -> None:
    """Rounds of an earlier run that tested the pair come back as observations with
    their phase and tested set (oldest first, with the members' and loaded bits);
    rounds that loaded a non-member, the alone stage's rounds and rounds without a
    recorded tested set do not; with ``confirm_pool_rounds = 0`` nothing does."""
    async with running_coordinator(tmp_path, [PROFILE], store=_store(tmp_path)) as rc:
        keys = await _join(rc, {n: MadeUpWorker(FP, T) for n in ("a", "b", "x")})
        a, b, x = keys["a"], keys["b"], keys["x"]
        pair = {"group": sorted((a, b)), "phase": "group", "look": 0, "tested": sorted((a, b))}
        ids = {}
        for name, load, ctx in (
            ("ab", {a, b}, pair), ("ax", {a, x}, pair), ("a", {a}, pair),
            ("x", {x}, pair), ("b", {b}, pair), ("alone", {a}, {"slowness": a, "round": 0}),
            ("bare", {b}, None),
        ):  # fmt: skip
            report = await run_round(rc.coord, PROFILE.name, load=load, kind="confirmation",
                                     rule="explicit", context=ctx)  # fmt: skip
            ids[name] = report.round_id
        screening = rc.coord.screening
        schedules: dict[str, dict[str, bool]] = {}
        got = screening._prior_observations(PROFILE.name, [a, b], 10.0, schedules)
        assert [o.round_id for o in got] == [ids["ab"], ids["a"], ids["b"]]
        assert [set(o.loaded) for o in got] == [{a, b}, {a}, {b}]
        assert {(o.phase, o.tested) for o in got} == {("group", frozenset({a, b}))}
        assert all(math.isfinite(v) for o in got for v in o.log_service.values())
        assert set(schedules) == {ids["ab"], ids["a"], ids["b"]}
        assert schedules[ids["a"]] == {a: True, b: False}  # members' and loaded bits only
        screening.config = screening.config.model_copy(update={"confirm_pool_rounds": 0})
        assert screening._prior_observations(PROFILE.name, [a, b], 10.0, {}) == ()


class Delayed(MadeUpWorker):
    """Made-up answers after ``delay_s`` (EMULATED service time)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(FP, T)
        self.delay_s = delay_s

    async def run(self, prompts: Sequence[str]) -> list[list[int]]:
        await asyncio.sleep(self.delay_s)
        return await super().run(prompts)


async def test_slowness_nominees_are_judged_on_rounds_loading_them_alone(tmp_path: Path) -> None:
    """Two nominees get rounds loading each alone: the node at 2x t_ref alone (which
    the screening test rejected: not a flag by itself) gets a confirmed slow flag
    (stage alone, its alone rounds as evidence, and why screening nominated it); the
    fast one a cleared record; the fast one's second attempt pools both attempts'
    rounds at the second attempt's level."""
    fast_profile = PROFILE.model_copy(update={"deadline": DeadlineParams(t_ref_s=0.1)})
    async with running_coordinator(tmp_path, [fast_profile], store=_store(tmp_path)) as rc:
        keys = await _join(rc, {"slow": Delayed(0.2), "fast": Delayed(0.0)})
        slow, fast = keys["slow"], keys["fast"]
        screening = rc.coord.screening
        screening.alone = AloneConfig(rounds=8)
        nodes = tuple(
            NodeSlowness(k, tuple(f"s{i}" for i in range(10)), (1.5,) * 10, 10, 10, 1.5, 1e-3,
                         1e-4, k == slow)
            for k in (slow, fast)
        )  # fmt: skip
        report = SlownessReport(0.1, 1.25, 0.01, 1, 1e-4, 8, 1.0, True, nodes)
        progress = ConfirmProgress()
        ids = await confirm_alone(rc.coord, screening.flags, fast_profile, report, screening.alone,
                                  progress=progress)  # fmt: skip
        alone = screening.flags.recent_rounds(fast_profile.name, ["confirmation"], 1000)
        assert progress.stage == "alone" and progress.rounds_done == len(alone.round_ids) >= 16
        got = {f.node_keys[0]: f for f in (screening.flags.get_flag(i) for i in ids) if f}
        assert (got[slow].kind, got[slow].status) == ("slow", "confirmed")
        assert (got[fast].kind, got[fast].status) == ("slow", "cleared")
        ev = got[slow].evidence or {}
        assert ev["stage"] == "alone" and ev["n"] == 8 and ev["above"] == 8
        assert "only node loaded" in ev["rule"] and len(ev["latencies"]) == 8
        assert ev["screening"]["rejected"] and "rejected at its level" in ev["screening"]["by"]
        assert ev["screening"]["ratios"] == [1.5] * 10 and "sign test" in ev["screening"]["rule"]
        cleared = got[fast].evidence or {}
        assert not cleared["screening"]["rejected"] and "alone floor" in cleared["screening"]["by"]
        again = await confirm_alone(rc.coord, screening.flags, fast_profile, report,
                                    screening.alone, skip={slow})  # fmt: skip
        second = screening.flags.get_flag(again[0])
        assert second is not None and second.evidence is not None
        assert second.evidence["attempt"] == 2 and second.evidence["n"] == 16
        assert second.evidence["level"] == spent_level(0.01, 2)


async def test_a_promising_alone_attempt_is_followed_by_the_next_at_once(tmp_path: Path) -> None:
    """At alpha 5e-5 a node at 2x t_ref in every alone round is not flagged by 8 rounds
    (p 0.0039 > level 3.0e-5) nor 16 (1.5e-5 > 7.6e-6), but is promising: in one
    analysis it gets 3 attempts of 8 rounds each, every one stored as its next attempt
    (cleared, cleared, then confirmed at attempt 3 on all 24 rounds); the fast nominee
    (p 1) gets one. With ``max_attempts = 1`` (before session 7) one attempt each."""
    fast_profile = PROFILE.model_copy(update={"deadline": DeadlineParams(t_ref_s=0.1)})
    async with running_coordinator(tmp_path, [fast_profile], store=_store(tmp_path)) as rc:
        keys = await _join(rc, {"slow": Delayed(0.2), "fast": Delayed(0.0), "once": Delayed(0.2)})
        slow, fast, once = keys["slow"], keys["fast"], keys["once"]
        flags = rc.coord.screening.flags
        nodes = tuple(
            NodeSlowness(k, tuple(f"s{i}" for i in range(10)), (1.5,) * 10, 10, 10, 1.5, 1e-3,
                         1e-4, True)
            for k in (slow, fast, once)
        )  # fmt: skip
        report = SlownessReport(0.1, 1.25, 0.01, 1, 1e-4, 8, 1.0, True, nodes)
        cfg = AloneConfig(rounds=8, alpha=5e-5)
        ids = await confirm_alone(rc.coord, flags, fast_profile, report, cfg, skip={once})
        got = [f for f in (flags.get_flag(i) for i in ids) if f and f.evidence]
        runs = [(f.node_keys[0], f.status, f.evidence["attempt"], f.evidence["n"],
                 f.evidence["attempt_in_analysis"]) for f in got if f.evidence]  # fmt: skip
        assert runs == [
            (slow, "cleared", 1, 8, 1),
            (slow, "cleared", 2, 16, 2),
            (slow, "confirmed", 3, 24, 3),
            (fast, "cleared", 1, 8, 1),
        ]
        assert [f.evidence["level"] for f in got[:3] if f.evidence] == [
            spent_level(5e-5, k) for k in (1, 2, 3)
        ]
        single = AloneConfig(rounds=8, alpha=5e-5, max_attempts=1)
        ids = await confirm_alone(rc.coord, flags, fast_profile, report, single, skip={slow})
        got = [f for f in (flags.get_flag(i) for i in ids) if f and f.evidence]
        assert [(f.node_keys[0], f.status, f.evidence["attempt"]) for f in got if f.evidence] == [
            (fast, "cleared", 2), (once, "cleared", 1)
        ]  # fmt: skip
