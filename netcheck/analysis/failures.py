"""Answer failures (pure): a node whose answers keep failing the canary check.

A node that returns wrong tokens or malformed answers round after round (0% pass) is
either not running the claimed model or running it wrongly. Each such round already has
its verdict; :func:`answer_failure_check` turns a run of them into an
``answer-failure`` flag, the same way capacity strikes do for ``late``/``missing``
(:func:`netcheck.analysis.screening.capacity_check`): at least ``strikes`` failures
among the node's last ``window`` *checked* rounds. Rounds in which the node was not
checked (``unchecked``: no canary for its fingerprint; ``coordinator-error``) and rounds
it missed or answered late (capacity's business) neither count nor fill the window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from netcheck.analysis import rules
from netcheck.records import FlagKind, Verdict

ANSWER_FAILURE = FlagKind.ANSWER_FAILURE
#: Verdicts that mean the node's own answer was wrong.
FAILURE_VERDICTS = frozenset({str(Verdict.WRONG_ANSWER), str(Verdict.MALFORMED)})
#: Verdicts of rounds in which the node's answer was checked (pass or failure).
CHECKED_VERDICTS = FAILURE_VERDICTS | {str(Verdict.PASS)}


def answer_failure_check(
    recent_verdicts: Sequence[Mapping[str, Any]], window: int, strikes: int
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], bool]:
    """The node's last ``window`` checked verdicts (from ``recent_verdicts``, newest
    first, rows with ``verdict``), the failures among them, and whether there are at
    least ``strikes`` failures."""
    checked = [v for v in recent_verdicts if v["verdict"] in CHECKED_VERDICTS][:window]
    hits = [v for v in checked if v["verdict"] in FAILURE_VERDICTS]
    return checked, hits, len(hits) >= strikes


def answer_failure_evidence(
    checked: Sequence[Mapping[str, Any]], hits: Sequence[Mapping[str, Any]], window: int,
    strikes: int, receipts: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """Evidence of an ``answer-failure`` flag: the node's checked verdicts (newest
    first, with their reasons), the failed rounds, and the receipts of those rounds (the
    node's signed outputs, to show what it answered)."""
    return {
        "rule": rules.answer_failure(window, strikes),
        "rounds": [v["round_id"] for v in checked],
        "failure_rounds": [v["round_id"] for v in hits],
        "verdicts": [dict(v) for v in checked],
        "window": window,
        "strikes": strikes,
        "receipts": [dict(r) for r in receipts],
    }
