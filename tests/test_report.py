"""The operator's terminal tables (netcheck/report.py)."""

from __future__ import annotations

import pytest

from netcheck.report import key_prefixes, print_round


def _verdict(key: str) -> dict[str, object]:
    return {
        "node_key": key, "verdict": "pass", "elapsed_s": 0.5,
        "canaries_matched": 1, "canaries_checked": 1, "reason": "ok",
    }  # fmt: skip


def test_round_table_tells_unnamed_keys_apart(capsys: pytest.CaptureFixture[str]) -> None:
    """Two unnamed keys sharing their first 30 characters: each row shows enough of its
    key to tell them apart (the table cut every key to 20 characters, so both rows read
    the same); a named node shows its name."""
    shared = "ed25519:" + "A" * 22
    one, two = shared + "B" + "x" * 20, shared + "C" + "x" * 20
    named = "ed25519:" + "A" * 43
    report = {
        "round_id": "r1",
        "profile": "p",
        "verdicts": [_verdict(k) for k in (one, two, named)],
    }
    print_round(report, {named: "honest-1"})
    rows = [line for line in capsys.readouterr().out.splitlines() if "│ pass" in line]
    assert len(rows) == 3
    assert any(shared + "B…" in r for r in rows) and any(shared + "C…" in r for r in rows), rows
    assert any("honest-1" in r for r in rows)


def test_key_prefixes() -> None:
    """At least 20 characters; longer where keys share more; a key that is whole within
    that is shown whole (no ellipsis), as is one that is a prefix of another."""
    a, b = "ed25519:" + "Q" * 43, "ed25519:" + "Q" * 40 + "RRR"
    c = "ed25519:" + "Z" * 43
    shown = key_prefixes([a, b, c, c])
    assert shown == {a: a[:49] + "…", b: b[:49] + "…", c: c[:20] + "…"}
    assert key_prefixes(["ed25519:x", "ed25519:xy"]) == {
        "ed25519:x": "ed25519:x",
        "ed25519:xy": "ed25519:xy",
    }
    assert key_prefixes([]) == {}
