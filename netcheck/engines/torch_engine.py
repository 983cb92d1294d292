"""The ``torch`` engine: Hugging Face transformers ``generate`` on a fixed batch shape.

Every batch is a ``[batch_size, prompt_len]`` tensor: prompts are left-padded with the
pad token (``attention_mask`` 0) to exactly ``prompt_len``, so the kernels see the same
shapes whatever the prompts are. Decoding is greedy for exactly ``max_new_tokens``
tokens (``min_new_tokens`` = ``max_new_tokens``, so EOS is suppressed and generation
never stops early). Determinism settings (process-wide, set on load):
``torch.use_deterministic_algorithms(True)``, ``CUBLAS_WORKSPACE_CONFIG=:4096:8``
(unless already set), cuDNN benchmark off, TF32 off, float32 matmul precision
"highest", attention implementation ``sdpa``.

torch and transformers are imported when an engine is built, not at module import.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from netcheck.engines.base import Engine, check_dtype, encode_prompts, model_identity
from netcheck.engines.fingerprint import make_fingerprint
from netcheck.engines.probe import torch_answer
from netcheck.engines.synth import weight_hash
from netcheck.errors import EngineError


def _set_determinism(torch: Any) -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def resolve_torch_device(torch: Any, device: str) -> tuple[Any, str]:
    """(torch.device, fingerprint device name) for "cpu", "cuda", "cuda:N" or "auto".

    The fingerprint name is ``"cpu"`` or ``torch.cuda.get_device_name(index)``.

    Raises:
        EngineError: CUDA requested but unavailable, or an unknown device string.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu"), "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise EngineError(f"device {device!r} requested but CUDA is not available")
        dev = torch.device(device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return torch.device("cuda", index), str(torch.cuda.get_device_name(index))
    raise EngineError(f"unknown device {device!r} (use cpu, cuda, cuda:N or auto)")


class TorchEngine(Engine):
    """transformers ``AutoModelForCausalLM`` running greedy fixed-shape batches.

    Args:
        model_dir: Hugging Face model directory (config, safetensors, tokenizer).
        dtype: "float32", "bfloat16" or "float16" (weights are cast on load).
        device: "cpu", "cuda", "cuda:N" or "auto".
        batch_size, prompt_len, max_new_tokens: the fixed batch shape.
        model_id: fingerprint model id; default from :func:`base.model_identity`.
        cpu_threads: torch intra-op threads on the CPU (``torch.set_num_threads``,
            process-wide); the count in effect is recorded in the fingerprint.

    Raises:
        EngineError: bad arguments, or the model/tokenizer failed to load.
    """

    name = "torch"

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
        try:
            import torch
            import transformers
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise EngineError(f"torch engine needs torch and transformers: {exc}") from exc
        self._torch = torch
        _set_determinism(torch)
        transformers.utils.logging.disable_progress_bar()  # no per-load bars in node logs
        self._device, device_name = resolve_torch_device(torch, device)
        self._dtype = getattr(torch, dtype)
        threads: int | None = None
        if self._device.type == "cpu":
            if cpu_threads is not None:
                torch.set_num_threads(cpu_threads)
            threads = torch.get_num_threads()
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
            model = AutoModelForCausalLM.from_pretrained(
                str(model_dir), dtype=getattr(torch, dtype), attn_implementation="sdpa"
            )
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise EngineError(f"cannot load model from {model_dir}: {exc}") from exc
        self._model: Any = model.to(self._device).eval()
        pad = self._tokenizer.pad_token_id
        if pad is None:
            pad = self._tokenizer.eos_token_id
        if pad is None:
            raise EngineError(f"tokenizer in {model_dir} has neither pad nor eos token")
        self._pad_id = int(pad)
        self._tokenize_lock = threading.Lock()  # HF tokenizers are not re-entrant
        self._fingerprint = make_fingerprint(
            engine=self.name,
            engine_version=f"torch-{torch.__version__}+transformers-{transformers.__version__}",
            model_id=model_id or model_identity(model_dir),
            weight_hash=digest,
            dtype=dtype,
            device=device_name,
            batch_size=batch_size,
            prompt_len=prompt_len,
            max_new_tokens=max_new_tokens,
            cpu_threads=threads,
        )

    def _batch_tensors(self, prompts: Sequence[str]) -> tuple[Any, Any]:
        """Left-padded ``input_ids`` and ``attention_mask``, both ``[B, prompt_len]``."""
        torch = self._torch
        with self._tokenize_lock:  # calibrate's streams packing calls generate from k threads
            ids = encode_prompts(self._tokenizer, prompts, self._prompt_len)
        width = self._prompt_len
        rows = [[self._pad_id] * (width - len(r)) + r for r in ids]
        mask = [[0] * (width - len(r)) + [1] * len(r) for r in ids]
        input_ids = torch.tensor(rows, dtype=torch.long, device=self._device)
        attention_mask = torch.tensor(mask, dtype=torch.long, device=self._device)
        return input_ids, attention_mask

    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        """Answer one batch; see :meth:`Engine.generate` (shape ``[B][max_new_tokens]``)."""
        if self._model is None:
            raise EngineError("engine is closed")
        items = self._check_prompts(prompts)
        input_ids, attention_mask = self._batch_tensors(items)
        n = self._max_new_tokens
        try:
            with self._torch.inference_mode():
                out = self._model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    do_sample=False,
                    num_beams=1,
                    max_new_tokens=n,
                    min_new_tokens=n,
                    pad_token_id=self._pad_id,
                )
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"torch generate failed: {exc}") from exc
        new = out[:, self._prompt_len :].tolist()
        if len(new) != self._batch_size or any(len(r) != n for r in new):
            raise EngineError(
                f"torch generate returned shape {tuple(out.shape)}, expected "
                f"({self._batch_size}, {self._prompt_len + n})"
            )
        return [[int(t) for t in row] for row in new]

    def probe(self, challenge: bytes) -> bytes:
        """The known-answer probe on this engine's device in its dtype (see
        :mod:`netcheck.engines.probe`); the same bytes as the CPU reference."""
        try:
            return torch_answer(self._torch, self._device, self._dtype, challenge)
        except (RuntimeError, ValueError) as exc:
            raise EngineError(f"probe on {self._device} failed: {exc}") from exc

    def close(self) -> None:
        """Drop the model and free cached CUDA memory. Idempotent."""
        if self._model is None:
            return
        self._model = None
        if self._device.type == "cuda":
            self._torch.cuda.empty_cache()
