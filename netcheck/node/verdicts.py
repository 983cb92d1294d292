"""The node's record of its verdicts: every signed notice the coordinator sent
(docs/protocol.md §5.11), one JSON object per line, read by ``netcheck node status``.

Each line holds ``received_at`` (Unix seconds), ``round_id``, ``verdict``, ``reason``,
``elapsed_s``, ``deadline_s``, and the hex ``session_id``, ``node_key`` (raw key) and
``signature``, so :func:`check_line` can re-verify it against the pinned coordinator
key later.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from netcheck.errors import MessageError
from netcheck.protocol.messages import VerdictNotice
from netcheck.protocol.verdicts import verify_verdict

#: Lines kept: older ones are dropped when the file grows past twice this.
KEEP_LINES = 1000


def default_log_path(config_path: Path) -> Path:
    """``<config folder>/<config stem>.verdicts.jsonl``: one log per node config."""
    return config_path.with_name(f"{config_path.stem}.verdicts.jsonl")


def append(path: Path, notice: VerdictNotice, session_id: bytes, node_key: bytes) -> None:
    """Append one notice; trims the file to the last :data:`KEEP_LINES` lines when it
    holds more than twice that. Raises OSError when the file cannot be written."""
    line = {
        "received_at": time.time(),
        "round_id": notice.round_id,
        "verdict": notice.verdict,
        "reason": notice.reason,
        "elapsed_s": notice.elapsed_s,
        "deadline_s": notice.deadline_s,
        "session_id": session_id.hex(),
        "node_key": node_key.hex(),
        "signature": notice.signature.hex(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, sort_keys=True) + "\n")
    if path.stat().st_size > 2 * KEEP_LINES * 400:
        # as bytes: a damaged line (not UTF-8) is dropped or kept, never a decode error
        lines = path.read_bytes().splitlines()
        if len(lines) > 2 * KEEP_LINES:
            path.write_bytes(b"\n".join(lines[-KEEP_LINES:]) + b"\n")


def read(path: Path, limit: int = 20) -> list[dict[str, Any]]:
    """The last ``limit`` entries, oldest first ([] when the file does not exist).
    Lines that are not JSON objects (or not UTF-8: a torn write) are skipped.

    Raises:
        OSError: the file exists but cannot be read (a folder, no permission).
    """
    if not path.exists():
        return []
    text = path.read_bytes().decode("utf-8", errors="replace")
    out = list(_parse(text.splitlines()))
    return out[-limit:]


def _parse(lines: list[str]) -> Iterator[dict[str, Any]]:
    for text in lines:
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested too deeply
            continue
        if isinstance(obj, dict):
            yield obj


def check_line(entry: dict[str, Any], coordinator_key: Ed25519PublicKey) -> bool:
    """True if a stored entry still carries a valid coordinator signature."""
    try:
        notice = VerdictNotice(
            entry["round_id"], entry["verdict"], entry["reason"], entry["elapsed_s"],
            entry["deadline_s"], bytes.fromhex(entry["signature"]),
        )  # fmt: skip
        return verify_verdict(
            coordinator_key,
            bytes.fromhex(entry["session_id"]),
            bytes.fromhex(entry["node_key"]),
            notice,
        )
    except (KeyError, TypeError, ValueError, MessageError):
        return False
