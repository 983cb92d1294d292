"""checks.result_sharing passes the profile's prompt_len to the proof (s12): two different
prompts that the LLM engine's left truncation makes one input raise no flag."""

from __future__ import annotations

from typing import Any

import pytest

from netcheck.config import load_profile
from netcheck.coordinator import checks
from netcheck.records import Assignment, NodeRecord, RoundPlan

TAIL = "Write a diary entry from a crowded market about the new parking rules."
ROW = list(range(64))


def _run(monkeypatch: pytest.MonkeyPatch, prompt_len: int) -> list[Any]:
    raised: list[Any] = []
    monkeypatch.setattr(checks, "raise_flag", lambda *a: raised.append(a) or (1, True))
    monkeypatch.setattr(checks.ev, "result_sharing_evidence", lambda *a: {})
    monkeypatch.setattr(checks, "_pair_covered", lambda *a: False)  # no database here
    profile = load_profile("cpu-tiny").model_copy(update={"prompt_len": prompt_len})

    def job(node: str, prompt: str) -> Assignment:
        return Assignment(node, (prompt,), (), (), (), b"k" * 32, b"n" * 12)

    plan = RoundPlan("r1", "cpu-tiny", 1, 64, (job("n1", "Ref ppe01xhm6dt6: " + TAIL),
                                               job("n2", "Ref c9m2y7by8q5w: " + TAIL)), ())  # fmt: skip
    records = {n: NodeRecord(outputs=[ROW], commitment=n.encode() * 16) for n in ("n1", "n2")}
    checks.result_sharing(None, profile, plan, records)  # type: ignore[arg-type]
    return raised


def test_prompts_cut_to_one_input_raise_no_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(monkeypatch, 64) == []  # both are <s> + the same last 63 bytes
    assert len(_run(monkeypatch, len(TAIL) + 4)) == 1  # kept apart: still a flag
