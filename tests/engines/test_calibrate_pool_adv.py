"""Crafted calibration records and failing outputs for ``netcheck engine pool``: every
bad input is ``error: ...`` naming the file and the field, exit 2, no traceback and no
file written; the profile of ``--update-profile`` is rewritten last and atomically."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_calibrate_pool import FAST, SLOW, _record

from netcheck.cli import main
from netcheck.config import DEFAULT_PROFILES_DIR

Mutate = Callable[[dict[str, Any]], None]


def _set(field: str, value: Any) -> Mutate:
    def f(r: dict[str, Any]) -> None:
        r[field] = value

    return f


def _set_in(field: str, key: Any, value: Any) -> Mutate:
    def f(r: dict[str, Any]) -> None:
        r[field][key] = value

    return f


BAD: dict[str, tuple[Mutate, str]] = {
    "nan time": (_set_in("times_s", 0, float("nan")), "times_s[0]"),
    "inf time": (_set_in("times_s", 3, float("inf")), "times_s[3]"),
    "bool time": (_set_in("times_s", 0, True), "times_s[0]"),
    "string time": (_set_in("times_s", 0, "1.0"), "times_s[0]"),
    "zero time": (_set_in("times_s", 0, 0), "times_s[0]"),
    "t_k_s a number": (_set("t_k_s", 5), "t_k_s"),
    "t_k_s strings": (_set("t_k_s", ["x", "y"]), "t_k_s[0]"),
    "t(2) < t(1)": (_set("t_k_s", [1.06, 0.5]), "t_k_s"),
    "deadline a list": (_set("deadline", [1, 2]), "deadline"),
    "slack a string": (_set_in("deadline", "slack_s", "x"), "deadline.slack_s"),
    "coupling nan": (_set_in("deadline", "coupling", float("nan")), "deadline.coupling"),
    "beta strings": (_set("beta", ["x"]), "beta[0]"),
    "capacity a list": (_set("capacity", [1]), "capacity"),
    "card an object": (_set("card", {"x": 1}), "card"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_crafted_record_is_an_error_naming_file_and_field(tmp_path: Path, case: str) -> None:
    mutate, field = BAD[case]
    a = _record("GPU-a", FAST, [1.005, 1.9])
    b = copy.deepcopy(_record("GPU-b", SLOW, [1.064, 2.0]))
    mutate(b)
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    out = tmp_path / "out"
    args = ["engine", "pool", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.output, result.exception)
    text = " ".join(result.output.split())
    assert "error:" in text and "b.json" in text and f"field {field}" in text, text
    assert not out.exists()


def _pair(tmp_path: Path) -> list[str]:
    paths = []
    for name, rec in (("a", _record("GPU-a", FAST, [1.005, 1.9])),
                      ("b", _record("GPU-b", SLOW, [1.064, 2.0]))):  # fmt: skip
        (tmp_path / f"{name}.json").write_text(json.dumps(rec))
        paths.append(str(tmp_path / f"{name}.json"))
    return paths


def test_an_output_folder_that_cannot_be_written_is_an_error_and_the_profile_is_kept(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "mine.toml"
    before = (DEFAULT_PROFILES_DIR / "h200-torch-bf16.toml").read_text()
    mine.write_text(before)
    blocker = tmp_path / "out"
    blocker.write_text("a file, not a folder")
    args = ["engine", "pool", *_pair(tmp_path), "--out", str(blocker / "sub"),
            "--update-profile", str(mine)]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "error:" in result.output, (result.output, result.exception)
    assert mine.read_text() == before


def test_a_rewrite_that_is_not_a_valid_profile_leaves_the_profile_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the rewritten profile would not load (here: the table rewrite yields a bad
    value), nothing is written: not the outputs, not the profile."""
    from netcheck.engines import calibrate_report

    mine = tmp_path / "mine.toml"
    before = (DEFAULT_PROFILES_DIR / "h200-torch-bf16.toml").read_text()
    mine.write_text(before)
    real = calibrate_report.replace_tables
    monkeypatch.setattr(
        calibrate_report, "replace_tables",
        lambda text, tables: real(text, tables) + "\nbatch_size = -3\n",
    )  # fmt: skip
    out = tmp_path / "out"
    args = ["engine", "pool", *_pair(tmp_path), "--out", str(out), "--update-profile", str(mine)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "error:" in result.output, (result.output, result.exception)
    assert mine.read_text() == before
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
