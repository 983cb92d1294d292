"""The node's verdict log (``<config>.verdicts.jsonl``) when it is damaged: bytes that
are not UTF-8 (a torn write, a bad disk block) or a path that is not a file. Reading it
for ``netcheck node status`` and trimming it while the node runs must not raise
anything but a clear error: a UnicodeDecodeError out of ``append`` left the node's
verdict handler (which expects OSError) and ``node status`` printed a traceback."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from node_support import OFFLINE_URL, node_config

from netcheck.cli import main
from netcheck.keys import public_key_text
from netcheck.node import verdicts
from netcheck.protocol.messages import VerdictNotice
from netcheck.protocol.verdicts import sign_verdict

COORDINATOR = Ed25519PrivateKey.generate()
SESSION, NODE = bytes(range(16)), bytes(32)


def notice(round_id: str) -> VerdictNotice:
    return sign_verdict(COORDINATOR, SESSION, NODE, round_id, "pass", "", 0.5, 1.0)


def _config(tmp_path: Path) -> Path:
    """A node config pinning ``COORDINATOR`` (whose verdicts the log holds)."""
    return node_config(tmp_path, OFFLINE_URL, public_key_text(COORDINATOR))


def test_status_skips_undecodable_lines(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    log = verdicts.default_log_path(cfg)
    verdicts.append(log, notice("r1"), SESSION, NODE)
    with log.open("ab") as fh:
        fh.write(b'{"round_id": "\xff\xfe torn\n')
    verdicts.append(log, notice("r2"), SESSION, NODE)
    result = CliRunner().invoke(main, ["node", "status", "--config", str(cfg), "--json"])
    assert result.exit_code == 0, result.output
    assert "r1" in result.output and "r2" in result.output


def test_status_of_a_log_that_is_a_folder_is_a_clear_error(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    verdicts.default_log_path(cfg).mkdir()
    result = CliRunner().invoke(main, ["node", "status", "--config", str(cfg)])
    assert result.exit_code == 3, result.output
    assert "verdicts.jsonl" in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)  # an error line, not a traceback


def test_trimming_a_log_with_undecodable_bytes_keeps_the_node_going(tmp_path: Path) -> None:
    log = tmp_path / "n.verdicts.jsonl"
    line = b'{"round_id": "old", "pad": "' + b"x" * 500 + b'"}\n'
    log.write_bytes(b"\xff\xfe garbage\n" + line * (2 * verdicts.KEEP_LINES + 10))
    verdicts.append(log, notice("new"), SESSION, NODE)  # raised UnicodeDecodeError
    kept = verdicts.read(log, limit=10_000)
    assert len(kept) == verdicts.KEEP_LINES and kept[-1]["round_id"] == "new"
