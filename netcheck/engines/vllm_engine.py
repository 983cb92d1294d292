"""The ``vllm`` engine: one in-process ``vllm.LLM`` answering fixed-size batches.

Prompts are tokenized here (same tokenizer, same left truncation as the torch engine)
and passed as ``TokensPrompt``; vLLM does not pad, so each request holds its own
number of prompt tokens. Decoding: ``temperature=0`` (greedy), ``max_tokens`` =
``min_tokens`` = ``max_new_tokens``, ``ignore_eos=True``, ``seed=0``. The engine runs
with ``enforce_eager=True``, prefix caching off, ``max_num_seqs`` = B and a token budget
large enough to prefill the whole batch in one scheduler step, so every batch is
scheduled the same way.

``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is set before vLLM is imported (the engine core
then runs in this process).

CPU threads (``cpu_threads``, the profile's field of that name): on the CPU backend vLLM
otherwise binds one OpenMP thread per core in *every* engine process. Several engine
processes on one machine (the demo, tests, a node beside a reference builder) then
oversubscribe the cores, and OpenMP threads that spin-wait at barriers starve each
other: a synth:tiny batch took 7 CPU-seconds with the default and 0.65 with one thread
(docs/calibration). With ``cpu_threads`` set, vLLM's thread binding is switched off
(``VLLM_CPU_OMP_THREADS_BIND=nobind``), ``OMP_NUM_THREADS`` is set for OpenMP runtimes
not yet started and ``torch.set_num_threads`` is called before vLLM loads; the count
in effect afterwards is recorded in the fingerprint as ``cpu_threads`` (it can change
the reduction order, as for the torch engine). The KV cache size is given explicitly
(``kv_cache_memory_bytes``, computed from the model config) so that on the CPU
backend nothing depends on how much host memory is free, and the memory-probing
warm-up is skipped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from netcheck.engines.base import Engine, check_dtype, encode_prompts, model_identity
from netcheck.engines.fingerprint import make_fingerprint
from netcheck.engines.probe import torch_answer
from netcheck.engines.synth import weight_hash
from netcheck.errors import EngineError

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_MIN_KV_CACHE_BYTES = 64 << 20
_KV_BLOCK_TOKENS = 256  # largest block size vLLM picks on CPU; over-allocation is harmless


def kv_cache_bytes(model_dir: Path, dtype: str, batch_size: int, max_model_len: int) -> int:
    """KV-cache bytes for ``batch_size`` sequences of ``max_model_len`` tokens, x2 margin.

    Per token: 2 (K and V) x layers x key/value heads x head_dim x dtype bytes, from
    ``config.json``; at least 64 MiB.

    Raises:
        EngineError: config.json missing or without the needed fields.
    """
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
        layers = int(cfg["num_hidden_layers"])
    except (OSError, ValueError, KeyError) as exc:
        raise EngineError(f"cannot read model config in {model_dir}: {exc}") from exc
    per_token = 2 * layers * kv_heads * head_dim * _DTYPE_BYTES[dtype]
    blocks = math.ceil(max_model_len / _KV_BLOCK_TOKENS) + 1
    tokens = batch_size * blocks * _KV_BLOCK_TOKENS
    return max(_MIN_KV_CACHE_BYTES, 2 * per_token * tokens)


def _device_name(device: str) -> str:
    """Fingerprint device name of the platform vLLM runs on."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        if device not in ("cpu", "auto"):
            raise EngineError(f"device {device!r} requested but this vLLM build is CPU-only")
        return "cpu"
    if device == "cpu":
        raise EngineError("device 'cpu' requested but this vLLM build targets an accelerator")
    import torch

    index = 0
    if device.startswith("cuda:"):
        index = int(device.split(":", 1)[1])
    return str(torch.cuda.get_device_name(index))


def _torch_device(device: str) -> str:
    """The torch device string vLLM computes on, for the probe (``cuda:N``)."""
    return device if device.startswith("cuda:") else "cuda:0"


def _limit_cpu_threads(cpu_threads: int | None) -> int | None:
    """Before vLLM loads on the CPU: one OpenMP team of ``cpu_threads``, no binding (see
    the module doc). Returns ``cpu_threads``."""
    if cpu_threads is None:
        return None
    import torch

    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    os.environ["OMP_NUM_THREADS"] = str(cpu_threads)
    # torch._C's own function: an earlier vLLM engine in this process replaced
    # torch.set_num_threads with a no-op after binding its threads.
    torch._C.set_num_threads(cpu_threads)
    return cpu_threads


def _same_team_here(cpu_threads: int) -> None:
    """Give the calling thread an OpenMP team of ``cpu_threads``.

    OpenMP's thread count is a per-thread setting: a thread started after the engine
    loaded (a reference builder thread, ``asyncio.to_thread``) starts from the runtime's
    default (one per core), and vLLM's CPU attention then refuses the batch ("Check
    failed: input->metadata->thread_num == thread_num (2 vs. 1)")."""
    import torch

    if torch.get_num_threads() != cpu_threads:
        torch._C.set_num_threads(cpu_threads)


class VllmEngine(Engine):
    """An in-process ``vllm.LLM`` running greedy fixed-size batches.

    Args:
        model_dir: Hugging Face model directory (config, safetensors, tokenizer).
        dtype: "float32", "bfloat16" or "float16".
        device: "cpu", "cuda", "cuda:N" or "auto" (must match the installed vLLM build).
        batch_size, prompt_len, max_new_tokens: the fixed batch shape.
        model_id: fingerprint model id; default from :func:`base.model_identity`.
        cpu_threads: OpenMP/torch threads on the CPU backend (see the module doc);
            None keeps vLLM's own binding. Ignored on an accelerator.

    Raises:
        EngineError: vLLM missing, bad arguments, the model failed to load, or the
            thread count in effect after loading differs from ``cpu_threads``.
    """

    name = "vllm"

    def __init__(
        self,
        model_dir: Path,
        *,
        dtype: str,
        device: str = "cpu",
        batch_size: int,
        prompt_len: int,
        max_new_tokens: int,
        model_id: str | None = None,
        cpu_threads: int | None = None,
    ) -> None:
        super().__init__(
            batch_size=batch_size, prompt_len=prompt_len, max_new_tokens=max_new_tokens
        )
        check_dtype(dtype)
        model_dir = Path(model_dir)
        digest = weight_hash(model_dir)  # fails fast on a directory without weights
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            import vllm
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise EngineError(f"vllm engine needs vllm: {exc}") from exc
        device_name = _device_name(device)
        self._probe_device = "cpu" if device_name == "cpu" else _torch_device(device)
        threads = _limit_cpu_threads(cpu_threads) if device_name == "cpu" else None
        self._dtype = dtype
        max_model_len = prompt_len + max_new_tokens
        try:
            self._llm: Any = LLM(
                model=str(model_dir),
                tokenizer=str(model_dir),
                dtype=cast(Any, dtype),  # checked above; vLLM annotates a Literal
                enforce_eager=True,
                seed=0,
                max_num_seqs=batch_size,
                max_model_len=max_model_len,
                max_num_batched_tokens=batch_size * max_model_len,
                enable_prefix_caching=False,
                gpu_memory_utilization=0.1,
                kv_cache_memory_bytes=kv_cache_bytes(model_dir, dtype, batch_size, max_model_len),
            )
        except EngineError:
            raise
        except Exception as exc:  # vLLM raises many types while loading
            raise EngineError(f"vLLM could not load {model_dir}: {exc}") from exc
        if threads is not None:
            import torch

            if torch.get_num_threads() != threads:
                raise EngineError(
                    f"vLLM runs {torch.get_num_threads()} CPU threads, the profile asks for "
                    f"{threads}; start the process with OMP_NUM_THREADS={threads}"
                )
        self._cpu_threads = threads
        self._tokenizer = self._llm.get_tokenizer()
        self._params = SamplingParams(
            temperature=0.0,
            max_tokens=max_new_tokens,
            min_tokens=max_new_tokens,
            ignore_eos=True,
            seed=0,
            detokenize=False,
        )
        self._fingerprint = make_fingerprint(
            engine=self.name,
            engine_version=f"vllm-{vllm.__version__}",
            model_id=model_id or model_identity(model_dir),
            weight_hash=digest,
            dtype=dtype,
            device=device_name,
            batch_size=batch_size,
            prompt_len=prompt_len,
            max_new_tokens=max_new_tokens,
            cpu_threads=threads,
        )

    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        """Answer one batch; see :meth:`Engine.generate` (shape ``[B][max_new_tokens]``)."""
        if self._llm is None:
            raise EngineError("engine is closed")
        from vllm.inputs import TokensPrompt

        items = self._check_prompts(prompts)
        ids = encode_prompts(self._tokenizer, items, self._prompt_len)
        requests = [TokensPrompt(prompt_token_ids=r) for r in ids]
        if self._cpu_threads is not None:
            _same_team_here(self._cpu_threads)
        try:
            outputs = self._llm.generate(requests, self._params, use_tqdm=False)
        except Exception as exc:  # engine-core failures surface as many types
            raise EngineError(f"vLLM generate failed: {exc}") from exc
        n = self._max_new_tokens
        result = [[int(t) for t in o.outputs[0].token_ids] for o in outputs]
        if len(result) != self._batch_size or any(len(r) != n for r in result):
            raise EngineError(
                f"vLLM returned {len(result)} outputs of lengths "
                f"{sorted({len(r) for r in result})}, expected {self._batch_size} x {n}"
            )
        return result

    def probe(self, challenge: bytes) -> bytes:
        """The known-answer probe with torch on vLLM's device in the engine dtype (see
        :mod:`netcheck.engines.probe`); the same bytes as the CPU reference."""
        import torch

        try:
            return torch_answer(
                torch, torch.device(self._probe_device), getattr(torch, self._dtype), challenge
            )
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"probe on {self._probe_device} failed: {exc}") from exc

    def close(self) -> None:
        """Shut the vLLM engine core down. Idempotent."""
        llm, self._llm = self._llm, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            with contextlib.suppress(Exception):  # best effort on teardown
                shutdown()
        del llm
