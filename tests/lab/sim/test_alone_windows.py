"""The alone stage's windows are the same in the coordinator and in the simulator:
one history of alone rounds (contention confirmation's member-alone rounds between the
alone stage's attempts) through a live coordinator and through
:class:`~netcheck.lab.sim.live.LiveSimulation` gives each attempt the same window
(docs/detection.md "Confirmation alone", netcheck/analysis/alone.py "Level")."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.slowness import NodeSlowness, SlownessReport
from netcheck.config import DeadlineParams
from netcheck.coordinator.alone import confirm_alone, record_alone_test
from netcheck.coordinator.rounds import run_round
from netcheck.lab.adversary import MadeUpWorker
from netcheck.lab.sim.live import LiveConfig, LiveSimulation
from netcheck.lab.sim.population import PopulationSpec, make_population
from netcheck.lab.testing import (
    FAKE_FINGERPRINT,
    canary_store,
    running_coordinator,
    small_profile,
)

T = 4
PROFILE = small_profile(
    "windows", prompt_len=16, max_new_tokens=T, deadline=DeadlineParams(t_ref_s=0.1),
    dispatch_timeout_s=5.0, result_timeout_s=5.0,
)  # fmt: skip
CFG = AloneConfig(rounds=8, max_attempts=1)
#: the history: ("cont", n) n member-alone rounds of a contention confirmation, ("pair",
#: 1) a confirmation round loading the node and another, ("stage", 0) an attempt
SCRIPT = (("cont", 5), ("pair", 1), ("stage", 0), ("cont", 12), ("stage", 0), ("stage", 20),
          ("stage", 0))  # fmt: skip
#: each attempt's window, by source of its rounds: topped up by 3, none (4 of the 12
#: contention rounds wait), then 4; after 20 more, attempts 4 and 5 in one analysis
#: without a round (catch-up), 4 rounds waiting
FIRST = ["cont"] * 5 + ["stage"] * 3 + ["cont"] * 12 + ["stage"] * 4
WANT = [FIRST[:8], FIRST[:16], FIRST, FIRST + ["cont"] * 8, FIRST + ["cont"] * 16]
#: the alone stage's rounds run by each attempt's end
WANT_RUN = [3, 3, 7, 7, 7]


def _report(key: str) -> SlownessReport:
    node = NodeSlowness(key, ("s",) * 10, (1.5,) * 10, 10, 10, 1.5, 1e-3, 1e-4, True)
    return SlownessReport(0.1, 1.25, 0.01, 1, 1e-4, 8, 1.0, True, (node,))


async def _live(tmp_path: Path) -> tuple[list[list[str]], list[int]]:
    """The script on a live coordinator: each attempt's window by source, and the
    alone stage's rounds run by its end."""
    store = canary_store(tmp_path / "netcheck.db", PROFILE, FAKE_FINGERPRINT, 200, answer=(1,) * T)
    async with running_coordinator(tmp_path, [PROFILE], store=store) as rc:
        workers = {n: MadeUpWorker(FAKE_FINGERPRINT, T) for n in ("node", "other")}
        keys = rc.start_named(workers, PROFILE.name)
        await rc.wait_connected(2)
        key, flags = keys["node"], rc.coord.screening.flags
        group = {"group": sorted(keys.values()), "phase": "group", "look": 0}
        windows, run = [], []
        for what, n in SCRIPT:
            if what == "stage":
                if len(windows) == 2:  # the node is short of attempt 3's window: no test
                    assert record_alone_test(flags, PROFILE, key, CFG) is None
                    assert len(flags.list_flags(kind="slow", limit=None)) == 2
                for fid in await confirm_alone(rc.coord, flags, PROFILE, _report(key), CFG):
                    flag = flags.get_flag(fid)
                    assert flag is not None and flag.evidence is not None
                    assert flag.evidence["window"] == [1, 8 * (len(windows) + 1)]
                    windows.append([
                        "stage" if "slowness" in (flags.schedule(r) or {}).get("context", {})
                        else "cont" for r in flag.evidence["rounds"]
                    ])  # fmt: skip
                    contexts = flags.round_contexts(PROFILE.name, ["confirmation"])
                    run.append(sum("slowness" in c for c in contexts))
            for _ in range(n):
                load = set(keys.values()) if what == "pair" else {key}
                await run_round(rc.coord, PROFILE.name, load=load, kind="confirmation",
                                rule="explicit", context=group)  # fmt: skip
        return windows, run


def _simulated() -> tuple[list[list[str]], list[int]]:
    """The script in the simulator: each attempt's window by source, and the alone
    stage's rounds run by its end."""
    spec = PopulationSpec(n_nodes=6, farm_sizes=(2,), cohosted_pairs=0, adversary="pad")
    pop = make_population(spec, np.random.default_rng(1))
    sim = LiveSimulation(pop, LiveConfig(alone=CFG), np.random.default_rng(2))
    key, other = sorted(pop.honest)[:2]  # judged and cleared at every attempt
    windows, run, before = [], [], 0
    for what, n in SCRIPT:
        if what == "stage":
            sim._confirm_alone(key, CFG)
            for test in sim.state.alone_tests[key][len(windows) :]:
                windows.append(
                    ["cont" if r.startswith("cont") else "stage" for r in test.round_ids]
                )
                run.append(sim.state.confirmation_rounds)  # the injected rounds are not counted
            assert sim.state.alone_attempts[key] == len(windows)
        for i in range(n):
            rid = f"cont-{before + i}"
            sim._round(rid, "confirmation", np.array([k in (key, other)[: 1 + (what == "pair")]
                                                      for k in pop.node_keys]))  # fmt: skip
        before += n
    return windows, run


async def test_coordinator_and_simulator_judge_the_same_windows(tmp_path: Path) -> None:
    """Five member-alone rounds of a contention confirmation and one round loading the
    node with another, then an attempt (8 rounds a window): the stage tops up 3 rounds;
    twelve more member-alone rounds, then attempt 2 runs no round and judges 8 of them;
    attempt 3 cannot run on 20 (coordinator: nothing stored) and tops up 4; twenty
    more, and one analysis runs attempts 4 and 5 without a round (catch-up: their
    windows are complete), not 6 (4 rounds short). Both run the same rounds and judge
    the same windows; the evidence names them."""
    assert _simulated() == (WANT, WANT_RUN)
    assert await _live(tmp_path) == (WANT, WANT_RUN)
