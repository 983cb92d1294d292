"""The capacity test (netcheck.analysis.lateness): late/missing answers as a binomial
test with the level spent over the node's life."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netcheck.analysis import rules
from netcheck.analysis.coins import COIN_RULE
from netcheck.analysis.lateness import (
    REFERENCE_FULL_EVERY,
    REFERENCE_Q,
    CapacityTestConfig,
    capacity_evidence,
    capacity_test,
    coupled_share,
    look_level,
    null_p0,
    round_share,
    share_null,
    strike_p_value,
)
from netcheck.analysis.schedule import HMAC_RULE, rule_name
from netcheck.analysis.screening import capacity_check

#: Issue 13, session 3: the honest node flagged by the fixed-count rule in the false-flag
#: scenario at sigma_w 0.15 (seed 115, sim:087: noise sd 0.36, co-hosted, 20% coupling;
#: late in 0.7% of rounds alone and 2.4% with its neighbour loaded): its 67 verdicts up
#: to round 119, oldest first ("L" = late). Its 4th strike made 3 among its last 8.
HONEST_NOISY = "." * 51 + "L.......L....L.L"


def history(marks: str) -> list[dict[str, str]]:
    """Verdicts newest first from a string oldest first ("." pass, "L" late, "M"
    missing, "W" wrong answer, "U" unchecked)."""
    names = {".": "pass", "L": "late", "M": "missing", "W": "wrong-answer", "U": "unchecked"}
    return [{"round_id": f"r{i:03d}", "verdict": names[c]} for i, c in enumerate(marks)][::-1]


def first_flag(marks: str, cfg: CapacityTestConfig | None = None) -> int | None:
    """Index of the verdict at which the test first flags (run at every strike)."""
    strikes = 0
    for i, c in enumerate(marks):
        if c in "LM":
            strikes += 1
            if capacity_test(history(marks[: i + 1]), strikes, cfg).flagged:
                return i
    return None


def test_the_honest_node_of_issue_13_is_no_longer_flagged() -> None:
    """Regression: the fixed-count rule flags the honest noisy node at its 4th strike;
    the test does not (3 other strikes among 47 verdicts are likely at 2%)."""
    recent = history(HONEST_NOISY)
    assert capacity_check(recent, 8, 3)[1]  # the rule before: 3 of the last 8
    test = capacity_test(recent, look=4)
    assert (test.n, test.strikes, test.look) == (48, 4, 4)
    assert test.p_value == pytest.approx(strike_p_value(48, 4, 0.02))
    assert test.p_value > 0.05 and test.level == pytest.approx(0.03 * 6 / math.pi**2 / 4)
    assert not test.flagged and first_flag(HONEST_NOISY) is None


def test_a_real_shortage_is_flagged_within_a_few_strikes() -> None:
    """A node that cannot serve its batch when loaded with its farm-mates (late in every
    full round, 1 verdict in 2.5) is flagged at its 3rd strike, as the fixed-count rule
    flagged it; a node that never answers at its 3rd round; a long-lived node that
    starts missing rounds after 500 clean ones still within a window."""
    farm = ".L...L.L..L....L" * 4
    assert first_flag(farm) == 7
    assert first_flag("MMMM") == 2
    test = capacity_test(history("MMM"), 3)
    assert test.p_value == pytest.approx(0.02**2) and test.flagged
    late_starter = "." * 500 + ".L.L..L.L" * 6
    at = first_flag(late_starter)
    assert at is not None and at < 500 + 20


def test_level_spending_sums_to_alpha_over_a_life() -> None:
    """No look before ``min_strikes`` strikes; the looks' levels sum to ``alpha``."""
    cfg = CapacityTestConfig(alpha=0.03, min_strikes=3)
    assert look_level(1, cfg) == look_level(2, cfg) == 0.0
    assert look_level(3, cfg) == pytest.approx(0.03 * 6 / math.pi**2)
    total = sum(look_level(k, cfg) for k in range(1, 200_000))
    assert total < 0.03 and total == pytest.approx(0.03, rel=1e-4)


def test_error_control_at_p0_over_long_lives() -> None:
    """Nodes late with probability exactly p0 in every round, 500 rounds each: the
    fraction ever flagged stays below alpha (the union bound over the looks)."""
    cfg = CapacityTestConfig(p0=0.05, alpha=0.05)
    rng = np.random.default_rng(13)
    lives = ["".join("L" if x else "." for x in rng.random(500) < cfg.p0) for _ in range(300)]
    flagged = sum(first_flag(m, cfg) is not None for m in lives)
    assert flagged / len(lives) <= cfg.alpha


def test_only_timed_verdicts_count_and_the_test_runs_at_a_strike() -> None:
    """Wrong answers and unchecked rounds neither count nor fill the window; a window
    whose newest timed verdict passed is no look."""
    cfg = CapacityTestConfig(window=4)
    test = capacity_test(history("LWLU.UL"), 3, cfg)
    assert test.rounds == ("r006", "r004", "r002", "r000") and test.n == 4
    assert test.strike_rounds == ("r006", "r002", "r000") and test.strikes == 3
    assert not capacity_test(history("LLL."), 3).flagged
    with pytest.raises(ValueError, match="look"):
        capacity_test(history("LLL"), 2)


@pytest.mark.parametrize(
    "kw",
    [{"min_strikes": 1}, {"window": 2}, {"p0": 0.0}, {"p0": 1.0}, {"alpha": 0.0}, {"alpha": 1.5}],
)
def test_settings_are_checked(kw: dict[str, float]) -> None:
    """Settings outside their range are refused."""
    with pytest.raises(ValueError):
        CapacityTestConfig(**kw)  # type: ignore[arg-type]


def test_rule_text_names_the_test_and_keeps_the_old_wording_for_old_flags() -> None:
    """A flag of the test reads with its p0 and alpha; one stored by the fixed-count rule
    (no ``p0`` in its evidence) keeps the old wording."""
    new = rules.rule_text("capacity", {"window": 48, "p0": 0.02, "alpha": 0.03,
                                       "min_strikes": 3}, 0.01)  # fmt: skip
    assert new is not None and "at most 2% of its rounds" in new and "sums to 0.03" in new
    old = rules.rule_text("capacity", {"window": 8}, 3.0)
    assert old is not None and "at least 3 of its last 8 rounds" in old


def test_coupled_share_and_the_null_rate_at_other_load_probabilities() -> None:
    """The share of a node's timed rounds that load one given other node too: 0.70 at
    1/2 and 7/9 at 2/3 with every 4th round full, 1 with every round full; the null rate
    is p0 exactly at 1/2 and below, scaled by the share's ratio above."""
    assert coupled_share(0.5) == pytest.approx(0.7)
    assert coupled_share(2 / 3) == pytest.approx(7 / 9)
    assert coupled_share(0.9, full_every=1) == 1.0
    assert null_p0(0.02, 0.5) == 0.02 and null_p0(0.02, 0.3) == 0.02
    assert null_p0(0.02, 2 / 3) == pytest.approx(0.02 * (7 / 9) / 0.7)  # 2.22%
    cfg = CapacityTestConfig(load_probability=2 / 3)
    assert cfg.null_p0 == pytest.approx(0.0222, abs=1e-4) and cfg.p0 == 0.02
    assert CapacityTestConfig().null_p0 == 0.02
    for bad in ({"load_probability": 1.0}, {"full_every": 0}):
        with pytest.raises(ValueError):
            CapacityTestConfig(**bad)  # type: ignore[arg-type]


def lifetime_flags(rng: np.random.Generator, late: np.ndarray, cfg: CapacityTestConfig) -> int:
    """Nodes (rows of ``late``, bool per timed round, oldest first) that the test flags
    at some strike of their life, run at every strike as the coordinator does."""
    flagged = 0
    for row in late:
        recent: list[dict[str, str]] = []
        strikes = 0
        for i, hit in enumerate(row):
            recent.insert(0, {"round_id": str(i), "verdict": "late" if hit else "pass"})
            del recent[cfg.window :]
            if hit:
                strikes += 1
                if capacity_test(recent, strikes, cfg).flagged:
                    flagged += 1
                    break
    return flagged


def coupled_lates(
    rng: np.random.Generator, q: float, full_every: int, nodes: int, rounds: int
) -> np.ndarray:
    """EMULATION: timed rounds (rows: nodes) of co-hosted nodes late only when their
    neighbour is loaded too, at the rate that puts them exactly at p0 = 2% under the
    reference mix (q = 1/2, every 4th round full), over the round mix at ``q`` with
    one round in ``full_every`` full."""
    f = full_every
    full = rng.random((nodes, rounds)) < 1 / (1 + (f - 1) * q)  # timed: 1 + (F - 1) q per F
    coupled = full | (rng.random((nodes, rounds)) < q)
    return coupled & (rng.random((nodes, rounds)) < 0.02 / coupled_share(0.5))


def test_the_null_holds_for_coupled_nodes_at_a_higher_load_probability() -> None:
    """Null calibration (session 9): nodes late only in the rounds that load their
    co-hosted neighbour too, exactly at p0 under the reference mix (q = 1/2, every 4th
    round full), run at q = 0.95 with every 10th round full (coupled in 0.96 of their
    rounds instead of 0.70: late in 2.7% instead of 2%). With the null scaled for the
    mix (null_p0, from the reference cadence since session 10) they are flagged over 600
    timed rounds about as often as under the reference mix (the union bound alpha is
    loose); at the unscaled p0 (before session 9) several times as often."""
    rng = np.random.default_rng(13)
    nodes, rounds, alpha = 400, 600, 0.2
    ref = lifetime_flags(rng, coupled_lates(rng, 0.5, 4, nodes, rounds),
                         CapacityTestConfig(alpha=alpha, full_every=4))  # fmt: skip
    late = coupled_lates(rng, 0.95, 10, nodes, rounds)
    scaled = CapacityTestConfig(alpha=alpha, load_probability=0.95, full_every=10)
    assert scaled.null_p0 == pytest.approx(0.02 * coupled_share(0.95, 10) / coupled_share(0.5, 4))
    n_scaled = lifetime_flags(rng, late, scaled)
    n_before = lifetime_flags(rng, late, CapacityTestConfig(alpha=alpha, full_every=10))
    assert n_scaled / nodes <= alpha and n_scaled <= 1.5 * ref + 10
    assert n_before > 2.5 * max(ref, n_scaled)


def test_capacity_evidence_keeps_the_basis_of_a_scaled_null() -> None:
    """At q = 1/2 the evidence is as before (p0 only); above, ``p0`` is the rate tested
    and the configured rate and round mix are kept beside it, and the rule says the
    rate tested."""
    recent = history("." * 40 + "LL.L")
    for q, keys in ((0.5, set()), (2 / 3, {"p0_at_half", "load_probability", "full_every"})):
        cfg = CapacityTestConfig(load_probability=q)
        test = capacity_test(recent, 3, cfg)
        assert test.p_value == pytest.approx(strike_p_value(test.n, 3, cfg.null_p0))
        ev = capacity_evidence(test, cfg, recent, {}, [])
        assert ev["p0"] == cfg.null_p0 and keys <= set(ev)
        assert ev.get("p0_at_half", 0.02) == 0.02 and ("p0_at_half" in ev) == bool(keys)
        assert ev["rule"] == rules.capacity_test(48, cfg.null_p0, 0.03, 3)


def shares_of(marks: str, kinds: str, q: float = 2 / 3) -> dict[str, float]:
    """Round shares by round id for :func:`history` ids: ``kinds`` oldest first, "s"
    a screening round at ``q``, "f" full, "c" group confirmation, "a" alone (a
    confirmation round that loaded the node alone), " " no stored rule."""
    of = {"s": q, "f": 1.0, "c": 1.0, "a": 0.0}
    return {f"r{i:03d}": of[k] for i, k in enumerate(kinds[: len(marks)]) if k != " "}


def test_round_shares_follow_the_stored_kind_and_rule() -> None:
    """A screening round counts at the q its rule carries (the chance a given other node
    was loaded too), a full round at 1, a confirmation round at 1 (conservative: it
    loads a planned group, an honest node's co-host the likeliest member), and so does
    a screening round whose rule carries no q; a confirmation round that sent work to
    one node only (an alone round: no other node loaded) counts at 0."""
    assert round_share("screening", rule_name(2 / 3)) == 2 / 3
    assert round_share("screening", rule_name(2 / 3), 1) == 2 / 3
    assert round_share("confirmation", "explicit", 1) == 0.0
    assert round_share("confirmation", COIN_RULE, 1) == 0.0
    assert round_share("confirmation", "explicit", 2) == 1.0
    assert round_share("full", "all", 1) == 1.0
    assert round_share("screening", rule_name(0.5)) == 0.5 == round_share("screening", HMAC_RULE)
    assert round_share("full", "all") == 1.0
    for rule in ("explicit", COIN_RULE, rule_name(0.25)):
        assert round_share("confirmation", rule) == 1.0
    assert round_share("screening", "hmac-sha256/unknown") == 1.0


def test_raising_full_every_judges_the_old_rounds_at_their_share() -> None:
    """Session 12: the operator raised ``screening_full_every`` from 4 to 8 at q 2/3
    (p0 3%) and restarted. The node's 11 rounds before the newest ran at every 4th
    round full (4 full, 7 screening: share 0.788, null 3.38%); 4 strikes among 12 at
    the 4th look: p = 0.0052 > 0.0046, no flag. At the configured mix (every 8th:
    share 0.73, 3.11%; the test before, and session 11's with the stored q, which kept
    F from the configuration) p = 0.0041, flagged. The same window run at every 8th
    (2 full) flags."""
    cfg = CapacityTestConfig(p0=0.03, load_probability=2 / 3, full_every=8)
    marks = "L..L...L...L"
    recent = history(marks)
    before = capacity_test(recent, 4, cfg)
    assert before.null_p0 == null_p0(0.03, 2 / 3, 8) == pytest.approx(0.03109, abs=1e-5)
    assert before.p_value == pytest.approx(0.00411, abs=1e-5) and before.flagged
    assert before.level == pytest.approx(0.00456, abs=1e-5)
    old = shares_of(marks, "sssfssfsfsfs")
    test = capacity_test(recent, 4, cfg, old)
    assert test.share == pytest.approx((4 + 7 * 2 / 3) / 11)
    assert test.null_p0 == share_null(0.03, test.share) == pytest.approx(0.03377, abs=1e-5)
    assert test.p_value == strike_p_value(12, 4, test.null_p0) > test.level
    assert not test.flagged and test.shares == ((2 / 3, 7), (1.0, 4))
    assert test.share_from_config == ()
    new = capacity_test(recent, 4, cfg, shares_of(marks, "sssfsssssfss"))
    assert new.share == pytest.approx((2 + 9 * 2 / 3) / 11) and new.flagged


def test_a_change_of_q_counts_each_round_at_its_own_share() -> None:
    """q moved from 2/3 to 1/2 (p0 3%, every 4th full): 7 rounds at 2/3 (2 of them
    full) and the newest at 1/2; 3 strikes among 8 at the first look. At the window's
    share ((5 * 2/3 + 2) / 7 = 0.76, 3.27%) p = 0.0201 > 0.0182, no flag; at the
    configured 3.00% p = 0.0171, flagged. The newest round's share does not count."""
    cfg = CapacityTestConfig(p0=0.03, load_probability=0.5)
    marks = "..L..L.L"
    recent = history(marks)
    assert capacity_test(recent, 3, cfg).flagged
    shares = shares_of(marks, "sfsfsss", 2 / 3) | {"r007": 0.5}
    test = capacity_test(recent, 3, cfg, shares)
    assert test.share == pytest.approx((5 * 2 / 3 + 2) / 7)
    assert test.p_value == pytest.approx(0.02007, abs=1e-5) and not test.flagged
    for newest in (0.0, 1.0):
        again = capacity_test(recent, 3, cfg, shares | {"r007": newest})
        assert (again.null_p0, again.p_value) == (test.null_p0, test.p_value)


def test_full_and_group_confirmation_rounds_count_at_one_alone_rounds_at_zero() -> None:
    """A window of full and group confirmation rounds (an honest co-hosted pair under
    confirmation: its neighbour is loaded in every one) is judged at share 1 (4.29% at
    p0 3%), not at the configured mix's 0.78 (3.33%): 3 strikes among 7 at the first
    look flag at 3.33% (p = 0.0152) and not at 4.29% (p = 0.0246). Rounds without a
    stored rule still take the configured mix's share; alone rounds (no other node
    loaded) count 0."""
    cfg = CapacityTestConfig(p0=0.03, load_probability=2 / 3)
    marks = ".L...LL"
    recent = history(marks)
    before = capacity_test(recent, 3, cfg)
    assert before.flagged and before.null_p0 == cfg.null_p0
    assert before.p_value == pytest.approx(0.01524, abs=1e-5)
    test = capacity_test(recent, 3, cfg, shares_of(marks, "fccfccc"))
    assert test.share == 1.0 and test.null_p0 == pytest.approx(0.03 / 0.7)
    assert test.p_value == pytest.approx(0.02455, abs=1e-5) and test.p_value > test.level
    assert not test.flagged
    part = capacity_test(recent, 3, cfg, shares_of(marks, "f c  cc"))
    assert part.share == pytest.approx((3 + 3 * cfg.share) / 6)
    assert part.share_from_config == ("r004", "r003", "r001")
    # alone rounds (the node loaded by itself) count 0: group and alone rounds in turn
    # (contention confirmation) give 1/2, below the reference 0.7: the null is p0
    alone = capacity_test(recent, 3, cfg, shares_of(marks, "cacacac"))
    assert alone.share == 0.5 and alone.null_p0 == 0.03 and alone.flagged


def test_without_stored_shares_the_test_is_todays_bit_for_bit() -> None:
    """No stored round shares, an empty mapping, or every round at the configured mix's
    expected share: the same null, p-value and decision as the test at the configured
    mix (``cfg.null_p0``), at every strike of a long history."""
    marks = ".L...L.L..L....L" * 4 + "." * 30 + "L..L.L"
    for q, f in ((0.5, 4), (2 / 3, 4), (2 / 3, 8), (0.5, 2), (0.3, 4)):
        cfg = CapacityTestConfig(p0=0.03, load_probability=q, full_every=f)
        strikes = 0
        for i, c in enumerate(marks):
            if c not in "LM":
                continue
            strikes += 1
            recent = history(marks[: i + 1])
            stored = {v["round_id"]: cfg.share for v in recent[::2]}
            plain = capacity_test(recent, strikes, cfg)
            assert plain.null_p0 == cfg.null_p0 == plain.largest_rate
            for test in (capacity_test(recent, strikes, cfg, stored),
                         capacity_test(recent, strikes, cfg, {})):  # fmt: skip
                assert test.null_p0 == plain.null_p0 == cfg.null_p0
                assert (test.p_value, test.level, test.flagged) == (
                    plain.p_value, plain.level, plain.flagged)  # fmt: skip
                if test.level:
                    assert test.p_value == strike_p_value(test.n, test.strikes, cfg.null_p0)


def test_a_steady_window_differs_only_by_its_actual_share() -> None:
    """One q (2/3), every 4th round full, a steady window: the null is taken at the
    window's actual share of full rounds, not at its expectation (1/3 of a node's timed
    rounds): 16 full among 47 gives 0.780 (3.343%), 15 gives 0.773 (3.31%), against
    0.778 (3.333%) at the configured mix."""
    cfg = CapacityTestConfig(p0=0.03, load_probability=2 / 3)
    marks = "." * 40 + "L...L.LL"
    recent = history(marks)
    for full, share in ((16, 0.7801), (15, 0.7730)):
        kinds = ("f" * full + "s" * (47 - full)) + "s"
        test = capacity_test(recent, 4, cfg, shares_of(marks, kinds))
        assert test.share == pytest.approx(share, abs=1e-4)
        assert test.null_p0 == share_null(0.03, test.share)
        assert test.p_value == strike_p_value(48, 4, test.null_p0)
    assert cfg.share == pytest.approx(7 / 9) and cfg.null_p0 == pytest.approx(0.03333, abs=1e-5)


def test_below_hoeffdings_reach_the_tail_is_taken_at_the_largest_round_rate() -> None:
    """Hoeffding's bound (the binomial tail at the mean rate above a Poisson-binomial's)
    holds for ``k >= m mean + 1`` other strikes; below it (``min_strikes`` 2: one other
    strike) the test takes the tail at the largest round's rate, which dominates.
    Above it, the mean rate."""
    cfg = CapacityTestConfig(p0=0.03, load_probability=2 / 3, min_strikes=2, alpha=0.5)
    marks = "....L...L"
    recent = history(marks)
    shares = shares_of(marks, "ssssssssf") | {"r000": 1.0}
    test = capacity_test(recent, 2, cfg, shares)
    assert test.share == pytest.approx((1 + 7 * 2 / 3) / 8) and test.strikes == 2
    assert test.largest_rate == share_null(0.03, 1.0) > test.null_p0
    assert test.p_value == strike_p_value(9, 2, test.largest_rate)
    assert test.p_value > strike_p_value(9, 2, test.null_p0)
    more = capacity_test(history("L..L...L"), 3, cfg, shares_of("L..L...L", "fsssssss"))
    assert 7 * more.null_p0 + 1 <= 2
    assert more.p_value == strike_p_value(8, 3, more.null_p0)


def test_a_bad_share_is_refused() -> None:
    cfg = CapacityTestConfig(p0=0.03)
    for bad in (1.5, -0.1):
        with pytest.raises(ValueError):
            capacity_test(history("LLL"), 3, cfg, {"r000": bad})


def test_capacity_evidence_records_the_share_of_the_window() -> None:
    """A flag keeps the rate tested (``p0``), the configured rate and mix, the share it
    was taken at with the reference and configured shares, each round share with its
    rounds and the rounds that took the configured share: enough to re-check the null
    from the stored rules."""
    cfg = CapacityTestConfig(p0=0.03, load_probability=0.5, window=8)
    recent = history("LLLL")
    test = capacity_test(recent, 4, cfg, {"r000": 1.0, "r001": 2 / 3})
    assert test.flagged
    ev = capacity_evidence(test, cfg, recent, {}, [])
    share = (1 + 2 / 3 + cfg.share) / 3
    assert ev["coupled_share"] == pytest.approx(share)
    assert ev["p0"] == test.null_p0 == pytest.approx(0.03 * share / 0.7)
    assert ev["reference_share"] == coupled_share(0.5, 4) and ev["configured_share"] == 0.7
    assert (ev["p0_at_half"], ev["load_probability"], ev["full_every"]) == (0.03, 0.5, 4)
    assert ev["shares"] == [{"share": 2 / 3, "rounds": 1}, {"share": 0.7, "rounds": 1},
                            {"share": 1.0, "rounds": 1}]  # fmt: skip
    assert ev["share_from_config"] == ["r002"] and ev["largest_rate"] == share_null(0.03, 1.0)
    assert ev["rule"] == rules.capacity_test(8, test.null_p0, 0.03, 3)
    plain = capacity_evidence(capacity_test(recent, 4, cfg), cfg, recent, {}, [])
    assert "p0_at_half" not in plain and plain["p0"] == 0.03
    assert plain["shares"] == [{"share": 0.7, "rounds": 3}]


def test_the_null_is_scaled_from_the_reference_cadence() -> None:
    """p0 is stated at the reference mix (q = 1/2, every 4th round full; review brk10):
    the null follows the deployment's share of coupled rounds relative to that mix, not
    to its own cadence at 1/2. Every 8th full at 2/3: 2.07% / 4.15% for p0 2% / 4%
    (2.37% / 4.75% before, 15% looser); every 2nd at 1/2: 2.38% / 4.76% (2.00% / 4.00%
    before, anti-conservative); every 4th: unchanged."""
    assert (REFERENCE_Q, REFERENCE_FULL_EVERY) == (0.5, 4)
    table = {(8, 0.5): (2.00, 4.00), (8, 2 / 3): (2.07, 4.15), (4, 0.5): (2.00, 4.00),
             (4, 2 / 3): (2.22, 4.44), (3, 0.5): (2.14, 4.29), (2, 0.5): (2.38, 4.76),
             (1, 0.5): (2.86, 5.71)}  # fmt: skip
    for (f, q), pct in table.items():
        got = tuple(round(100 * null_p0(p0, q, f), 2) for p0 in (0.02, 0.04))
        assert got == pct, (f, q)
    for q in (0.3, 0.5, 2 / 3, 0.9):  # every 4th full: the session 9 values
        assert null_p0(0.03, q) == pytest.approx(0.03 * max(1, coupled_share(q) / 0.7))
    assert CapacityTestConfig(p0=0.03, full_every=2).null_p0 == pytest.approx(
        0.03 * 0.8333 / 0.7, rel=1e-4
    )
