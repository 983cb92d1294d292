"""The ``Engine`` interface and the helpers every engine shares.

An engine runs one fixed batch shape: exactly ``batch_size`` prompts, each truncated
to at most ``prompt_len`` tokens, each answered with exactly ``max_new_tokens`` greedy
tokens. Fixing the shape is what makes a prompt's output independent of the other
prompts in its batch (architecture.md, "Measured facts").
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from netcheck.engines.fingerprint import Fingerprint, fingerprint_id
from netcheck.engines.probe import answer as probe_answer
from netcheck.errors import EngineError

DTYPES = ("float32", "bfloat16", "float16")


class Engine(abc.ABC):
    """A loaded model that answers fixed-shape batches greedily and deterministically.

    Subclasses set ``name`` and build ``self._fingerprint`` in ``__init__``.
    """

    name: str = "abstract"

    def __init__(self, *, batch_size: int, prompt_len: int, max_new_tokens: int) -> None:
        if batch_size < 1 or prompt_len < 2 or max_new_tokens < 1:
            raise EngineError(
                f"invalid batch shape: batch_size={batch_size} (>= 1), "
                f"prompt_len={prompt_len} (>= 2), max_new_tokens={max_new_tokens} (>= 1)"
            )
        self._batch_size = batch_size
        self._prompt_len = prompt_len
        self._max_new_tokens = max_new_tokens
        self._fingerprint: Fingerprint = {}

    @property
    def fingerprint(self) -> Fingerprint:
        """A copy of the engine fingerprint (keys in ``fingerprint.FINGERPRINT_KEYS``)."""
        return dict(self._fingerprint)

    @property
    def fingerprint_id(self) -> str:
        """Hex SHA-256 of the canonical fingerprint JSON."""
        return fingerprint_id(self._fingerprint)

    @property
    def batch_size(self) -> int:
        """B: the exact number of prompts per :meth:`generate` call."""
        return self._batch_size

    @property
    def prompt_len(self) -> int:
        """Most prompt tokens per prompt (``<s>`` included); longer prompts are cut."""
        return self._prompt_len

    @property
    def max_new_tokens(self) -> int:
        """Exact number of generated tokens per prompt."""
        return self._max_new_tokens

    @abc.abstractmethod
    def generate(self, prompts: Sequence[str]) -> list[list[int]]:
        """Answer one batch greedily.

        Args:
            prompts: exactly ``batch_size`` strings. A prompt longer than
                ``prompt_len`` tokens keeps its leading ``<s>`` and its *last*
                ``prompt_len - 1`` tokens (truncation from the left).

        Returns:
            ``batch_size`` lists (input order) of exactly ``max_new_tokens`` token ids.

        Raises:
            EngineError: wrong number or type of prompts, or the engine failed.
        """

    def probe(self, challenge: bytes) -> bytes:
        """Answer a known-answer compute probe (:mod:`netcheck.engines.probe`).

        The default computes it on the CPU with numpy, which is right for engines that
        run on the CPU; engines with a device of their own (torch, vLLM) override this to
        run it there, so its round trip covers the path to that device.

        Args:
            challenge: the coordinator's 32 random bytes.

        Returns:
            The 32-byte answer.

        Raises:
            EngineError: the challenge is malformed or the device failed.
        """
        try:
            return probe_answer(challenge)
        except ValueError as exc:
            raise EngineError(f"probe failed: {exc}") from exc

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model (memory, worker threads). Idempotent."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- shared helpers

    def _check_prompts(self, prompts: Sequence[str]) -> list[str]:
        if isinstance(prompts, str | bytes):
            raise EngineError("prompts must be a sequence of strings, not one string")
        items = list(prompts)
        if len(items) != self._batch_size:
            raise EngineError(
                f"batch must hold exactly {self._batch_size} prompts, got {len(items)}"
            )
        for i, p in enumerate(items):
            if not isinstance(p, str):
                raise EngineError(f"prompt {i} is {type(p).__name__}, not str")
        return items


def encode_prompts(tokenizer: Any, prompts: Sequence[str], prompt_len: int) -> list[list[int]]:
    """Tokenize with special tokens (``<s>`` first) and cut each to ``prompt_len`` ids.

    A too-long prompt keeps its leading BOS (when the tokenizer added one) and its
    last ``prompt_len - 1`` tokens; without BOS it keeps its last ``prompt_len``.
    """
    encoded = tokenizer(list(prompts), add_special_tokens=True)["input_ids"]
    bos = getattr(tokenizer, "bos_token_id", None)
    out: list[list[int]] = []
    for ids in encoded:
        ids = [int(t) for t in ids]
        if len(ids) > prompt_len:
            if bos is not None and ids[0] == bos:
                ids = [ids[0], *ids[len(ids) - (prompt_len - 1) :]]
            else:
                ids = ids[len(ids) - prompt_len :]
        out.append(ids)
    return out


def model_identity(model_dir: Path) -> str:
    """``"synth:<preset>"`` for a synthetic model directory, ``"package:<name>"`` for a
    converted package-shipped model, else the directory name."""
    for marker, key in (("netcheck-synth.json", "preset"), ("netcheck-package.json", "model")):
        info = Path(model_dir) / marker
        if info.is_file():
            try:
                value = str(json.loads(info.read_text(encoding="utf-8"))[key])
            except (OSError, ValueError, KeyError, TypeError, RecursionError):  # not a map
                continue
            return "synth:" + value if key == "preset" else value
    return Path(model_dir).resolve().name


def check_dtype(dtype: str) -> str:
    """Return ``dtype`` if it is one of :data:`DTYPES`, else raise EngineError."""
    if dtype not in DTYPES:
        raise EngineError(f"unsupported dtype {dtype!r} (use one of {', '.join(DTYPES)})")
    return dtype
