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

#: Lines kept: older ones are dropped when the file grows past :data:`TRIM_AT_BYTES`.
KEEP_LINES = 1000
#: Size at which :func:`append` trims the log (about 2,300 lines of a usual notice,
#: ~450 bytes each).
TRIM_AT_BYTES = 2 * KEEP_LINES * 512
#: Most bytes a trim keeps (the last lines that fit, at most :data:`KEEP_LINES`): well
#: under :data:`TRIM_AT_BYTES`, so the next trim, which reads the whole file, comes only
#: after 256 KiB or more of new notices, however long their lines (a reason of 1024
#: non-ASCII characters makes a 6.5 KB line).
KEEP_BYTES = KEEP_LINES * 768


def default_log_path(config_path: Path) -> Path:
    """``<config folder>/<config stem>.verdicts.jsonl``: one log per node config."""
    return config_path.with_name(f"{config_path.stem}.verdicts.jsonl")


def append(path: Path, notice: VerdictNotice, session_id: bytes, node_key: bytes) -> None:
    """Append one notice; past :data:`TRIM_AT_BYTES` the file is cut to its last
    :data:`KEEP_LINES` lines, and to at most :data:`KEEP_BYTES` of them. Raises OSError
    when the file cannot be written."""
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
    if path.stat().st_size > TRIM_AT_BYTES:
        # as bytes: a damaged line (not UTF-8) is dropped or kept, never a decode error.
        # Cut by size too: trimming by lines alone left a log of long lines (2,000 of
        # 6.5 KB) over the threshold, so every append re-read all of it (13 MB a notice:
        # 3,000 notices held the node's event loop for 35 s).
        kept: list[bytes] = []
        size = 0
        for raw in reversed(path.read_bytes().splitlines()[-KEEP_LINES:]):
            size += len(raw) + 1
            if size > KEEP_BYTES:
                break
            kept.append(raw)
        path.write_bytes(b"\n".join(reversed(kept)) + b"\n")


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
