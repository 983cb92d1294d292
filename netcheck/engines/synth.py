"""Seeded synthetic Llama models with a byte-level tokenizer (``synth:<preset>``).

A validator needs a model every party can rebuild bit for bit without downloading
anything. :func:`synth_model` writes a Hugging Face-format Llama checkpoint whose
weights come from a fixed, documented recipe, so the same preset gives byte-identical
``*.safetensors`` files (and the same :func:`weight_hash`) on any machine.

Weight recipe (``netcheck-synth-v1``), per tensor, in the order of
:meth:`Preset.tensor_shapes`:

* norm weights (1-D) are ones;
* every other tensor with ``n`` elements and fan-in ``f``:
  ``seed = int(SHA-256("netcheck-synth-v1\\0<preset>\\0<tensor name>"), big-endian)``,
  ``raw = PCG64(seed).random_raw(n)`` (numpy ``np.random.PCG64``; 64-bit words),
  ``u = float32(raw >> 40)`` (24-bit integers, exact),
  ``w = (u * 2**-23 - 1) * float32(sqrt(3) * gain / sqrt(f))``, all in float32
  (one rounding in the final multiply; IEEE arithmetic, so no library dependence).
  That is a uniform distribution with standard deviation ``gain / sqrt(f)``.

Only the PCG64 algorithm and numpy's ``SeedSequence`` seeding (both specified and
stable) are relied upon; no distribution sampler whose algorithm might change.

Files written: ``config.json`` (LlamaConfig fields, float32), ``model.safetensors`` or
``model-0000k-of-0000n.safetensors`` shards (<= ``Preset.shard_bytes`` each) with
``model.safetensors.index.json``, ``tokenizer.json`` + ``tokenizer_config.json`` +
``special_tokens_map.json`` (byte-level: token id = byte value, ``<s>`` = 256,
``</s>`` = 257 = pad), ``generation_config.json`` and ``netcheck-synth.json`` (preset,
seed scheme, weight hash). The tokenizer files are built with the ``tokenizers``
library and may differ textually between its versions; they are not part of the
weight hash, and they always encode text as ``[256] + list(text.encode("utf-8"))``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from netcheck.engines.presets import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, Preset, get_preset
from netcheck.errors import EngineError

SEED_SCHEME = "netcheck-synth-v1"
HASH_SCHEME = "netcheck-weights-v1"
SYNTH_INFO_FILE = "netcheck-synth.json"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"


# --------------------------------------------------------------------------- weights


def tensor_seed(preset: str, tensor_name: str) -> int:
    """The 256-bit PCG64 seed of one tensor (see the module docstring)."""
    label = f"{SEED_SCHEME}\0{preset}\0{tensor_name}".encode()
    return int.from_bytes(hashlib.sha256(label).digest(), "big")


def tensor_values(
    preset: str, name: str, shape: tuple[int, ...], fan_in: int, gain: float
) -> np.ndarray:
    """One weight tensor as a float32 numpy array of ``shape`` (recipe in module doc)."""
    if fan_in == 0:
        return np.ones(shape, dtype=np.float32)
    count = math.prod(shape)
    bits = np.random.PCG64(tensor_seed(preset, name))
    raw = bits.random_raw(count)
    assert isinstance(raw, np.ndarray)
    values = (raw >> np.uint64(40)).astype(np.float32)
    del raw
    values *= np.float32(2.0**-23)
    values -= np.float32(1.0)
    values *= np.float32(math.sqrt(3.0) * gain / math.sqrt(fan_in))
    return values.reshape(shape)


def _shard_plan(preset: Preset) -> list[list[tuple[str, tuple[int, ...], int]]]:
    """Tensors grouped into shards of at most ``preset.shard_bytes`` (float32)."""
    shards: list[list[tuple[str, tuple[int, ...], int]]] = [[]]
    size = 0
    for name, shape, fan_in in preset.tensor_shapes():
        nbytes = 4 * math.prod(shape)
        if shards[-1] and size + nbytes > preset.shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape, fan_in))
        size += nbytes
    return shards


def _shard_names(count: int) -> list[str]:
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{k:05d}-of-{count:05d}.safetensors" for k in range(1, count + 1)]


def _write_weights(preset: Preset, out_dir: Path) -> None:
    """Write the weights shard by shard; at most one shard is held in memory."""
    from safetensors.numpy import save_file

    plan = _shard_plan(preset)
    names = _shard_names(len(plan))
    weight_map: dict[str, str] = {}
    total = 0
    for file_name, shard in zip(names, plan, strict=True):
        tensors = {}
        for name, shape, fan_in in shard:
            tensors[name] = tensor_values(preset.name, name, shape, fan_in, preset.gain)
            weight_map[name] = file_name
            total += 4 * math.prod(shape)
        save_file(tensors, str(out_dir / file_name), metadata={"format": "pt"})
        del tensors
    if len(plan) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        _write_json(out_dir / "model.safetensors.index.json", index)


def _weight_files(model_dir: Path) -> list[Path]:
    return sorted(model_dir.glob("*.safetensors"), key=lambda p: p.name)


def _hash_files(files: list[Path]) -> str:
    h = hashlib.sha256(HASH_SCHEME.encode() + b"\0")
    for path in files:
        h.update(path.name.encode() + b"\0")
        h.update(path.stat().st_size.to_bytes(8, "big"))
        with path.open("rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


_HASH_MEMO: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}


def weight_hash(model_dir: Path) -> str:
    """SHA-256 (hex) identifying a checkpoint's weights (scheme ``netcheck-weights-v1``).

    Hashed bytes: ``b"netcheck-weights-v1\\0"``, then for every ``*.safetensors`` file
    directly in ``model_dir``, sorted by file name (code-point order): the UTF-8 name,
    ``b"\\0"``, the file size as 8 big-endian bytes, and the file's contents. Other files
    (config, tokenizer) are not hashed. Results are memoised per (path, name, size,
    mtime) within the process.

    Raises:
        EngineError: ``model_dir`` holds no ``*.safetensors`` file.
    """
    model_dir = Path(model_dir).resolve()
    files = _weight_files(model_dir)
    if not files:
        raise EngineError(f"no *.safetensors weights in {model_dir}")
    stats = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    key = (str(model_dir), stats)
    if key not in _HASH_MEMO:
        _HASH_MEMO[key] = _hash_files(files)
    return _HASH_MEMO[key]


# ------------------------------------------------------------------------- tokenizer


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (used by ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1))
    keep += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def byte_encode(text: str) -> list[int]:
    """Token ids of ``text`` under the synthetic tokenizer: ``[<s>] + utf-8 bytes``."""
    return [BOS_ID, *text.encode("utf-8")]


def write_byte_tokenizer(out_dir: Path, model_max_length: int) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json.

    Byte ``b`` is token ``b``; ``<s>`` = 256 (prepended to every text), ``</s>`` = 257,
    pad = ``</s>``. Loads with ``transformers.AutoTokenizer`` and with vLLM.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(BOS_TOKEN, special=True), AddedToken(EOS_TOKEN, special=True)]
    )
    if tok.token_to_id(BOS_TOKEN) != BOS_ID or tok.token_to_id(EOS_TOKEN) != EOS_ID:
        raise EngineError("tokenizers assigned unexpected ids to the special tokens")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, BOS_ID)],
    )
    tok.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "padding_side": "left",
    }
    _write_json(out_dir / "tokenizer_config.json", config)
    special = {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN}
    _write_json(out_dir / "special_tokens_map.json", special)


# --------------------------------------------------------------------------- configs


def llama_config(preset: Preset) -> dict[str, object]:
    """config.json contents (LlamaConfig fields), independent of the transformers version."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": preset.hidden_size,
        "intermediate_size": preset.intermediate_size,
        "num_hidden_layers": preset.num_layers,
        "num_attention_heads": preset.num_heads,
        "num_key_value_heads": preset.num_heads,
        "head_dim": preset.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": preset.max_position_embeddings,
        "initializer_range": preset.gain / math.sqrt(preset.hidden_size),
        "rms_norm_eps": 1e-05,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "dtype": "float32",
        "torch_dtype": "float32",
    }


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def synth_model(preset: str, out_dir: Path) -> str:
    """Write the synthetic model ``preset`` into ``out_dir``; return its weight hash.

    ``out_dir`` is created if missing; existing files of the same names are
    overwritten. Peak memory is about one shard (<= 1 GB for ``1b``).

    Raises:
        EngineError: unknown preset.
    """
    spec = get_preset(preset)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_weights(spec, out)
    _write_json(out / "config.json", llama_config(spec))
    generation = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
    _write_json(out / "generation_config.json", generation)
    write_byte_tokenizer(out, spec.max_position_embeddings)
    digest = weight_hash(out)
    info = {
        "format": SEED_SCHEME,
        "preset": spec.name,
        "parameters": spec.num_parameters(),
        "seed_scheme": (
            "per tensor: PCG64(int(sha256('netcheck-synth-v1\\0' + preset + '\\0' + name))),"
            " w = (float32(raw >> 40) * 2**-23 - 1) * float32(sqrt(3) * gain / sqrt(fan_in));"
            " norms = 1"
        ),
        "gain": spec.gain,
        "weight_hash_scheme": HASH_SCHEME,
        "weight_hash": digest,
    }
    _write_json(out / SYNTH_INFO_FILE, info)
    return digest


# ------------------------------------------------------------------------------ cache


def model_cache_dir() -> Path:
    """``$NETCHECK_MODEL_CACHE`` if set, else ``~/.cache/netcheck/models``."""
    env = os.environ.get("NETCHECK_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "netcheck" / "models"


def _verify(model_dir: Path) -> None:
    info_path = model_dir / SYNTH_INFO_FILE
    try:
        recorded = json.loads(info_path.read_text(encoding="utf-8"))["weight_hash"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # not a map
        raise EngineError(f"cannot read {info_path}: {exc}") from exc
    actual = weight_hash(model_dir)
    if actual != recorded:
        raise EngineError(
            f"synthetic model in {model_dir} is corrupt: weight hash {actual} != recorded "
            f"{recorded}; delete the directory to regenerate it"
        )


def ensure_synth_model(preset: str, cache_dir: Path | None = None) -> Path:
    """Return ``<cache>/<preset>``, generating the model there first if missing.

    Generation goes to a temporary sibling directory that is renamed into place, so an
    interrupted run leaves no half-written model. An existing model is verified
    against the weight hash recorded in its ``netcheck-synth.json``.

    Args:
        preset: preset name (see :mod:`netcheck.engines.presets`).
        cache_dir: cache root; default :func:`model_cache_dir`.

    Raises:
        EngineError: unknown preset, or a cached model whose weights do not match.
    """
    spec = get_preset(preset)
    root = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    target = root / spec.name
    if not target.exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.tmp-", dir=root))
        try:
            synth_model(spec.name, tmp)
            try:
                tmp.rename(target)
            except OSError:
                if not target.exists():  # not a lost race: a real failure
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    _verify(target)
    return target
