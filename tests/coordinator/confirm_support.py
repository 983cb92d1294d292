"""What the live confirmation tests (test_confirm_batches, test_confirm_pool) share:
a small profile for nodes on EMULATED GPU service times, their fingerprint and the
empty history the confirmations start from."""

from __future__ import annotations

from netcheck.config import DeadlineParams, Profile
from netcheck.lab.testing import FAKE_FINGERPRINT, small_profile
from netcheck.records import StoredRounds

#: Tokens per output.
T = 4
FP = FAKE_FINGERPRINT
#: No stored round: the history a confirmation starts from here.
EMPTY = StoredRounds((), {}, {}, ())


def emulated_profile(name: str) -> Profile:
    """A small profile ``name`` (prompts of 16 tokens, ``T`` new tokens) with deadlines
    for emulated GPUs of a few tenths of a second per batch: t_ref 0.3 s, a 1.5, slack
    0.2 s; dispatch timeout 5 s, result timeout 3 s."""
    return small_profile(
        name, prompt_len=16, max_new_tokens=T,
        deadline=DeadlineParams(t_ref_s=0.3, a=1.5, slack_s=0.2), dispatch_timeout_s=5.0,
        result_timeout_s=3.0,
    )  # fmt: skip
