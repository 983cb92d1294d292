"""The verdict log is trimmed by size as well as by lines, so a stream of notices with
long reasons does not make every append re-read the whole file. Before: with lines of
6.5 KB (a reason of 1024 non-ASCII characters, JSON-escaped) the log stayed over the
trim threshold with under 2,000 lines, and every notice re-read up to 13 MB on the
node's event loop: 3,000 notices took 35.7 s and an echo waited 25.8 s behind them
(0.86 s and 0.67 s now; /tmp/brk15/a8.py, a real session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.node import verdicts
from netcheck.protocol.verdicts import sign_verdict

COORDINATOR = Ed25519PrivateKey.generate()
SESSION, NODE = bytes(range(16)), bytes(32)


def append(log: Path, round_id: str, reason: str) -> None:
    notice = sign_verdict(COORDINATOR, SESSION, NODE, round_id, "late", reason, 1.5, 1.0)
    verdicts.append(log, notice, SESSION, NODE)


def test_long_lines_do_not_make_every_append_reread_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "n.verdicts.jsonl"
    reads = 0
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        nonlocal reads
        reads += 1
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    for i in range(400):
        append(log, f"r{i}", "é" * 1024)
    assert reads <= 12, reads  # was 275: every append once the log passed 800 KB
    assert log.stat().st_size <= verdicts.TRIM_AT_BYTES
    kept = verdicts.read(log, limit=10_000)
    assert kept[-1]["round_id"] == "r399" and len(kept) >= 100


def test_usual_notices_keep_the_last_keep_lines(tmp_path: Path) -> None:
    """Notices of a usual size (~450 bytes a line) still keep KEEP_LINES lines."""
    log = tmp_path / "n.verdicts.jsonl"
    reason = "late: answered after the deadline of its profile"
    n = 3 * verdicts.KEEP_LINES  # 1.3 MB of 446-byte lines: trimmed once at least
    for i in range(n):
        append(log, f"r{i}", reason)
    kept = verdicts.read(log, limit=10_000)
    assert verdicts.KEEP_LINES <= len(kept) < n
    assert kept[-1]["round_id"] == f"r{n - 1}"
