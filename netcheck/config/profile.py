"""Profiles (``configs/profiles/*.toml``): the hardware + engine class a node must run
and how fast, its deadline model and measured capacity; looked up by name or path."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import Field, PrivateAttr, field_validator, model_validator

from netcheck.config.base import Model, load_model, read_toml
from netcheck.errors import ConfigError

#: The largest batch and output length a job or result frame carries
#: (``netcheck.protocol.messages.MAX_BATCH`` and ``MAX_TOKENS``, docs/protocol.md §5.2;
#: not imported: config and protocol share a layer; tests/config check they agree).
PROTOCOL_MAX_BATCH = 65536
PROTOCOL_MAX_TOKENS = 65536

DEFAULT_PROFILES_DIR = Path(__file__).resolve().parent.parent.parent / "configs" / "profiles"
"""Where :func:`load_profile` looks up a profile given by name (the repository's
``configs/profiles``)."""


class DeadlineParams(Model):
    """Deadline model (seconds):
    ``D = max(a * t_ref_s, b * p99_s) * (1 + coupling) + 2 * min(rtt_s, max_rtt_s) + slack_s``."""

    t_ref_s: float = Field(gt=0)
    """Reference time of one batch on the profile's hardware, seconds."""
    a: float = Field(default=1.5, gt=0)
    b: float = Field(default=1.2, ge=0)
    p99_s: float = Field(default=0.0, ge=0)
    """Observed 99th percentile of honest batch times, seconds (0 = not yet measured)."""
    slack_s: float = Field(default=0.5, ge=0)
    max_rtt_s: float = Field(default=0.1, ge=0)
    """Cap on the echo RTT credited to a node, seconds. The node controls its echo
    replies, so an uncapped RTT would let it buy deadline (adversarial review #1)."""
    coupling: float = Field(default=0.0, ge=0, lt=1)
    """Benign co-hosting slowdown the deadline allows for, a fraction (0 <= coupling < 1):
    two honest nodes on one host slow each other by up to this much when both are
    loaded, and a and b are calibrated on a card alone. 0 = none (profiles before it);
    the shipped GPU profiles use 0.2, the bound the detectors allow (docs/capacity.md,
    "Co-hosting allowance")."""


class CapacityRecord(Model):
    """A profile's measured capacity (``[capacity]``, written by ``netcheck engine
    calibrate``; docs/calibration/README.md).

    ``t_s[k-1]`` is t(k): the median seconds until all k batches of k identities that
    share one card and start together are done, with the best packing measured (separate
    processes, or k CUDA streams in one process when that keeps exact outputs).
    """

    t_s: list[float] = Field(min_length=1)
    """t(1), t(2), ... seconds; t(1) is the single-identity batch time."""
    beta: list[float] = Field(default_factory=list)
    """Co-load slowdown beta(k) = (t(k)/t(1) - 1)/(k - 1) for k = 2, 3, ...
    (0: a second identity is free; 1: the card is saturated by one)."""
    margin: float = Field(gt=0)
    """t(2) / deadline at the calibrated deadline (rtt credited up to ``max_rtt_s``)."""
    flops_fraction: float | None = Field(default=None, ge=0)
    """Achieved FLOP/s at one identity / the card's measured bf16 matmul peak."""
    peak_tflops: float | None = Field(default=None, gt=0)
    """The measured bf16 matmul peak of the calibration card, TFLOP/s."""
    packing: str = "processes"
    """Which packing gave t(2): ``processes``, ``streams`` (or ``issue-10`` for figures
    taken from the issue's own measurement)."""
    card: str = Field(min_length=1)
    """Device name (and UUID) of the calibration card; ``cpu`` figures are CPU figures."""
    date: str = Field(min_length=1)
    """UTC date of the calibration, ``YYYY-MM-DD``."""
    software: str = ""
    """Engine software versions, e.g. ``torch-2.11.0+transformers-5.17.0``."""

    @field_validator("t_s")
    @classmethod
    def _check_times(cls, value: list[float]) -> list[float]:
        if any(t <= 0 for t in value):
            raise ValueError("every t(k) must be > 0 seconds")
        return value

    @model_validator(mode="after")
    def _check_beta(self) -> CapacityRecord:
        if len(self.beta) > max(0, len(self.t_s) - 1):
            raise ValueError(f"beta has {len(self.beta)} values for {len(self.t_s)} t(k) values")
        return self


class Profile(Model):
    """A hardware + engine class: what a node must run and how fast (architecture.md)."""

    name: str = Field(min_length=1)
    engine: Literal["torch", "vllm", "factoring"]
    """``factoring`` goes with ``workload = "factoring"`` (netcheck.engines.factoring_engine)."""
    model: str = Field(min_length=1)
    """``synth:<preset>`` (generated locally), ``package:<name>`` (shipped in an installed
    package, :mod:`netcheck.engines.packaged`) or a local model directory."""
    dtype: Literal["float32", "bfloat16", "float16"]
    device: str = "cpu"
    """``cpu``, ``cuda``, ``cuda:<n>`` or ``auto``."""
    batch_size: int = Field(gt=1, le=PROTOCOL_MAX_BATCH)
    """B: prompts per mixed batch; at most 65,536, the most a job frame may carry
    (docs/protocol.md §5.2: beyond it no job frame could be built for a round)."""
    prompt_len: int = Field(ge=2)
    """Padded prompt length, tokens; at least 2 (at 1 an engine that adds ``<s>`` keeps
    only it, so every prompt is the same input)."""
    max_new_tokens: int = Field(gt=0, le=PROTOCOL_MAX_TOKENS)
    """Fixed output length, tokens (generation ignores EOS); at most 65,536, as the
    protocol's job and result frames."""
    canaries_min: int = Field(default=1, ge=1)
    canaries_max: int = Field(default=3, ge=1)
    deadline: DeadlineParams
    dispatch_timeout_s: float = Field(default=10.0, gt=0)
    result_timeout_s: float = Field(default=120.0, gt=0)
    cpu_threads: int | None = Field(default=None, ge=1)
    """CPU threads of the torch engine (intra-op) or the vLLM CPU backend (OpenMP, binding
    off), recorded in the fingerprint; None = the engine's default. Fix it in CPU
    profiles: the thread count can change CPU matmul results, and vLLM's default (one
    spinning thread per core in every process) starves other processes on the machine."""
    workload: Literal["llm", "factoring"] = "llm"
    """What nodes compute: LLM prompts, or semiprimes to factor (netcheck.workloads)."""
    probe_ref_s: float = Field(default=0.005, ge=0)
    """Reference time of the known-answer compute probe on the profile's hardware,
    seconds: probe RTT minus echo RTT on a direct node (thread hop, device launch,
    copy back; docs/protocol.md §5.9). The relay test flags a persistent excess of
    ``probe - echo - probe_ref_s`` (docs/detection.md, "Relay test")."""

    prompt_chars: int | None = Field(default=None, ge=34)
    """LLM prompts of exactly this many characters (cut at a word boundary, so a few
    fewer), e.g. ``prompt_len - 1`` so that every prompt fills the padded length with
    real tokens (prefill-heavy profiles; a node cannot skip padding). At least 34: the
    prompt's 60-bit reference and 16 characters of text (docs/workloads.md). None = the
    generator's 24 to 120 characters."""
    capacity: CapacityRecord | None = None
    """Measured capacity (``[capacity]``); None = unmeasured (netcheck.capacity)."""

    @field_validator("device")
    @classmethod
    def _check_device(cls, value: str) -> str:
        if not re.fullmatch(r"cpu|auto|cuda(:\d+)?", value):
            raise ValueError("device must be 'cpu', 'auto', 'cuda' or 'cuda:<n>'")
        return value

    @model_validator(mode="after")
    def _check_canaries(self) -> Profile:
        if (self.workload == "factoring") != (self.engine == "factoring"):
            raise ValueError(
                f"workload {self.workload!r} needs engine "
                f"{'factoring' if self.workload == 'factoring' else 'torch or vllm'}, "
                f"got {self.engine!r}"
            )
        if self.workload == "factoring" and self.max_new_tokens != 2:
            # the answer is the pair [p, q]: the engine refuses any other length, so
            # every node and `reference build` failed only once they loaded it
            raise ValueError(
                f"max_new_tokens: workload 'factoring' answers [p, q], 2 numbers; got "
                f"{self.max_new_tokens}"
            )
        if self.canaries_min > self.canaries_max:
            raise ValueError(
                f"canaries_min ({self.canaries_min}) must be <= canaries_max ({self.canaries_max})"
            )
        if self.canaries_max >= self.batch_size:
            raise ValueError(
                f"canaries_max ({self.canaries_max}) must be < batch_size ({self.batch_size})"
            )
        return self

    @model_validator(mode="after")
    def _check_result_timeout(self) -> Profile:
        # The coordinator stops collecting result_timeout_s after the release
        # (netcheck.coordinator.rounds): a shorter wait than the deadline turns an
        # honest answer in time into ``missing``.
        deadline_s = self.deadline_s(self.deadline.max_rtt_s)
        if self.result_timeout_s < deadline_s:
            raise ValueError(
                f"result_timeout_s ({self.result_timeout_s:g} s) is below the deadline at "
                f"the RTT cap ({deadline_s:.4g} s): a node answering in time after it "
                "would be missing"
            )
        return self

    @property
    def reference_t_s(self) -> float:
        """One card of the profile's class, one batch, seconds: the calibrated t(1) of
        ``[capacity]`` when recorded, else ``deadline.t_ref_s`` (the persistent-slowness
        test's reference, netcheck.analysis.slowness)."""
        return self.capacity.t_s[0] if self.capacity is not None else self.deadline.t_ref_s

    def deadline_s(self, rtt_s: float) -> float:
        """Result deadline after release, seconds, for a node with round-trip time ``rtt_s``.

        ``max(a * t_ref_s, b * p99_s) * (1 + coupling) + 2 * min(rtt_s, max_rtt_s) + slack_s``
        (docs/design.md; detection.md §1; ``coupling`` 0 gives the same float as before it).
        Raises ValueError if ``rtt_s`` is negative.
        """
        if rtt_s < 0:
            raise ValueError(f"rtt_s must be >= 0, got {rtt_s}")
        d = self.deadline
        compute = max(d.a * d.t_ref_s, d.b * d.p99_s) * (1 + d.coupling)
        return compute + 2 * min(rtt_s, d.max_rtt_s) + d.slack_s


def profile_search_dirs(config_dir: Path | None, profiles_dir: Path | None) -> list[Path]:
    """Folders searched, in order, for a profile given by name in a config file.

    ``profiles_dir`` when the config sets it (only that folder); else ``profiles/`` in
    the config file's folder (``config_dir``), then the installed
    :data:`DEFAULT_PROFILES_DIR`. A copied ``configs/`` folder thus uses its own
    (e.g. calibrated) profiles, and a config alone still finds the shipped ones.
    """
    if profiles_dir is not None:
        return [profiles_dir]
    dirs = [config_dir / "profiles"] if config_dir is not None else []
    if DEFAULT_PROFILES_DIR.resolve() not in {d.resolve() for d in dirs}:
        dirs.append(DEFAULT_PROFILES_DIR)
    return dirs


class FileConfig(Model):
    """A config loaded from a file: remembers the file's folder for profile lookup."""

    _config_dir: Path | None = PrivateAttr(default=None)

    @property
    def config_dir(self) -> Path | None:
        """Folder of the file this config was loaded from (None if built directly)."""
        return self._config_dir

    @property
    def profile_dirs(self) -> list[Path]:
        """Where a profile name in this config is looked up (:func:`profile_search_dirs`)."""
        return profile_search_dirs(self._config_dir, getattr(self, "profiles_dir", None))

    def load_profile(self, name_or_path: str) -> Profile:
        """Load a profile this config names: by name from :attr:`profile_dirs`, or a
        ``.toml`` path relative to the config's folder.

        Raises:
            ConfigError: not found (the message lists the folders searched) or invalid.
        """
        return load_profile(name_or_path, self.profile_dirs, base_dir=self._config_dir)


def load_profile(
    name_or_path: str | Path,
    profiles_dir: Path | Sequence[Path] | None = None,
    *,
    base_dir: Path | None = None,
) -> Profile:
    """Load a profile by name (``<dir>/<name>.toml``) or by path to a ``.toml`` file.

    Args:
        name_or_path: a name (no ``/`` and no ``.toml``) or a path.
        profiles_dir: the folder, or folders searched in order, for a name; defaults to
            :data:`DEFAULT_PROFILES_DIR`.
        base_dir: a relative path is taken relative to this folder (a config file's).

    The ``name`` field defaults to the file's stem; a profile loaded by name must carry
    that name.

    Raises:
        ConfigError: naming file and field; for a name found nowhere, every folder
            searched and the profiles available there.
    """
    text = str(name_or_path)
    by_name = not (text.endswith(".toml") or "/" in text or "\\" in text)
    if profiles_dir is None:
        dirs = [DEFAULT_PROFILES_DIR]
    elif isinstance(profiles_dir, Path):
        dirs = [profiles_dir]
    else:
        dirs = list(profiles_dir)
    if by_name:
        found = [d / f"{text}.toml" for d in dirs if (d / f"{text}.toml").is_file()]
        if not found:
            known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.toml")})
            available = ", ".join(known) if known else "none"
            searched = ", ".join(str(d) for d in dirs)
            raise ConfigError(
                f"profile {text!r}: no file {text}.toml in the folders searched "
                f"({searched}); available profiles: {available}"
            )
        path = found[0]
    else:
        path = Path(text).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
    data = read_toml(path)
    data.setdefault("name", path.stem)
    if by_name and data["name"] != text:
        raise ConfigError(f"{path}: name: {data['name']!r} does not match the profile name")
    return load_model(Profile, path, data)


_F = TypeVar("_F", bound=FileConfig)


def load_file_config(model: type[_F], path: str | Path) -> _F:
    """A coordinator, gateway or node file as ``model``; relative paths in it resolve
    against its folder, which the config remembers for profile lookup.

    Raises:
        ConfigError: missing file, bad TOML or a bad field (file and field named).
    """
    path = Path(path)
    cfg = load_model(model, path, read_toml(path))
    cfg._config_dir = path.resolve().parent
    return cfg
