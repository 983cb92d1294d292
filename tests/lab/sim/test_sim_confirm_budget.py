"""The simulator's confirmation budget per analysis (netcheck.analysis.confirm_budget),
as the coordinator's: strongest groups first, the budget respected, an unserved group
spends no attempt. The coordinator side, and both choosing the same work:
tests/coordinator/test_confirm_batches.py."""

from __future__ import annotations

from budget_support import run_budget_case

from netcheck.analysis.confirm_run import prior_attempts


def test_budget_serves_the_strongest_groups_first_and_bounds_the_rounds() -> None:
    """Budget 9: the farm a-b and the honest c-d share one 9-round step (strongest
    first); c-a, listed first by the detector and the largest z, but at the floor,
    waits and is left unserved: no round, no recorded attempt. Without a budget it
    runs after them."""
    started, rounds, unserved, tested = run_budget_case(9)
    assert started == [{"a", "b"}, {"c", "d"}]
    assert rounds == 9 and unserved == 1
    assert prior_attempts(("a", "c"), tested) == 0  # no attempt consumed
    assert prior_attempts(("a", "b"), tested) == 1 and prior_attempts(("c", "d"), tested) == 1

    started, rounds, unserved, tested = run_budget_case(0)
    assert started[:2] == [{"a", "b"}, {"c", "d"}] and {"a", "c"} in started
    assert rounds > 9 and unserved == 0 and prior_attempts(("a", "c"), tested) == 1


def test_a_run_the_budget_stops_leaves_its_attempt() -> None:
    """Budget 12: the first step (9 rounds) fits, a second 9-round look does not: a run
    still going is stopped and recorded (cleared, its attempt counted), as a coordinator
    run whose member left; the rounds never exceed the budget."""
    started, rounds, unserved, tested = run_budget_case(12)
    assert rounds == 9 <= 12 and unserved == 1
    assert sorted(tested) == [("a", "b"), ("c", "d")]
