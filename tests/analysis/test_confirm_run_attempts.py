"""Attempt counting of group confirmations from stored rounds as well as records
(netcheck/analysis/confirm_run.py ``stored_runs``, ``next_attempt``): a run cut short
before it stored its flag or ``cleared`` record still counts, once, whatever the
context format (docs/detection.md "Confirmation", point 4)."""

from __future__ import annotations

from netcheck.analysis.confirm_batch import ConfirmationBatch, round_context
from netcheck.analysis.confirm_run import ConfirmationRun, next_attempt, stored_runs

SECRET = b"s" * 32


def _entry(group: list[str], attempt: int | None = None, look: int = 0) -> dict[str, object]:
    entry: dict[str, object] = {"group": group, "phase": "group", "look": look,
                                "tested": sorted(group), "loaded": group[:1]}  # fmt: skip
    if attempt is not None:
        entry["attempt"] = attempt
    return entry


def test_shared_rounds_count_one_run_per_batch_group_and_attempt() -> None:
    """Many rounds of one run count once; the same group in another batch, or in the
    same batch id with another attempt, is another run; a group stored in another
    member order is the same group."""
    contexts = [
        round_context("p/r1", [_entry(["a", "b"], 1), _entry(["c", "d", "e"], 1)]),
        round_context("p/r1", [_entry(["b", "a"], 1, look=1)]),
        round_context("p/r1", [_entry(["a", "b"], 2)]),  # same batch id, a later attempt
        round_context("p/r2", [_entry(["a", "b"], 3)]),
        round_context("p/r2", [_entry(["a", "b"], 3)]),
    ]
    assert stored_runs(contexts) == [("a", "b"), ("c", "d", "e"), ("a", "b"), ("a", "b")]
    assert next_attempt(["a", "b"], [], stored_runs(contexts)) == 4
    assert next_attempt(["c", "d"], [], stored_runs(contexts)) == 2
    # contexts stored before "attempt" was recorded: one run per batch and group
    before = [round_context("p/r1", [_entry(["a", "b"])]) for _ in range(5)]
    assert stored_runs(before) == [("a", "b")]


def test_older_single_run_rounds_split_where_the_group_changes_or_the_look_drops() -> None:
    """Older rounds (groups confirmed one at a time, no batch): a run is a stretch of
    rounds of one group whose look never drops; any other round in between (another
    group, the alone stage's) ends it."""

    def old(group: str, look: int) -> dict[str, object]:
        return {"group": list(group), "phase": "group", "look": look, "tested": list(group)}

    contexts = [
        old("ab", 0),
        old("ab", 0),
        old("ab", 1),
        old("ab", 1),  # run 1
        old("ab", 0),
        old("ab", 2),  # run 2: the look dropped
        old("cd", 0),  # run 3
        old("ab", 0),  # run 4: another group in between
        {"slowness": "a", "round": 0},
        old("ab", 0),  # run 5: the alone stage in between
        {"group": ["a", "b"], "phase": "group"},  # the oldest format, no look: run 6
    ]
    assert stored_runs(contexts) == [("a", "b")] * 2 + [("c", "d")] + [("a", "b")] * 3
    assert next_attempt(["a", "b", "c"], [], stored_runs(contexts)) == 6  # not (c, d)
    assert next_attempt(["c", "d"], [], stored_runs(contexts)) == 2


def test_malformed_and_foreign_contexts_name_no_run() -> None:
    """Non-mappings, the alone stage's rounds, groups that are not lists of 2+ distinct
    keys and junk entries of a shared round are skipped, not raised on."""
    contexts: list[object] = [
        None, "junk", [], {}, {"slowness": "a", "round": 3},
        {"group": "ab", "look": 0}, {"group": ["a"], "look": 0}, {"group": ["a", "a"]},
        {"runs": ["junk", None, {"group": None}, {"group": ["a"]}, {"attempt": 1}],
         "batch": "p/r1"},
        {"runs": "junk"},
        {"batch": "p/r1", "runs": [{"group": ["a", "b"], "attempt": "x"}]},  # attempt unreadable
        {"runs": [{"group": ["a", "b"]}]},  # no batch id
    ]  # fmt: skip
    assert stored_runs(contexts) == [("a", "b"), ("a", "b")]
    assert stored_runs([]) == []


def test_next_attempt_takes_the_larger_count_plus_one_never_the_sum() -> None:
    """Records and started runs count the same finished runs twice over, so the larger
    count is used; only runs sharing 2+ members with the group count; with nothing
    stored the run is the first attempt."""
    assert next_attempt(["a", "b"], [], []) == 1
    assert next_attempt(["a", "b"], [["a", "b"]], [("a", "b")]) == 2
    assert next_attempt(["a", "b"], [["a", "b"]], [("a", "b"), ("a", "b")]) == 3  # one cut short
    flags_and_record = [["a", "b"], ["c", "d"], ["a", "b", "c", "d"]]  # one run's flags + record
    assert next_attempt(["a", "b", "c", "d"], flags_and_record, [("a", "b", "c", "d")]) == 4
    assert next_attempt(["a", "b", "c"], [], [("a", "x"), ("a", "b", "x"), ("x", "y")]) == 2


def test_a_batch_stores_contexts_that_count_each_of_its_runs_once() -> None:
    """The contexts of every shared round of a planned step carry each run's attempt;
    read back they give one run per group, not one per round."""
    runs = [ConfirmationRun(("a", "b"), 3, 6, attempt=2), ConfirmationRun(("c", "d", "e"), 3, 6)]
    batch = ConfirmationBatch(runs, "p/r/0", SECRET)
    contexts = [batch.context(r) for r in batch.plan()]
    assert len(contexts) == 12
    entries = [e for c in contexts for e in c["runs"]]
    assert {(tuple(e["group"]), e["attempt"]) for e in entries} == {
        (("a", "b"), 2),
        (("c", "d", "e"), 1),
    }
    assert sorted(stored_runs(contexts)) == [("a", "b"), ("c", "d", "e")]
