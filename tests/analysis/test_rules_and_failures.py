"""Plain-language flag rules (netcheck.analysis.rules) and answer failures
(netcheck.analysis.failures)."""

from __future__ import annotations

import math

import pytest

from netcheck.analysis import rules
from netcheck.analysis.failures import answer_failure_check

KINDS = ("shared-backend", "capacity", "result-sharing", "relay", "answer-failure", "slow")
JARGON = ("detector a", "detector b", "effect_floor", "p_threshold", "capacity_window",
          "capacity_strikes", "min_rounds", "floor_s", "mad_k", ">=", "H0")  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_every_rule_is_plain_and_ends_with_the_same_threshold_sentence(kind: str) -> None:
    """No config names or test jargon; one wording for statistic and threshold."""
    evidence = {"window": 8, "confirmation": {"effect_floor": math.log(1.25)},
                "floor_s": 0.005, "mad_k": 4.0, "min_rounds": 4}  # fmt: skip
    text = rules.rule_text(kind, evidence, 3.0)
    assert text is not None
    low = text.lower()
    assert not [j for j in JARGON if j.lower() in low], text
    assert "Statistic: " in text and "Threshold: " in text
    assert "; flagged when the statistic is " in text


def test_alone_slowness_rule_is_plain() -> None:
    """The alone-round slow flag has its own rule, plain, with the floor of its evidence."""
    text = rules.rule_text("slow", {"stage": "alone", "floor": 1.2, "alpha": 0.01}, 1e-3)
    assert text is not None and "only node loaded" in text and "1.2 times" in text
    assert not [j for j in JARGON if j.lower() in text.lower()], text
    assert "; flagged when the statistic is " in text


def test_rule_numbers_come_from_the_evidence() -> None:
    """The numbers shown are the flag's own: window, strikes, effect floor in %."""
    assert "at least 3 of its last 8 rounds" in rules.capacity(8, 3.0)
    assert "more than 25% above" in rules.shared_backend(math.log(1.25))
    assert "at least 2 of its last 5 checked rounds" in rules.answer_failure(5, 2)
    assert "5 ms plus 4 times" in rules.relay(0.005, 4.0, 4)
    assert rules.rule_text("something-else", {}, None) is None


def test_count_thresholds_are_the_counts_that_flag() -> None:
    """A count rule flags when the statistic is at least the threshold, so the threshold
    is the count that raises a flag, not a count "allowed" (3 of 3 allowed would not flag)."""
    for text in (rules.answer_failure(8, 3), rules.capacity(8, 3)):
        assert "allowed" not in text, text
        assert "rounds that raise a flag; flagged when the statistic is at least" in text


def test_answer_failure_counts_only_checked_rounds() -> None:
    """Unchecked and late rounds neither count nor fill the window."""
    verdicts = ["wrong-answer", "unchecked", "late", "malformed", "pass", "unchecked",
                "wrong-answer", "pass", "wrong-answer"]  # fmt: skip
    recent = [{"round_id": f"r{i}", "verdict": v} for i, v in enumerate(verdicts)]
    checked, hits, failed = answer_failure_check(recent, 4, 3)
    assert [v["round_id"] for v in checked] == ["r0", "r3", "r4", "r6"]
    assert [v["round_id"] for v in hits] == ["r0", "r3", "r6"] and failed
    assert not answer_failure_check(recent, 3, 3)[2]  # r0, r3 fail, r4 passes
