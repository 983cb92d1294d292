"""Evidence of a confirmation stays proportional to the group, not to the number of
connected nodes times the pooled rounds (netcheck/analysis/evidence.py)."""

from __future__ import annotations

import json

import numpy as np

from netcheck.analysis.confirm import ConfirmationObservation
from netcheck.analysis.confirm_run import ConfirmationRun
from netcheck.analysis.detector_config import DetectorConfig, SuspectGroup
from netcheck.analysis.evidence import shared_backend_evidence
from netcheck.analysis.screening import analyse
from netcheck.records import StoredRounds


def test_confirmation_rounds_keep_the_loaded_and_member_bits_only() -> None:
    """With 1,000 connected nodes, each confirmation round's evidence names the members'
    bits and the loaded nodes, not 1,000 bits: a pooled
    history of thousands of rounds would otherwise make one record hundreds of MB."""
    others = [f"{i:064x}" for i in range(1000)]
    rng = np.random.default_rng(0)
    prior = []
    schedules: dict[str, dict[str, bool]] = {}
    for r in range(60):
        load = [{"a", "b"}, {"a"}, {"b"}][r % 3]
        rid = f"p{r}"
        prior.append(ConfirmationObservation(rid, frozenset(load),
                                             {m: rng.normal(0.0, 0.05) for m in load},
                                             "group", frozenset("ab")))  # fmt: skip
        schedules[rid] = {**{k: False for k in others}, "a": "a" in load, "b": "b" in load}
    run = ConfirmationRun(("a", "b"), cycles=4, max_cycles=8, prior=tuple(prior))
    n = 0
    while not run.done:
        block = []
        for load in run.next_block():
            n += 1
            rid = f"r{n}"
            schedules[rid] = {**{k: False for k in others}, **{m: m in load for m in "ab"}}
            block.append(ConfirmationObservation(rid, frozenset(load),
                                                 {m: rng.normal(0.0, 0.05) for m in load}))  # fmt: skip
        run.add(block)
    stored = StoredRounds((), {}, {}, ())
    doc = shared_backend_evidence(SuspectGroup(("a", "b"), ()), stored,
                                  analyse(stored, 1.0, DetectorConfig()), DetectorConfig(), run,
                                  schedules, [])  # fmt: skip
    rounds = doc["confirmation"]["rounds"]
    assert len(rounds) == len(run.judged) >= 60
    first = rounds[0]
    assert first["schedule"] == {"a": True, "b": True}
    assert rounds[1]["schedule"] == {"a": True, "b": False}
    assert len(json.dumps(doc)) < 200 * len(rounds)
