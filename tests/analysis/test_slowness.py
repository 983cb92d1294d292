"""Tests for netcheck.analysis.slowness (the persistent-slowness test against t_ref)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from netcheck.analysis import rules
from netcheck.analysis.schedule import round_mixes
from netcheck.analysis.slowness import (
    SlownessConfig,
    null_rate,
    persistent_slowness,
    sign_test_p,
    slowness_evidence,
    spent_level,
    window_null_rate,
)
from netcheck.records import StoredRounds

T_REF = 2.0


def stored_rounds(times: dict[str, list[float | None]], kinds: list[str]) -> StoredRounds:
    """Every node loaded in every round; ``times[node][r]`` its service time (None = no
    result); echo RTT 10 ms."""
    rids = tuple(f"r{i:03d}" for i in range(len(kinds)))
    rows = []
    for key, ts in times.items():
        for rid, t in zip(rids, ts, strict=True):
            arrived = None if t is None else 1_000 + round((t + 0.01) * 1e9)
            rows.append({"round_id": rid, "node_key": key, "released_ns": 1_000,
                         "arrived_ns": arrived, "rtt_s": 0.01,
                         "commitment": None if t is None else "c", "signature": "s"})  # fmt: skip
    return StoredRounds(rids, dict(zip(rids, kinds, strict=True)),
                        {r: dict.fromkeys(times, True) for r in rids}, tuple(rows))  # fmt: skip


def test_padded_identity_is_flagged_and_coupled_honest_nodes_are_not() -> None:
    """A padded identity (1.5 t_ref in every round) is flagged; honest nodes of the
    class, one slowed 20% in half its rounds by a co-hosted neighbour and noisy
    (sigma 0.15), are not, nor is a node 10% slow."""
    rng = np.random.default_rng(3)
    n = 24
    noise = lambda: np.exp(0.05 * rng.standard_normal(n))  # noqa: E731
    coupled = (
        T_REF * np.where(np.arange(n) % 2 == 0, 1.2, 1.0) * np.exp(0.15 * rng.standard_normal(n))
    )
    times = {"pad": list(T_REF * 1.5 * noise()), "coupled": list(coupled),
             "slow10": list(T_REF * 1.1 * noise()), "ok": list(T_REF * noise())}  # fmt: skip
    report = persistent_slowness(stored_rounds(times, ["screening"] * n), T_REF, look=2)
    assert report.reference_ok
    assert [x.node_key for x in report.flagged] == ["pad"]
    pad = next(x for x in report.nodes if x.node_key == "pad")
    assert (pad.above, pad.n) == (24, 24)
    assert pad.p_value == pytest.approx(0.5**24)
    assert pad.level == pytest.approx(0.01 * 6 / math.pi**2 / 4)


def test_missing_results_count_as_above_and_full_rounds_are_not_used() -> None:
    """A node that returns nothing in screening rounds is flagged; a node slow only in
    full rounds (every neighbour loaded) is not; full rounds are not in its counts."""
    kinds = ["screening", "screening", "screening", "full"] * 8
    times: dict[str, list[float | None]] = {
        "silent": [None if k == "screening" else T_REF for k in kinds],
        "full-slow": [T_REF * (1.4 if k == "full" else 1.0) for k in kinds],
        "ok": [T_REF] * len(kinds),
    }
    report = persistent_slowness(stored_rounds(times, kinds), T_REF, look=1)
    assert [x.node_key for x in report.flagged] == ["silent"]
    full_slow = next(x for x in report.nodes if x.node_key == "full-slow")
    assert (full_slow.above, full_slow.n) == (0, 24)


def test_a_wrong_reference_flags_nobody() -> None:
    """When the median node is above the floor, t_ref does not describe the population:
    no node is flagged and the report says so."""
    times = {k: [T_REF * 1.4] * 16 for k in ("a", "b", "c")}
    report = persistent_slowness(stored_rounds(times, ["screening"] * 16), T_REF, look=1)
    assert not report.reference_ok and report.population_median_ratio == pytest.approx(1.4)
    assert report.flagged == ()
    assert all(x.p_value < report.level for x in report.nodes)


def test_too_few_rounds_are_not_tested() -> None:
    """Nodes with fewer than min_rounds loaded screening rounds are left out."""
    times = {"pad": [T_REF * 2.0] * 7}
    assert persistent_slowness(stored_rounds(times, ["screening"] * 7), T_REF, 1).nodes == ()


def test_spent_levels_sum_to_alpha_and_sign_test_is_exact() -> None:
    """alpha 6 / (pi^2 k^2) sums to alpha over all looks; the sign test is the binomial
    tail; bad settings are refused."""
    assert sum(spent_level(0.01, k) for k in range(1, 200_000)) == pytest.approx(0.01, rel=1e-4)
    assert sign_test_p(10, 12) == pytest.approx((1 + 12 + 66) / 4096)
    assert sign_test_p(0, 0) == 1.0
    with pytest.raises(ValueError):
        spent_level(0.01, 0)
    with pytest.raises(ValueError):
        SlownessConfig(floor=1.0)
    with pytest.raises(ValueError):
        persistent_slowness(stored_rounds({}, []), 0.0, 1)


def test_evidence_lets_an_analyst_recompute_the_test() -> None:
    """The evidence holds per round the ratio and raw latencies, the counts, p-value,
    level, receipts and the rule; the ratios recompute from the latencies."""
    times = {"pad": [T_REF * 1.6] * 12, "ok": [T_REF] * 12, "ok2": [T_REF * 1.1] * 12}
    stored = stored_rounds(times, ["screening"] * 12)
    report = persistent_slowness(stored, T_REF, look=1)
    [node] = report.flagged
    ev = slowness_evidence(node, report, list(stored.results))
    assert ev["above"] == 12 and ev["n"] == 12 and ev["p_value"] == pytest.approx(0.5**12)
    assert len(ev["receipts"]) == 12 and set(ev["latencies"]) == set(ev["rounds"])
    for rid, ratio in zip(ev["rounds"], ev["ratios"], strict=True):
        assert ev["latencies"][rid]["service_s"] / ev["t_ref_s"] == pytest.approx(ratio)
    assert ev["rule"] == rules.rule_text("slow", ev, node.level)
    assert "1.25 times the profile's reference time" in ev["rule"]


def coupled_times(
    rng: np.random.Generator, nodes: int, rounds: int, q: float, card: float, sigma: float
) -> dict[str, list[float | None]]:
    """EMULATION: honest co-hosted cards ``card`` x t_ref alone, slowed 20% in the rounds
    whose neighbour is loaded (a coin of probability ``q``), log-normal noise ``sigma``."""
    coupled = rng.random((nodes, rounds)) < q
    t = (
        T_REF
        * card
        * np.where(coupled, 1.2, 1.0)
        * np.exp(sigma * rng.standard_normal(coupled.shape))
    )
    return {f"n{i:04d}": list(row) for i, row in enumerate(t)}


def test_null_rate_is_the_load_probability_above_one_half() -> None:
    """The sign test's null rate: 1/2 up to q = 1/2, q above; q outside (0, 1) raises."""
    assert null_rate(0.5) == 0.5 and null_rate(0.3) == 0.5
    assert null_rate(2 / 3) == 2 / 3
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError):
            null_rate(bad)


def test_the_null_holds_at_load_probability_two_thirds_for_coupled_honest_cards() -> None:
    """Null calibration (session 9): honest cards 10% slow, slowed 20% by a co-hosted
    neighbour loaded in 2/3 of their screening rounds (1.1 and 1.32 t_ref: above the
    floor exactly when coupled, the worst case of null_rate's bound; at q = 1/2 their
    median is at the floor). At the rate for q the test rejects at most the level's
    share of them; at the 1/2 of the floor's design (the test before session 9) it
    rejects most of them."""
    rng = np.random.default_rng(9)
    times = coupled_times(rng, 400, 48, 2 / 3, 1.1, 0.01)
    # cards of the class without a neighbour keep the population's median ratio near 1
    times |= {f"m{i:04d}": list(T_REF * np.exp(0.05 * rng.standard_normal(48))) for i in range(401)}
    stored = stored_rounds(times, ["screening"] * 48)
    cfg = SlownessConfig(alpha=0.5, min_rounds=8)
    fixed = persistent_slowness(stored, T_REF, 1, cfg, load_probability=2 / 3)
    before = persistent_slowness(stored, T_REF, 1, cfg)
    assert fixed.reference_ok and fixed.null_rate == pytest.approx(2 / 3)
    assert before.null_rate == 0.5
    coupled = lambda r: [x for x in r.flagged if x.node_key.startswith("n")]  # noqa: E731
    # level 0.5 * 6 / pi^2 = 0.30 per node; binomial sd over 400 nodes ~ 0.023
    assert len(coupled(fixed)) / 400 <= fixed.level + 0.07
    assert len(coupled(before)) / 400 > 0.9


def test_at_one_half_the_test_and_its_evidence_are_unchanged() -> None:
    """At q = 1/2 (the default) the p-values are the sign test's of before and the
    evidence has no rate fields; at 2/3 the evidence names the rate and the rule says it."""
    rng = np.random.default_rng(4)
    times = coupled_times(rng, 6, 24, 0.5, 1.2, 0.05)
    stored = stored_rounds(times, ["screening"] * 24)
    half = persistent_slowness(stored, T_REF, 1)
    for node in half.nodes:
        assert node.p_value == sign_test_p(node.above, node.n)
        assert node.p_value == pytest.approx(0.5**node.n * sum(
            math.comb(node.n, k) for k in range(node.above, node.n + 1)))  # fmt: skip
    ev = slowness_evidence(half.nodes[0], half, [])
    assert "null_rate" not in ev and "load_probability" not in ev
    assert ev["rule"] == rules.slow(1.25, 0.01, 8)
    two = persistent_slowness(stored, T_REF, 1, load_probability=2 / 3)
    node = two.nodes[0]
    assert node.p_value == pytest.approx(sign_test_p(node.above, node.n, 2 / 3))
    ev = slowness_evidence(node, two, [])
    assert ev["null_rate"] == pytest.approx(2 / 3) and ev["load_probability"] == pytest.approx(
        2 / 3
    )
    assert "0.667 of them" in ev["rule"] and "0.666667" in ev["test"]
    assert rules.rule_text("slow", ev, None) == ev["rule"]


def above_in(n: int, above: int) -> list[float | None]:
    """``n`` service times, the first ``above`` at 1.3 t_ref (above the floor), the rest
    at 1.1 t_ref: the same counts whatever the noise."""
    return [T_REF * (1.3 if i < above else 1.1) for i in range(n)]


def test_window_null_rate_is_the_largest_over_the_mixes() -> None:
    """The largest null_rate over the load probabilities (one: null_rate itself, to
    the bit); none or one outside (0, 1) raises. round_mixes counts the rounds per q,
    ascending, the ones not in round_q at the configured q."""
    for q in (0.1, 0.3, 0.5, 0.6, 2 / 3, 0.9):
        assert window_null_rate([q]) == null_rate(q)
    assert window_null_rate([0.5, 2 / 3, 0.4]) == 2 / 3
    assert window_null_rate([0.3, 0.4]) == 0.5
    for bad in ([], [0.5, 1.0]):
        with pytest.raises(ValueError):
            window_null_rate(bad)
    assert round_mixes(["a", "b", "c"], {"a": 2 / 3, "b": 2 / 3}, 0.5) == ((0.5, 1), (2 / 3, 2))
    assert round_mixes(["a", "b"], None, 0.5) == ((0.5, 2),)


def test_rounds_of_an_earlier_larger_mix_are_judged_at_their_rate() -> None:
    """The defect: a window of rounds run at q = 2/3, judged after the operator moved
    the setting to 1/2, was judged at 1/2. A node above the floor in 20 of 24 rounds
    (a coupled honest node at 2/3 is above in up to 2/3 of them): at 1/2 p = 0.00077,
    under the level 0.0061 (flagged); at the rounds' rate 2/3 p = 0.059 (not). The same
    when only 16 of the 24 ran at 2/3 (a window across the change); a node whose rounds
    all ran at 1/2 (it joined after the change) is judged at 1/2."""
    times = {"c": above_in(24, 20), "ok": [T_REF] * 24, "ok2": [T_REF * 1.05] * 24}
    stored = stored_rounds(times, ["screening"] * 24)
    rids = stored.round_ids
    before = persistent_slowness(stored, T_REF, 1, load_probability=0.5)
    assert [n.node_key for n in before.flagged] == ["c"]
    assert before.flagged[0].p_value == pytest.approx(0.000772, rel=1e-3)
    old = persistent_slowness(stored, T_REF, 1, load_probability=0.5,
                              round_q=dict.fromkeys(rids, 2 / 3))  # fmt: skip
    across = persistent_slowness(stored, T_REF, 1, load_probability=0.5,
                                 round_q=dict.fromkeys(rids[:16], 2 / 3))  # fmt: skip
    for report in (old, across):
        c = next(n for n in report.nodes if n.node_key == "c")
        assert c.null_rate == 2 / 3 and report.null_rate == 2 / 3 and not report.flagged
        assert c.p_value == sign_test_p(20, 24, 2 / 3) == pytest.approx(0.0594, rel=1e-2)
    assert next(n for n in across.nodes if n.node_key == "c").mixes == ((0.5, 8), (2 / 3, 16))
    # a q stored at 1/2 for every round: the test at 1/2 (the rounds ran at it)
    new = persistent_slowness(stored, T_REF, 1, load_probability=2 / 3,
                              round_q=dict.fromkeys(rids, 0.5))  # fmt: skip
    assert [n.node_key for n in new.flagged] == ["c"] and new.null_rate == 0.5


def test_evidence_of_a_mixed_window_records_the_mixes_and_the_rate() -> None:
    """The evidence of a node whose rounds ran at several q: the configured q, the rate
    tested (the largest), each q with its rounds and rate, the rounds that took the
    configured q; the rule names the rate and recomputes from the record."""
    times = {"pad": [T_REF * 1.6] * 24, "ok": [T_REF] * 24, "ok2": [T_REF * 1.1] * 24}
    stored = stored_rounds(times, ["screening"] * 24)
    rids = stored.round_ids
    report = persistent_slowness(stored, T_REF, 1, load_probability=0.5,
                                 round_q=dict.fromkeys(rids[:16], 2 / 3))  # fmt: skip
    [node] = report.flagged
    ev = slowness_evidence(node, report, list(stored.results))
    assert ev["load_probability"] == 0.5 and ev["null_rate"] == 2 / 3
    assert ev["mixes"] == [{"load_probability": 0.5, "rounds": 8, "null_rate": 0.5},
                           {"load_probability": 2 / 3, "rounds": 16, "null_rate": 2 / 3}]  # fmt: skip
    assert ev["q_from_config"] == list(rids[16:])
    assert "0.667 of them" in ev["rule"] and rules.rule_text("slow", ev, None) == ev["rule"]
    assert ev["p_value"] == sign_test_p(24, 24, 2 / 3)
    bare = replace(node, null_rate=0.5, mixes=())  # a record without mixes: the report's rate
    assert slowness_evidence(bare, report, [])["null_rate"] == report.null_rate == 2 / 3


@pytest.mark.parametrize("q", [0.3, 0.5, 0.6, 2 / 3, 0.8])
def test_one_mix_throughout_gives_the_test_of_before_bit_for_bit(q: float) -> None:
    """Every round at the configured q, stored or not: the same nodes (p-values, flags,
    rates), report rate and evidence as without round_q (the test before session 11),
    and the p-values are the sign test's at null_rate(q), compared with ==."""
    rng = np.random.default_rng(5)
    times = coupled_times(rng, 12, 32, q, 1.1, 0.05)
    times |= {f"m{i}": list(T_REF * np.exp(0.05 * rng.standard_normal(32))) for i in range(13)}
    times["pad"] = [T_REF * 1.5] * 32
    stored = stored_rounds(times, ["screening"] * 28 + ["full"] * 4)
    plain = persistent_slowness(stored, T_REF, 1, load_probability=q)
    for round_q in ({}, dict.fromkeys(stored.round_ids, q),
                    dict.fromkeys(stored.round_ids[:10], q)):  # fmt: skip
        same = persistent_slowness(stored, T_REF, 1, load_probability=q, round_q=round_q)
        assert same.nodes == plain.nodes and same.null_rate == plain.null_rate == null_rate(q)
        for a, b in zip(same.nodes, plain.nodes, strict=True):
            assert slowness_evidence(a, same, []) == slowness_evidence(b, plain, [])
    for node in plain.nodes:
        assert node.p_value == sign_test_p(node.above, node.n, null_rate(q))
        assert node.null_rate == null_rate(q) and node.mixes == ((q, node.n),)
    assert "pad" in [n.node_key for n in plain.flagged]
