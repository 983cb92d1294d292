"""Slowness confirmed on rounds loading one node alone (netcheck/analysis/alone.py)."""

from __future__ import annotations

import math

import pytest

from netcheck.analysis.alone import (
    AloneConfig,
    alone_evidence,
    alone_rounds,
    alone_test,
    extend,
    nomination,
    nomination_p,
    nominees,
)
from netcheck.analysis.slowness import (
    NodeSlowness,
    SlownessConfig,
    SlownessReport,
    persistent_slowness,
    spent_level,
)
from netcheck.records import StoredRounds

CFG = AloneConfig()


def _node(key: str, ratios: list[float | None], flagged: bool = False) -> NodeSlowness:
    return NodeSlowness(key, tuple(f"r{i}" for i in range(len(ratios))), tuple(ratios), 0,
                        len(ratios), 1.0, 0.5, 1e-3, flagged)  # fmt: skip


def _report(nodes: list[NodeSlowness], ok: bool = True, direct: bool = True) -> SlownessReport:
    return SlownessReport(1.0, 1.25, 0.01, 1, 1e-3, 8, 1.0, ok, tuple(nodes), direct)


def test_nominees_are_slow_against_the_alone_floor_in_screening() -> None:
    """A padded node at 1.3 t_ref in most screening rounds is nominated (it is below the
    screening floor's level, so not flagged there); an honest co-hosted node (1.2 in
    half its rounds) is not; nor one already flagged, nor any when t_ref is off."""
    padded = _node("pad", [1.3, 1.28, 1.35, 1.22, 1.31, 1.26, 1.33, 1.3, 1.18, 1.29, None, 1.3])
    cohost = _node("co", [1.0, 1.21, 0.98, 1.22, 1.01, 1.19, 1.02, 1.23, 0.99, 1.2, 1.0, 1.21])
    done = _node("done", [2.0] * 12, flagged=True)
    assert nominees(_report([padded, cohost, done]), CFG) == ["pad"]
    assert nominees(_report([padded]), CFG, skip={"pad"}) == []
    assert nominees(_report([padded], ok=False), CFG) == []


def test_signed_rank_nominates_a_noisy_padded_node_the_sign_test_misses() -> None:
    """A noisy padded node far above the alone floor in most screening rounds and just
    below it in 4 of 12: the sign test (8 of 12 above, p 0.19) does not nominate it,
    the signed-rank test of log(ratio / floor) does (p 0.021), and a round without a
    result counts as the largest difference; an honest co-hosted node (1.0, or 1.2 when
    its neighbour is loaded) is nominated by neither; no rounds, or all at the floor:
    p 1. The nomination's evidence names the test used."""
    noisy = [1.6, 1.7, 1.5, 1.45, 1.8, 1.35, 1.3, 1.25, 1.15, 1.1, 1.18, 1.19]
    cohost = [1.0, 1.21, 0.98, 1.22, 1.01, 1.19, 1.02, 1.23, 0.99, 1.2, 1.0, 1.21]
    sign = AloneConfig(nominate_test="sign")
    assert CFG.nominate_test == "signed-rank"
    assert nominees(_report([_node("pad", noisy), _node("co", cohost)]), CFG) == ["pad"]
    assert nominees(_report([_node("pad", noisy), _node("co", cohost)]), sign) == []
    assert math.isclose(nomination_p(_node("pad", noisy), sign), 0.1938, rel_tol=1e-3)
    assert math.isclose(nomination_p(_node("pad", noisy), CFG), 0.02124, rel_tol=1e-3)
    missing = nomination_p(_node("pad", [*noisy[:-1], None]), CFG)
    assert math.isclose(missing, 0.008057, rel_tol=1e-3)  # as a difference above 1.8's
    assert nomination_p(_node("n", []), CFG) == nomination_p(_node("n", [1.2] * 9), CFG) == 1.0
    report = _report([_node("pad", noisy)], direct=False)
    ev = nomination(report.nodes[0], report, CFG, [])
    assert ev["nominate_test"] == "signed-rank" and "signed-rank" in ev["by"]
    assert math.isclose(ev["nomination_p_value"], 0.02124, rel_tol=1e-3)
    assert nomination(report.nodes[0], report, sign, [])["nominate_test"] == "sign"
    with pytest.raises(ValueError):
        AloneConfig(nominate_test="t")  # type: ignore[arg-type]


def test_screening_rejections_are_candidates_first_not_flags() -> None:
    """By default the screening test's rejections are not flags (``report.direct`` is
    empty): they are the first nominees, before the weaker ones; with ``direct_flags``
    they are flags and not nominated; none already flagged, none when t_ref is off."""
    padded = _node("pad", [1.3, 1.28, 1.35, 1.22, 1.31, 1.26, 1.33, 1.3, 1.18, 1.29, None, 1.3])
    rejected = _node("a-rej", [1.3] * 12, flagged=True)
    report = _report([rejected, padded], direct=False)
    assert report.flagged == (rejected,) and report.direct == ()
    assert nominees(report, CFG) == ["a-rej", "pad"]
    assert nominees(_report([padded, rejected], direct=False), CFG) == ["a-rej", "pad"]
    assert nominees(report, CFG, skip={"a-rej"}) == ["pad"]
    assert nominees(_report([rejected], ok=False, direct=False), CFG) == []
    direct = _report([rejected, padded], direct=True)
    assert direct.direct == (rejected,) and nominees(direct, CFG) == ["pad"]


def test_slowness_report_carries_the_direct_option() -> None:
    """``persistent_slowness`` rejects a node at 1.5 t_ref in every round either way;
    only with ``direct_flags`` is the rejection a flag of the report."""
    ids = tuple(f"r{i}" for i in range(12))
    times = {"pad": 1.6, "n1": 1.0, "n2": 1.05}  # arrival - release, s (t_ref 1, rtt 0.1)
    sched = {r: dict.fromkeys(times, True) for r in ids}
    rows = tuple({"round_id": r, "node_key": k, "released_ns": 0, "arrived_ns": int(t * 1e9),
                  "rtt_s": 0.1, "commitment": "c"} for r in ids for k, t in times.items())  # fmt: skip
    stored = StoredRounds(ids, dict.fromkeys(ids, "screening"), sched, rows)
    new = persistent_slowness(stored, 1.0, 1)
    old = persistent_slowness(stored, 1.0, 1, SlownessConfig(direct_flags=True))
    assert [n.node_key for n in new.flagged] == ["pad"] and new.direct == ()
    assert [n.node_key for n in old.direct] == ["pad"]
    [pad] = new.flagged
    evidence = nomination(pad, new, CFG, rows)
    assert evidence["rejected"] and "rejected at its level" in evidence["by"]
    assert evidence["above"] == 12 and len(evidence["latencies"]) == 12 and evidence["look"] == 1
    flagged = alone_test("pad", [(f"a{i}", 1.5) for i in range(16)], 1, CFG)
    cleared = alone_test("pad", [(f"a{i}", 1.0) for i in range(16)], 1, CFG)
    assert alone_evidence(flagged, 1, CFG, 1.0, rows, evidence)["screening"] is evidence
    kept = alone_evidence(cleared, 1, CFG, 1.0, rows, evidence)["screening"]
    assert "receipts" not in kept and kept["ratios"] == evidence["ratios"]


def test_alone_rounds_are_rounds_loading_exactly_one_node() -> None:
    """Only rounds whose schedule loads one node count, as service time / t_ref; a
    loaded round without a result is None."""
    sched = {"a1": {"a": True, "b": False}, "ab": {"a": True, "b": True},
             "b1": {"a": False, "b": True}, "a2": {"a": True, "b": False}}  # fmt: skip
    res = [
        {"round_id": "a1", "node_key": "a", "released_ns": 0, "arrived_ns": 2_600_000_000,
         "rtt_s": 0.1, "commitment": "c"},
        {"round_id": "ab", "node_key": "a", "released_ns": 0, "arrived_ns": 3_000_000_000,
         "rtt_s": 0.1, "commitment": "c"},
        {"round_id": "b1", "node_key": "b", "released_ns": 0, "arrived_ns": 2_100_000_000,
         "rtt_s": 0.1, "commitment": "c"},
        {"round_id": "a2", "node_key": "a", "released_ns": 0, "arrived_ns": None,
         "rtt_s": 0.1, "commitment": None},
    ]  # fmt: skip
    stored = StoredRounds(("a1", "ab", "b1", "a2"), dict.fromkeys(sched, "confirmation"), sched,
                          tuple(res))  # fmt: skip
    got = alone_rounds(stored, 2.0)
    assert [rid for rid, _ in got["a"]] == ["a1", "a2"] and got["a"][1][1] is None
    assert math.isclose(got["a"][0][1] or 0, 1.25) and math.isclose(got["b"][0][1] or 0, 1.0)
    with pytest.raises(ValueError):
        alone_rounds(stored, 0.0)


def test_padded_alone_rounds_are_flagged_an_honest_card_is_not() -> None:
    """1.3 t_ref alone in 15 of 16 rounds: flagged at the first attempt; a card 15%
    slower than the class (1.15) is not, however many rounds; too few rounds: not."""
    padded = [(f"p{i}", 1.3 if i else 1.1) for i in range(16)]
    slow_card = [(f"s{i}", 1.15 + 0.03 * math.sin(i)) for i in range(200)]
    got = alone_test("p", padded, 1, CFG)
    assert got.flagged and got.above == 15 and got.level == spent_level(CFG.alpha, 1)
    assert not alone_test("s", slow_card, 1, CFG).flagged
    assert not alone_test("p", padded[:7], 1, CFG).flagged


def test_attempts_spend_the_level_and_pool_the_rounds() -> None:
    """The k-th attempt runs at alpha 6/(pi^2 k^2) over the node's most recent
    pool_rounds alone rounds: a borderline record passes at attempt 1, not at 4."""
    obs = [(f"r{i}", 1.3 if i % 5 else 1.1) for i in range(24)]  # 19 of 24 above: p 0.0033
    assert alone_test("n", obs, 1, CFG).flagged
    assert not alone_test("n", obs, 4, CFG).flagged
    assert alone_test("n", obs * 20, 1, AloneConfig(pool_rounds=10)).n == 10


def test_a_promising_attempt_is_extended_up_to_max_attempts() -> None:
    """An attempt not flagged with p <= extend_p is followed at once by the next one,
    up to max_attempts per analysis; a flagged one, an unpromising one, or one at the
    limit is not; max_attempts 1 is the behaviour before (never)."""
    obs = [(f"r{i}", 1.3 if i % 8 else 1.1) for i in range(16)]  # 14 of 16: p 0.0021
    promising = alone_test("n", obs, 2, CFG)  # level 0.0015
    assert not promising.flagged and promising.p_value <= CFG.extend_p
    assert extend(promising, 1, CFG) and extend(promising, 2, CFG)
    assert not extend(promising, 3, CFG) and not extend(promising, 1, AloneConfig(max_attempts=1))
    assert not extend(alone_test("n", obs, 1, CFG), 1, CFG)  # flagged at attempt 1
    honest = alone_test("n", [(f"r{i}", 1.1 if i % 2 else 1.3) for i in range(16)], 1, CFG)
    assert honest.p_value > CFG.extend_p and not extend(honest, 1, CFG)
    with pytest.raises(ValueError):
        AloneConfig(max_attempts=0)
    with pytest.raises(ValueError):
        AloneConfig(extend_p=1.5)


def test_alone_evidence_says_which_attempt_of_the_analysis() -> None:
    """The evidence carries the attempt's index within its analysis and extend_p."""
    test = alone_test("n", [(f"r{i}", 1.3) for i in range(16)], 2, CFG)
    ev = alone_evidence(test, 2, CFG, 1.0, [], None, in_analysis=2)
    assert ev["attempt"] == 2 and ev["attempt_in_analysis"] == 2 and ev["extend_p"] == 0.1
