"""Operator files nested too deeply for Python's recursive parsers (tomllib, json): a
clear error naming the file, never a RecursionError traceback. Each reader here used to
catch only ValueError / TOMLDecodeError, and RecursionError is neither."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from netcheck.cli import main
from netcheck.config import load_node_config, load_profile
from netcheck.errors import ConfigError
from netcheck.node import verdicts
from netcheck.receipts import _load_outputs

DEPTH = 50_000  # far past the interpreter's recursion limit (1000)


def deep_toml(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text("x = " + "[" * DEPTH + "]" * DEPTH + "\n")
    return path


def deep_json(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text("[" * DEPTH + "]" * DEPTH)
    return path


@pytest.mark.parametrize("nest", ["array", "inline-table"])
def test_config_and_profile_files_nested_too_deeply(tmp_path: Path, nest: str) -> None:
    """A node config or profile of deep arrays / inline tables is a ConfigError naming
    the file (was RecursionError out of tomllib, a traceback from every command)."""
    path = tmp_path / "deep.toml"
    value = "[" * DEPTH + "]" * DEPTH if nest == "array" else "{a = " * DEPTH + "1" + "}" * DEPTH
    path.write_text(f"x = {value}\n")
    for load in (load_node_config, load_profile):
        with pytest.raises(ConfigError, match="nested too deeply") as err:
            load(path)
        assert str(path) in str(err.value)


def test_doctor_reports_a_deeply_nested_config(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["doctor", "--config", str(deep_toml(tmp_path, "n.toml"))])
    assert not isinstance(result.exception, RecursionError), result.exception
    assert "nested too deeply" in result.output


def test_engine_pool_refuses_a_deeply_nested_record(tmp_path: Path) -> None:
    """`netcheck engine pool` on a record of deep arrays: `error: <file>: ...`, exit 2."""
    a, b = deep_json(tmp_path, "a.json"), deep_json(tmp_path, "b.json")
    result = CliRunner().invoke(main, ["engine", "pool", str(a), str(b)])
    assert not isinstance(result.exception, RecursionError), result.exception
    assert result.exit_code == 2, result.output
    assert f"{a}: not a readable JSON calibration record" in result.output


def test_receipt_outputs_file_nested_too_deeply(tmp_path: Path) -> None:
    with pytest.raises(click.BadParameter, match="not readable JSON"):
        _load_outputs(deep_json(tmp_path, "outputs.json"), None)


def test_node_status_skips_a_deeply_nested_line(tmp_path: Path) -> None:
    """A damaged verdict-log line nested too deeply is skipped like any undecodable one."""
    log = tmp_path / "node.verdicts.jsonl"
    log.write_text('{"round_id": "r1"}\n' + "[" * DEPTH + "]" * DEPTH + '\n{"round_id": "r2"}\n')
    assert [e["round_id"] for e in verdicts.read(log)] == ["r1", "r2"]
