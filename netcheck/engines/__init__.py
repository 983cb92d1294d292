"""Inference engines behind one small interface, plus the seeded synthetic models.

``load_engine(profile)`` builds the engine a profile names (``"torch"``, ``"vllm"`` or
``"factoring"``, the semiprime workload's exact engine);
torch, transformers and vLLM are imported only inside the engine that needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from netcheck.engines.base import Engine, model_identity
from netcheck.engines.fingerprint import Fingerprint, fingerprint_id
from netcheck.engines.packaged import PACKAGE_PREFIX, ensure_packaged_model
from netcheck.engines.synth import ensure_synth_model, model_cache_dir, synth_model, weight_hash
from netcheck.errors import EngineError

if TYPE_CHECKING:
    from netcheck.config import Profile

__all__ = [
    "Engine",
    "Fingerprint",
    "ensure_synth_model",
    "fingerprint_id",
    "load_engine",
    "model_cache_dir",
    "resolve_model_dir",
    "synth_model",
    "weight_hash",
]

SYNTH_PREFIX = "synth:"


def resolve_model_dir(model: str) -> Path:
    """Directory of a profile's ``model``: ``synth:<preset>`` (generated if missing),
    ``package:<name>`` (a package-shipped model, converted once into the model cache:
    :mod:`netcheck.engines.packaged`) or a path.

    Raises:
        EngineError: unknown preset or packaged model, a package missing or not as
            pinned, or a path that is not a directory.
    """
    if model.startswith(SYNTH_PREFIX):
        return ensure_synth_model(model[len(SYNTH_PREFIX) :])
    if model.startswith(PACKAGE_PREFIX):
        return ensure_packaged_model(model[len(PACKAGE_PREFIX) :])
    path = Path(model).expanduser()
    if not path.is_dir():
        raise EngineError(f"model directory {path} does not exist")
    return path


def load_engine(
    profile: Profile, *, dtype: str | None = None, model_dir: Path | None = None
) -> Engine:
    """Build and load the engine described by ``profile``.

    Args:
        profile: uses ``engine``, ``model``, ``dtype``, ``device``, ``batch_size``,
            ``prompt_len`` and ``max_new_tokens`` (``factoring`` ignores model, dtype
            and device).
        dtype: overrides ``profile.dtype`` (the demo's "wrong dtype" adversary).
        model_dir: use this model directory instead of resolving ``profile.model``.

    Returns:
        A loaded engine; its fingerprint records the dtype and model actually used.

    Raises:
        EngineError: unknown engine, missing model, or the engine failed to load.
    """
    engine_cls: Any
    if profile.engine == "factoring":
        from netcheck.engines.factoring_engine import FactoringEngine

        return FactoringEngine(
            batch_size=profile.batch_size,
            prompt_len=profile.prompt_len,
            max_new_tokens=profile.max_new_tokens,
        )
    if profile.engine == "torch":
        from netcheck.engines.torch_engine import TorchEngine

        engine_cls = TorchEngine
    elif profile.engine == "vllm":
        from netcheck.engines.vllm_engine import VllmEngine

        engine_cls = VllmEngine
    else:
        raise EngineError(f"unknown engine {profile.engine!r} (use torch, vllm or factoring)")
    model_id: str | None
    if model_dir is not None:
        directory = Path(model_dir)
        model_id = model_identity(directory)
    else:
        directory = resolve_model_dir(profile.model)
        named = profile.model.startswith((SYNTH_PREFIX, PACKAGE_PREFIX))
        model_id = profile.model if named else None
    engine: Engine = engine_cls(
        directory,
        cpu_threads=profile.cpu_threads,
        dtype=dtype or profile.dtype,
        device=profile.device,
        batch_size=profile.batch_size,
        prompt_len=profile.prompt_len,
        max_new_tokens=profile.max_new_tokens,
        model_id=model_id,
    )
    return engine
