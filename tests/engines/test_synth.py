"""Tests for netcheck.engines.synth and netcheck.engines.presets."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from netcheck.engines import presets
from netcheck.engines.presets import PRESETS, Preset, get_preset
from netcheck.engines.synth import (
    SYNTH_INFO_FILE,
    byte_encode,
    ensure_synth_model,
    synth_model,
    tensor_values,
    weight_hash,
)
from netcheck.errors import EngineError

TINY_WEIGHT_HASH = "0508978c05609001e0b217e9f141c63644e0f8f06c106574e06120349070d1e0"
"""Pinned: any change to the weight recipe or file layout must be deliberate."""

_SYNTH_SNIPPET = (
    "import sys; from pathlib import Path; from netcheck.engines.synth import synth_model; "
    "print(synth_model('tiny', Path(sys.argv[1])))"
)


@pytest.mark.slow
def test_same_hash_in_two_subprocesses(tmp_path: Path) -> None:
    """Two separate interpreters write byte-identical tiny models (pinned hash)."""
    hashes = []
    for name in ("a", "b"):
        out = subprocess.run(
            [sys.executable, "-c", _SYNTH_SNIPPET, str(tmp_path / name)],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        hashes.append(out.stdout.strip())
    assert hashes[0] == hashes[1] == TINY_WEIGHT_HASH
    for file in ("model.safetensors", "config.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()


def test_synth_files_and_info(tmp_path: Path) -> None:
    """synth_model writes the HF files and a netcheck-synth.json with the hash."""
    digest = synth_model("tiny", tmp_path)
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        SYNTH_INFO_FILE,
    ):
        assert (tmp_path / name).is_file(), name
    info = json.loads((tmp_path / SYNTH_INFO_FILE).read_text())
    assert info["preset"] == "tiny" and info["weight_hash"] == digest == weight_hash(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["vocab_size"], config["head_dim"], config["tie_word_embeddings"]) == (
        258,
        64,
        False,
    )


def test_tensor_values_recipe() -> None:
    """Weights are uniform with std gain/sqrt(fan_in); norms are ones; seeds differ."""
    w = tensor_values("tiny", "x", (512, 256), 256, 4.8)
    assert w.dtype == np.float32 and w.shape == (512, 256)
    assert abs(float(w.std()) - 0.3) < 0.005
    assert float(np.abs(w).max()) <= 0.3 * math.sqrt(3) + 1e-6
    assert not np.array_equal(w, tensor_values("tiny", "y", (512, 256), 256, 4.8))
    assert not np.array_equal(w, tensor_values("tiny-alt", "x", (512, 256), 256, 4.8))
    assert np.array_equal(w, tensor_values("tiny", "x", (512, 256), 256, 4.8))
    assert np.array_equal(tensor_values("tiny", "n", (8,), 0, 4.8), np.ones(8, np.float32))


def test_sharded_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small shard limits give several shards, an index, and the same tensors."""
    from safetensors.numpy import load_file

    whole = tmp_path / "whole"
    synth_model("tiny", whole)
    sharded_preset = Preset("tiny", 256, 2, 4, 512, 512, shard_bytes=2_000_000)
    monkeypatch.setitem(presets.PRESETS, "tiny", sharded_preset)
    sharded = tmp_path / "sharded"
    synth_model("tiny", sharded)
    files = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(files) >= 3 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    reference = load_file(str(whole / "model.safetensors"))
    assert set(index["weight_map"]) == set(reference)
    for name, array in reference.items():
        shard = load_file(str(sharded / index["weight_map"][name]))
        assert np.array_equal(shard[name], array), name
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in reference.values())
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(sharded))
    for name, tensor in model.state_dict().items():
        assert np.array_equal(tensor.numpy(), reference[name]), name


def test_tokenizer_is_byte_level(tmp_path: Path) -> None:
    """AutoTokenizer encodes text as <s> + UTF-8 bytes and decodes it back."""
    from transformers import AutoTokenizer

    synth_model("tiny", tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    for text in ("Hello, world!", "  spaces  ", "héllo wörld — ✓", "", "\n\ttabs"):
        ids = tok(text)["input_ids"]
        assert ids == byte_encode(text) == [256, *text.encode()]
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (256, 257, 257)
    assert len(tok) == 258


def test_ensure_synth_model_caches(tmp_path: Path) -> None:
    """ensure_synth_model generates once, reuses the result and leaves no temp dirs."""
    first = ensure_synth_model("tiny", tmp_path)
    assert first == tmp_path / "tiny"
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert ensure_synth_model("tiny", tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]


def test_ensure_synth_model_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without cache_dir the model goes to $NETCHECK_MODEL_CACHE/<preset>."""
    monkeypatch.setenv("NETCHECK_MODEL_CACHE", str(tmp_path))
    assert ensure_synth_model("tiny") == tmp_path / "tiny"


def test_ensure_synth_model_detects_corruption(tmp_path: Path) -> None:
    """A cached model whose weights changed is refused with EngineError."""
    model = ensure_synth_model("tiny", tmp_path)
    data = bytearray((model / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (model / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(EngineError, match="corrupt"):
        ensure_synth_model("tiny", tmp_path)


def test_unknown_preset(tmp_path: Path) -> None:
    """Unknown presets raise EngineError naming the known ones."""
    with pytest.raises(EngineError, match="tiny"):
        synth_model("huge", tmp_path)
    with pytest.raises(EngineError):
        ensure_synth_model("huge", tmp_path)


def test_weight_hash_needs_weights(tmp_path: Path) -> None:
    """weight_hash of a directory without safetensors raises EngineError."""
    with pytest.raises(EngineError):
        weight_hash(tmp_path)


def test_preset_sizes() -> None:
    """Presets have the documented sizes and head_dim >= 64."""
    assert 1.3e6 < get_preset("tiny").num_parameters() < 1.5e6
    assert 24e6 < get_preset("small").num_parameters() < 27e6
    assert 1.0e9 < get_preset("1b").num_parameters() < 1.1e9
    for preset in PRESETS.values():
        assert preset.head_dim >= 64
        assert preset.hidden_size % preset.num_heads == 0
