"""Tests for netcheck.analysis.answers: answer-level proof of result sharing."""

from __future__ import annotations

from netcheck.analysis.answers import NodeResult, find_result_sharing, may_share_input

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


# The demo's false flag (s12): two different 89-character prompts whose last 63 characters
# are equal, so a prompt_len-64 engine (`<s>` + last 63 tokens) sees the same input.
TAIL = "Write a diary entry from a crowded market about the new parking rules."
CUT_A = "Ref ppe01xhm6dt6: " + TAIL
CUT_B = "Ref c9m2y7by8q5w: " + TAIL


def test_prompts_cut_to_the_same_input_are_not_result_sharing() -> None:
    """Identical rows for different prompts that the engine's left truncation makes the
    same input are honest (neither a row nor a commitment finding)."""
    assert len(CUT_A) == 88 and CUT_A[-63:] == CUT_B[-63:]
    results = {"n1": NodeResult(b"1" * 32, [ROW_B, ROW_A]), "n2": NodeResult(b"2" * 32, [ROW_A])}
    prompts = {"n1": ["x", CUT_A], "n2": [CUT_B]}
    assert find_result_sharing("r1", results, prompts, prompt_len=64) == []
    same = {"n1": NodeResult(b"c" * 32, [ROW_A]), "n2": NodeResult(b"c" * 32, [ROW_A])}
    assert find_result_sharing("r1", same, {"n1": [CUT_A], "n2": [CUT_B]}, prompt_len=64) == []
    # the common suffix is ": " + TAIL; an engine that keeps one character more tells
    # them apart: still a finding
    assert find_result_sharing("r1", results, prompts, prompt_len=len(TAIL) + 3) == []
    found = find_result_sharing("r1", results, prompts, prompt_len=len(TAIL) + 4)
    assert [(f.a, f.b, f.evidence, f.positions) for f in found] == [
        ("n1", "n2", "outputs", ((1, 0),))
    ]


def test_may_share_input_bounds() -> None:
    """A common suffix of prompt_len - 1 characters may be one input, one fewer may not;
    short prompts are never cut; non-ASCII prompts are never told apart."""
    assert may_share_input("aXYZ", "bXYZ", 4)
    assert not may_share_input("aXYZ", "bXYZ", 5)
    assert not may_share_input("XYZ", "aXYZ", 5)
    assert may_share_input("XYZ", "aXYZ", 4)  # "aXYZ" cut to <s> + "XYZ" is "XYZ" uncut
    assert not may_share_input("ab", "cd", None) and may_share_input("ab", "ab", None)
    assert may_share_input("é" + TAIL[:20], "e" + TAIL[:20], 64)
    assert not may_share_input(CUT_A, CUT_B, 200)


def test_a_prompt_length_of_one_token_makes_every_prompt_one_input() -> None:
    """``prompt_len = 1`` (an operator's typo, which the profile now refuses): an engine that adds
    ``<s>`` keeps only ``<s>`` of every prompt, so every prompt is the same input and every
    honest node returns the same rows. Those rows are no proof of sharing (review,
    session 13: the suffix bound was floored at one character, so two honest nodes were
    flagged ``result-sharing``)."""
    assert may_share_input("ab", "cd", 1)
    rows = [[7] * 8, [7] * 8]
    results = {n: NodeResult(bytes([i]) * 32, rows) for i, n in enumerate(("n1", "n2"))}
    prompts = {"n1": ["Ref : a", "Ref : b"], "n2": ["Ref : c", "Ref : d"]}
    assert find_result_sharing("r1", results, prompts, prompt_len=1) == []
