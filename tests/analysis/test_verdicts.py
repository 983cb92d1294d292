"""Tests for netcheck.analysis.verdicts.verify: one test per verdict path."""

from __future__ import annotations

from dataclasses import replace

import pytest

from netcheck.analysis.verdicts import (
    NodeOutcome,
    Observation,
    Verdict,
    profile_mismatch,
    verify,
)
from netcheck.records import Assignment

T = 3  # max_new_tokens
B = 5
ANSWERS = ((7, 7, 7), (9, 9, 9))
ASSIGNMENT = Assignment(
    node_key="n1",
    prompts=tuple(f"p{i}" for i in range(B)),
    canary_positions=(1, 3),
    canary_ids=("c1", "c3"),
    canary_answers=ANSWERS,
    job_key=bytes(32),
    job_nonce=bytes(12),
)
GOOD_OUTPUTS = ((0, 0, 0), ANSWERS[0], (2, 2, 2), ANSWERS[1], (4, 4, 4))
GOOD = Observation(
    released_ns=1_000_000_000,
    arrived_ns=2_500_000_000,
    outputs=GOOD_OUTPUTS,
    commitment=b"c" * 32,
    signature_ok=True,
    disconnected=False,
    error=None,
    commitment_ok=True,
)


def judge(obs: Observation, deadline_s: float = 2.0) -> NodeOutcome:
    return verify(ASSIGNMENT, obs, max_new_tokens=T, deadline_s=deadline_s)


def test_pass() -> None:
    """All canaries match within the deadline: pass, with elapsed time and counts."""
    out = judge(GOOD)
    assert out.verdict is Verdict.PASS and out.node_key == "n1"
    assert out.elapsed_s == pytest.approx(1.5)
    assert (out.canaries_checked, out.canaries_matched) == (2, 2)
    assert "2/2 canaries matched" in out.reason


def test_outputs_as_lists_accepted() -> None:
    """Outputs given as lists compare equal to tuple answers."""
    obs = replace(GOOD, outputs=[list(o) for o in GOOD_OUTPUTS])
    assert judge(obs).verdict is Verdict.PASS


def test_disconnected_before_the_job_was_delivered() -> None:
    """No result and the session closed before the node's job was written to it in full
    (no job-written stamp, no ack stamp, no release): disconnected."""
    obs = replace(GOOD, released_ns=None, arrived_ns=None, outputs=None, commitment=None,
                  disconnected=True)  # fmt: skip
    out = judge(obs)
    assert out.verdict is Verdict.DISCONNECTED and out.elapsed_s is None
    assert out.reason == "session closed before its job was delivered"


def test_closed_after_delivery_before_the_ack_is_missing() -> None:
    """No result and the session closed after its job was written in full but before
    the node acknowledged it (job written at 0.7 s, no ack, no release): missing. The
    job arrives before the ack, so a farm controller that sees two identities' jobs
    could otherwise close one before acking, for free (docs/detection.md, "What
    escapes")."""
    obs = replace(GOOD, released_ns=None, arrived_ns=None, outputs=None, commitment=None,
                  disconnected=True, closed_ns=900_000_000,
                  job_written_ns=700_000_000)  # fmt: skip
    out = judge(obs)
    assert out.verdict is Verdict.MISSING, out.reason
    assert out.reason == "session closed after its job was delivered, before acknowledging it"


ABANDONED = "session closed after acknowledging its job, without a result"


@pytest.mark.parametrize(
    ("released_ns", "closed_ns", "when"),
    [(None, 900_000_000, "(closed before its release)"),
     (1_000_000_000, 1_500_000_000,
      "(closed 0.500 s after release, before the deadline 2.000 s)"),
     (1_000_000_000, 3_000_000_000,
      "(closed 2.000 s after release, before the deadline 2.000 s)"),
     (1_000_000_000, 3_000_000_001,
      "(closed 2.000 s after release, after the deadline 2.000 s)"),
     (1_000_000_000, None, "(closed after its release)")],
)  # fmt: skip
def test_closed_after_the_ack_is_missing(
    released_ns: int | None, closed_ns: int | None, when: str
) -> None:
    """No result and the session closed after the node acknowledged its job (ack at
    0.8 s, release at 1 s, deadline 2 s): missing (a capacity strike) whenever the
    close came, before the release, before or after the deadline. A farm that sees
    two of its identities get jobs could otherwise make one leave for free exactly in
    the rounds that co-load them (docs/detection.md, "What escapes")."""
    obs = replace(GOOD, released_ns=released_ns, arrived_ns=None, outputs=None,
                  commitment=None, disconnected=True, closed_ns=closed_ns,
                  job_written_ns=700_000_000, acked_ns=800_000_000)  # fmt: skip
    out = judge(obs)
    assert out.verdict is Verdict.MISSING, out.reason
    assert out.reason == f"{ABANDONED} {when}"


def test_a_release_means_an_ack() -> None:
    """A release is written only after the ack: released without an ack stamp (an
    observation built before ack stamps were passed) counts as acknowledged."""
    obs = replace(GOOD, arrived_ns=None, outputs=None, commitment=None, disconnected=True,
                  closed_ns=1_500_000_000)  # fmt: skip
    assert judge(obs).verdict is Verdict.MISSING


def test_result_before_disconnect_is_judged() -> None:
    """A result that arrived before the session closed is judged on its content."""
    assert judge(replace(GOOD, disconnected=True)).verdict is Verdict.PASS


@pytest.mark.parametrize(
    ("error", "text"), [(None, "no result"), ("oom", "node reported error: oom")]
)
def test_missing(error: str | None, text: str) -> None:
    """No result, session still open (or node reported an error): missing."""
    obs = replace(GOOD, arrived_ns=None, outputs=None, commitment=None, error=error)
    out = judge(obs)
    assert out.verdict is Verdict.MISSING and text in out.reason
    assert (out.canaries_checked, out.canaries_matched) == (0, 0)


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"outputs": GOOD_OUTPUTS[:-1]}, "4 outputs, expected 5"),
        ({"outputs": GOOD_OUTPUTS + ((1, 1, 1),)}, "6 outputs, expected 5"),
        ({"outputs": (*GOOD_OUTPUTS[:2], (2, 2), *GOOD_OUTPUTS[3:])}, "positions [2]"),
        ({"commitment_ok": False}, "commitment does not match"),
        ({"commitment": None}, "commitment does not match"),
        ({"signature_ok": False}, "signature does not verify"),
        ({"released_ns": None}, "before release"),
        ({"arrived_ns": 999_999_999}, "before release"),
        ({"arrived_ns": None}, "without arrival time"),
    ],
)
def test_malformed(change: dict[str, object], text: str) -> None:
    """Wrong count or length, bad commitment or signature, bad timing: malformed."""
    out = judge(replace(GOOD, **change))  # type: ignore[arg-type]
    assert out.verdict is Verdict.MALFORMED
    assert text in out.reason


def test_malformed_beats_wrong_answer() -> None:
    """A bad signature is reported even when a canary is also wrong."""
    outputs = ((0, 0, 0), (1, 1, 1), *GOOD_OUTPUTS[2:])
    out = judge(replace(GOOD, outputs=outputs, signature_ok=False))
    assert out.verdict is Verdict.MALFORMED


def test_wrong_answer_lists_positions() -> None:
    """Any canary output differing from its answer: wrong-answer naming the positions."""
    outputs = list(GOOD_OUTPUTS)
    outputs[3] = (9, 9, 8)
    out = judge(replace(GOOD, outputs=tuple(outputs)))
    assert out.verdict is Verdict.WRONG_ANSWER
    assert "positions [3]" in out.reason and "1/2 matched" in out.reason
    assert (out.canaries_checked, out.canaries_matched) == (2, 1)


def test_wrong_answer_beats_late() -> None:
    """A wrong canary is reported even when the result is also late."""
    outputs = (GOOD_OUTPUTS[0], (0, 0, 0), *GOOD_OUTPUTS[2:])
    out = judge(replace(GOOD, outputs=outputs), deadline_s=0.1)
    assert out.verdict is Verdict.WRONG_ANSWER


def test_late() -> None:
    """Correct but after the deadline: late; exactly at the deadline still passes."""
    out = judge(GOOD, deadline_s=1.0)
    assert out.verdict is Verdict.LATE and out.elapsed_s == pytest.approx(1.5)
    assert (out.canaries_checked, out.canaries_matched) == (2, 2)
    assert judge(GOOD, deadline_s=1.5).verdict is Verdict.PASS


def test_profile_mismatch_helper() -> None:
    """Skipped nodes get a profile-mismatch outcome with the planner's reason."""
    out = profile_mismatch("n9", "no unspent canaries for fingerprint abc")
    assert out.verdict is Verdict.PROFILE_MISMATCH and out.reason.startswith("no unspent")
    assert out.verdict == "profile-mismatch"
