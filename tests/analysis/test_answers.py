"""Tests for netcheck.analysis.answers: answer-level proof of result sharing."""

from __future__ import annotations

from netcheck.analysis.answers import NodeResult, find_result_sharing

ROW_A = list(range(10))
ROW_B = list(range(10, 20))


def test_shared_commitment_is_result_sharing() -> None:
    """Identical commitments for different batches are a finding."""
    results = {
        "n1": NodeResult(b"c" * 32, [ROW_A]),
        "n2": NodeResult(b"c" * 32, [ROW_A]),
        "n3": NodeResult(b"d" * 32, [ROW_B]),
    }
    prompts = {"n1": ["p1"], "n2": ["p2"], "n3": ["p3"]}
    found = find_result_sharing("r1", results, prompts)
    assert [(f.kind, f.a, f.b, f.evidence) for f in found] == [
        ("result-sharing", "n1", "n2", "commitment")
    ]
    assert found[0].commitment_hex == (b"c" * 32).hex()


def test_identical_output_rows_for_different_prompts() -> None:
    """A node returning another node's row for a different prompt is a finding."""
    results = {"n1": NodeResult(b"1" * 32, [ROW_B, ROW_A]), "n2": NodeResult(b"2" * 32, [ROW_A])}
    prompts = {"n1": ["x", "p1"], "n2": ["p2"]}
    found = find_result_sharing("r1", results, prompts)
    assert [(f.a, f.b, f.evidence, f.positions) for f in found] == [
        ("n1", "n2", "outputs", ((1, 0),))
    ]


def test_same_prompt_short_rows_and_distinct_results_are_fine() -> None:
    """Same prompt, short rows and distinct outputs give no finding."""
    results = {
        "n1": NodeResult(b"1" * 32, [ROW_A, [1, 2]]),
        "n2": NodeResult(b"2" * 32, [ROW_A, [1, 2]]),
        "n3": NodeResult(b"3" * 32, [ROW_B]),
    }
    prompts = {"n1": ["same", "a"], "n2": ["same", "b"], "n3": ["c"]}
    assert find_result_sharing("r1", results, prompts) == []
