"""Architectures of the seeded synthetic models (``synth:<preset>``).

Every preset is a Llama-architecture decoder with the 258-token byte-level tokenizer
of :mod:`netcheck.engines.synth`. The preset *name* also seeds the weights, so two
presets with the same shape (``tiny`` and ``tiny-alt``) are different models.

Parameter counts (float32 on disk):

=========  ======  ======  =====  ============  ===========  ==========
preset     hidden  layers  heads  intermediate  parameters   disk
=========  ======  ======  =====  ============  ===========  ==========
tiny       256     2       4      512           1.4 M        5.5 MB
tiny-alt   256     2       4      512           1.4 M        5.5 MB
small      512     8       8      1376          25.6 M       102 MB
1b         2048    16      16     8192          1.07 G       4.3 GB
3b         3072    26      24     8192          2.95 G       11.8 GB
8b         4096    32      32     14336         7.79 G       31.1 GB
=========  ======  ======  =====  ============  ===========  ==========

VRAM classes: loaded in bfloat16 the weights alone take about 2 GiB (``1b``), 5.5 GiB
(``3b``) and 14.5 GiB (``8b``), plus the KV cache of a batch of B; a node proves it holds
a class's memory by running the preset that needs it. Presets are generated shard by
shard (peak memory about one shard). Measured with ``/usr/bin/time -v netcheck model
synth --preset NAME DIR`` on a shared 2-core machine: ``1b`` 34 s, 1.2 GB peak RSS
(20 s on the H200 host); ``3b`` 79 s, 1.33 GB peak RSS, weight hash ``00379a39...07fd``.
``8b`` (31 GB on disk, too big for the 24 GiB CPU machines here) was generated on the
H200 host by ``benchmarks/h200_8b.sh``: 134 s, 1.87 GB peak RSS, weight hash
``fff9859c...f457b``; it then passed the engine selftest in bfloat16 on the H200
(docs/calibration/h200-torch-8b-bf16.md).

Head dimension is 64 or more everywhere: vLLM's CPU attention kernel rejects 16.
"""

from __future__ import annotations

from dataclasses import dataclass

from netcheck.errors import EngineError

VOCAB_SIZE = 258
"""256 byte tokens (ids 0..255 = byte values) + ``<s>`` (256) + ``</s>`` (257)."""
BOS_ID = 256
EOS_ID = 257
PAD_ID = EOS_ID


@dataclass(frozen=True)
class Preset:
    """Shape of one synthetic model.

    Attributes:
        name: preset name; also the weight seed label (see ``synth.tensor_seed``).
        hidden_size: model width.
        num_layers: decoder layers.
        num_heads: attention heads (= key/value heads; no grouped-query attention).
        intermediate_size: MLP width.
        max_position_embeddings: longest sequence (prompt + generated tokens).
        gain: weight scale; a matrix with fan-in ``f`` gets std ``gain / sqrt(f)``.
            The default 4.8 gives std 0.3 at fan-in 256, which keeps greedy outputs
            prompt-dependent (std 0.02 collapses every prompt to one repeated token).
        shard_bytes: largest safetensors shard in bytes (weights are float32).
    """

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    gain: float = 4.8
    shard_bytes: int = 1_000_000_000

    @property
    def head_dim(self) -> int:
        """Per-head width (hidden_size / num_heads)."""
        return self.hidden_size // self.num_heads

    def tensor_shapes(self) -> list[tuple[str, tuple[int, ...], int]]:
        """(name, shape, fan_in) for every weight, in the fixed generation order.

        Norm weights report fan_in 0: they are ones, not random.
        """
        h, i, v = self.hidden_size, self.intermediate_size, VOCAB_SIZE
        out: list[tuple[str, tuple[int, ...], int]] = [("model.embed_tokens.weight", (v, h), h)]
        for n in range(self.num_layers):
            p = f"model.layers.{n}."
            out += [
                (p + "input_layernorm.weight", (h,), 0),
                (p + "self_attn.q_proj.weight", (h, h), h),
                (p + "self_attn.k_proj.weight", (h, h), h),
                (p + "self_attn.v_proj.weight", (h, h), h),
                (p + "self_attn.o_proj.weight", (h, h), h),
                (p + "post_attention_layernorm.weight", (h,), 0),
                (p + "mlp.gate_proj.weight", (i, h), h),
                (p + "mlp.up_proj.weight", (i, h), h),
                (p + "mlp.down_proj.weight", (h, i), i),
            ]
        out += [("model.norm.weight", (h,), 0), ("lm_head.weight", (v, h), h)]
        return out

    def num_parameters(self) -> int:
        """Total number of weights."""
        total = 0
        for _, shape, _ in self.tensor_shapes():
            count = 1
            for d in shape:
                count *= d
            total += count
        return total


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny", 256, 2, 4, 512, 512),
        Preset("tiny-alt", 256, 2, 4, 512, 512),
        Preset("small", 512, 8, 8, 1376, 1024),
        Preset("1b", 2048, 16, 16, 8192, 2048, gain=4.8),
        Preset("3b", 3072, 26, 24, 8192, 2048, gain=4.8),
        Preset("8b", 4096, 32, 32, 14336, 2048, gain=4.8),
    )
}


def get_preset(name: str) -> Preset:
    """Look up a preset by name.

    Raises:
        EngineError: unknown preset (the message lists the known ones).
    """
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise EngineError(f"unknown synthetic model preset {name!r} (known: {known})") from None
