"""`netcheck node status` on a verdict-log line that is JSON but has a field of the
wrong type (hand-edited, another version, a damaged disk block that still parses):
the line shows with ``?`` in that column. Before: a traceback for each of these
(ValueError, TypeError, OverflowError out of the table formatting)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from node_support import OFFLINE_URL, node_config

from netcheck.cli import main


@pytest.mark.parametrize(
    "line",
    [
        '{"round_id": "x", "received_at": "soon"}',
        '{"round_id": "x", "received_at": null}',
        '{"round_id": "x", "received_at": 1e300}',
        '{"round_id": "x", "received_at": NaN}',
        '{"round_id": "x", "received_at": true}',
        '{"round_id": "x", "received_at": 1, "elapsed_s": "1"}',
        '{"round_id": "x", "received_at": 1, "deadline_s": []}',
        '{"round_id": "x", "received_at": 1, "elapsed_s": Infinity}',
    ],
)
def test_a_line_with_a_field_of_the_wrong_type_is_shown(tmp_path: Path, line: str) -> None:
    cfg = node_config(tmp_path, OFFLINE_URL)
    (tmp_path / "node.verdicts.jsonl").write_text(line + "\n")
    result = CliRunner().invoke(main, ["node", "status", "--config", str(cfg)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "?" in result.output and "BAD" in result.output  # unsigned: its signature fails
