"""Configuration: profiles, coordinator and node settings, loaded from TOML.

Every model is a frozen pydantic v2 model that rejects unknown fields and non-finite
floats (TOML's ``inf`` and ``nan``). The loaders
(:func:`load_profile`, :func:`load_coordinator_config`, :func:`load_node_config`) turn
every failure (missing file, bad TOML, bad field) into :class:`~netcheck.errors.ConfigError`
whose message names the file and the field, e.g.
``configs/profiles/x.toml: batch_size: Input should be greater than 1``.

Relative paths in a coordinator or node file (``identity_key``, a sqlite ``database``)
are resolved against the directory of that file, so a config works from any working
directory. Models built directly (without a loader) keep paths as given.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from yarl import URL

from netcheck.errors import ConfigError, KeyFileError
from netcheck.keys import load_public_bytes, parse_public_key

DEFAULT_PROFILES_DIR = Path(__file__).resolve().parent.parent / "configs" / "profiles"
"""Where :func:`load_profile` looks up a profile given by name (the repository's
``configs/profiles``)."""

KEY_TEXT_PREFIX = "ed25519:"
PLACEHOLDER_ADMIN_TOKEN = "change-me-to-a-long-random-token"
"""The ``admin_token`` shipped in ``configs/coordinator.toml``; refused, since the token
guards the admin API."""
MAX_MESSAGE_BYTES_LIMIT = 64 * 1024 * 1024
"""Upper bound of ``max_message_bytes`` (64 MiB): larger caps only help a peer exhaust
memory."""
_SQLITE_URL = re.compile(r"^(sqlite(?:\+\w+)?:///)([^?]*)(\?.*)?$")


def _check_key_text(text: str) -> str:
    """Validate the text form of a public key: ``ed25519:<base64url, no padding, 32 bytes>``."""
    if not text.startswith(KEY_TEXT_PREFIX):
        raise ValueError(f"public key must start with {KEY_TEXT_PREFIX!r}")
    body = text[len(KEY_TEXT_PREFIX) :]
    if "=" in body or not re.fullmatch(r"[A-Za-z0-9_-]+", body):
        raise ValueError("public key must be base64url without padding")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    if len(raw) != 32:
        raise ValueError(f"public key must encode 32 bytes, got {len(raw)}")
    try:
        load_public_bytes(raw)  # refuses small-order and non-canonical points
    except KeyFileError as exc:
        raise ValueError(str(exc)) from None  # names the key
    return text


def _base_dir(info: ValidationInfo) -> Path | None:
    context = info.context
    if isinstance(context, dict) and isinstance(context.get("base_dir"), Path):
        return context["base_dir"]
    return None


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    value = value.expanduser()
    base = _base_dir(info)
    if base is not None and not value.is_absolute():
        value = base / value
    return value


class _Model(BaseModel):
    # allow_inf_nan=False: TOML has inf and nan, and no time, rate or size may be either.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class DeadlineParams(_Model):
    """Deadline model: ``D = max(a * t_ref_s, b * p99_s) + 2 * min(rtt_s, max_rtt_s) + slack_s`` (seconds)."""

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


class CapacityRecord(_Model):
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


class Profile(_Model):
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
    batch_size: int = Field(gt=1)
    """B: prompts per mixed batch."""
    prompt_len: int = Field(gt=0)
    """Padded prompt length, tokens."""
    max_new_tokens: int = Field(gt=0)
    """Fixed output length, tokens (generation ignores EOS)."""
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
        if self.canaries_min > self.canaries_max:
            raise ValueError(
                f"canaries_min ({self.canaries_min}) must be <= canaries_max ({self.canaries_max})"
            )
        if self.canaries_max >= self.batch_size:
            raise ValueError(
                f"canaries_max ({self.canaries_max}) must be < batch_size ({self.batch_size})"
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

        ``max(a * t_ref_s, b * p99_s) + 2 * min(rtt_s, max_rtt_s) + slack_s``
        (docs/design.md; detection.md §1).
        Raises ValueError if ``rtt_s`` is negative.
        """
        if rtt_s < 0:
            raise ValueError(f"rtt_s must be >= 0, got {rtt_s}")
        d = self.deadline
        return max(d.a * d.t_ref_s, d.b * d.p99_s) + 2 * min(rtt_s, d.max_rtt_s) + d.slack_s


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


class _FileConfig(_Model):
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


class CoordinatorConfig(_FileConfig):
    """``configs/coordinator.toml``: the coordinator service."""

    host: str = "127.0.0.1"
    port: int = Field(default=8470, ge=0, le=65535)
    identity_key: Path
    allowed_nodes: list[str] = Field(default_factory=list)
    """Node public keys in text form ``ed25519:<base64url-no-pad>``."""
    node_names: dict[str, str] = Field(default_factory=dict)
    """Operator-chosen display names, public key text -> name (shown in tables and the
    dashboard). Names come from the operator, never from the node."""
    node_hosts: dict[str, str] = Field(default_factory=dict)
    """Declared co-hosting, public key text -> host label: identities the node operator
    says run on one machine (one per card; ``netcheck node setup --cards N`` prints the
    lines). Shown on the dashboard and given to detection: a confirmed slowdown inside
    one declared host is a ``declared-host`` flag, not a ``shared-backend`` one
    (docs/detection.md)."""
    open_enrollment: bool = False
    """Accept any node key; must be set explicitly when ``allowed_nodes`` is empty."""
    database: str = Field(default="sqlite:///netcheck.db", validate_default=True)
    admin_token: str = Field(min_length=16)
    profiles: list[str] = Field(min_length=1)
    """Profile names (looked up in :attr:`profile_dirs`) or paths to ``.toml`` files
    (relative to this file's folder)."""
    profiles_dir: Path | None = None
    """Folder of profile files; None = ``profiles/`` next to this file, then the
    installed ``configs/profiles`` (see :func:`profile_search_dirs`)."""
    handshake_timeout_s: float = Field(default=5.0, gt=0)
    trusted_proxies: list[str] = Field(default_factory=list)
    """CIDR networks of reverse proxies in front of the coordinator. A connection from
    one of them is charged to the rightmost untrusted ``X-Forwarded-For`` hop instead
    of the proxy's address (docs/protocol.md §3.3b). Empty: the TCP peer address."""
    request_header_timeout_s: float = Field(default=10.0, gt=0)
    """A connection must deliver each complete HTTP request (the websocket upgrade, an
    admin call) within this time of its accept or of the previous response, or it is
    closed; idle keep-alive connections close after it too (aiohttp's
    ``keepalive_timeout``, see ``Coordinator.make_runner``)."""
    max_message_bytes: int = Field(default=8 * 1024 * 1024, gt=0, le=MAX_MESSAGE_BYTES_LIMIT)
    """Largest websocket message accepted, bytes (at most 64 MiB)."""
    # -- durable round results (docs/spool.md) ------------------------------------
    storage_retry_s: float = Field(default=10.0, ge=0)
    """A round write refused by a locked or unreachable database is retried with
    backoff for this long, then its records go to the local spool."""
    spool_file: Path | None = None
    """The spool of round results waiting for the database (append-only, fsynced).
    None = ``netcheck-spool.jsonl`` next to ``identity_key`` (a gateway:
    ``spool-<gateway_id>.jsonl``)."""
    spool_replay_s: float = Field(default=5.0, gt=0)
    """While the spool holds entries, try to replay it this often (seconds)."""
    decoy_workers: int | None = Field(default=None, ge=0, le=64)
    """Worker processes that generate decoys ahead of each round
    (:class:`netcheck.workloads.reservoir.DecoyReservoir`); 0 = generate them in the
    planning thread; unset = a quarter of the CPUs, 1 to 8 (0 below 4 CPUs)."""
    rtt_refresh_s: float = Field(default=10.0, ge=0)
    """Echo and probe RTT sets are taken between rounds (docs/rtt-sampling.md): a node's
    set is replaced within a quarter of this after a round used it, and when it is this
    old (±25 %); a set older than 3x this is not used. 0 = no background sampling: each
    round samples every node before planning."""
    # -- detection (docs/detection.md) ----------------------------------------------
    schedule_secret_file: Path | None = None
    """Secret key of the screening schedule (32 random bytes, mode 0600), created on
    first start if missing. None = ``schedule.secret`` next to ``identity_key``."""
    screening_interval_s: float = Field(default=0.0, ge=0)
    """Run one screening round per profile every this many seconds (0 = no timer)."""
    screening_full_every: int = Field(default=4, ge=1)
    """Every n-th screening round loads every node (a full-load capacity round)."""
    screening_window_rounds: int = Field(default=128, ge=4)
    """Analysis uses the most recent this many screening and full rounds."""
    screening_analyze_every: int = Field(default=16, ge=1)
    """With the timer: run the analysis and confirmation after this many rounds."""
    confirm_cycles: int = Field(default=4, ge=3)
    """Confirmation cycles (group, then each member alone) per look."""
    confirm_max_cycles: int = Field(default=16, ge=3)
    """Cycles before a suspect group is cleared."""
    capacity_window: int = Field(default=8, ge=1)
    """Capacity test: a node's most recent this many verdicts form the window."""
    capacity_strikes: int = Field(default=3, ge=1)
    """Capacity test: ``late``/``missing`` verdicts in the window that raise a flag."""
    answer_failure_window: int = Field(default=8, ge=1)
    """Answer-failure test: a node's most recent this many *checked* rounds (pass,
    ``wrong-answer``, ``malformed``) form the window."""
    answer_failure_strikes: int = Field(default=3, ge=1)
    """Answer-failure test: ``wrong-answer``/``malformed`` verdicts in the window that
    raise an ``answer-failure`` flag."""
    relay_from_batch_times: bool = False
    """Ignored: the provisional relay check from batch times was replaced by the
    probe-based relay test (docs/detection.md); kept so that existing files load."""

    @field_validator("identity_key", "schedule_secret_file", "profiles_dir", "spool_file")
    @classmethod
    def _resolve_key(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else _resolve_path(value, info)

    @property
    def spool_path(self) -> Path:
        """Where round results wait when the database is unavailable (``spool_file``)."""
        if self.spool_file is not None:
            return self.spool_file
        gateway = getattr(self, "gateway_id", None)
        name = f"spool-{gateway}.jsonl" if gateway else "netcheck-spool.jsonl"
        return self.identity_key.parent / name

    @property
    def schedule_secret_path(self) -> Path:
        """Where the screening schedule secret lives (see ``schedule_secret_file``)."""
        if self.schedule_secret_file is not None:
            return self.schedule_secret_file
        return self.identity_key.parent / "schedule.secret"

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, value: list[str]) -> list[str]:
        for i, text in enumerate(value):
            try:
                ipaddress.ip_network(text.strip(), strict=False)
            except ValueError:
                raise ValueError(
                    f"entry {i}: {text!r} is not an IP address or CIDR network"
                ) from None
        return value

    @field_validator("allowed_nodes")
    @classmethod
    def _check_nodes(cls, value: list[str]) -> list[str]:
        for i, text in enumerate(value):
            try:
                _check_key_text(text)
            except ValueError as exc:
                raise ValueError(f"entry {i}: {exc}") from None
        return value

    @field_validator("node_names", "node_hosts")
    @classmethod
    def _check_names(cls, value: dict[str, str]) -> dict[str, str]:
        for text in value:
            try:
                parse_public_key(text)
            except KeyFileError as exc:
                raise ValueError(str(exc)) from None  # names the key
        return value

    @field_validator("admin_token")
    @classmethod
    def _check_token(cls, value: str) -> str:
        if value == PLACEHOLDER_ADMIN_TOKEN:
            raise ValueError(
                "still the placeholder: replace it with a long random token, e.g. the output "
                'of python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
            )
        return value

    @field_validator("database")
    @classmethod
    def _resolve_database(cls, value: str, info: ValidationInfo) -> str:
        match = _SQLITE_URL.match(value)
        base = _base_dir(info)
        if match is None or base is None:
            return value
        prefix, path, query = match.group(1), match.group(2), match.group(3) or ""
        if path in ("", ":memory:") or path.startswith("/"):
            return value
        return f"{prefix}{(base / Path(path).expanduser()).as_posix()}{query}"

    @model_validator(mode="after")
    def _check_enrollment(self) -> CoordinatorConfig:
        if not self.allowed_nodes and not self.open_enrollment:
            raise ValueError("allowed_nodes is empty; list node keys or set open_enrollment = true")
        if self.capacity_strikes > self.capacity_window:
            raise ValueError("capacity_strikes must be <= capacity_window")
        if self.answer_failure_strikes > self.answer_failure_window:
            raise ValueError("answer_failure_strikes must be <= answer_failure_window")
        if self.confirm_max_cycles < self.confirm_cycles:
            raise ValueError("confirm_max_cycles must be >= confirm_cycles")
        return self


class NodeConfig(_FileConfig):
    """``configs/node.toml``: one node."""

    coordinator_url: str
    coordinator_key: str
    """Pinned coordinator public key, ``ed25519:<base64url-no-pad>``."""
    identity_key: Path
    profile: str = Field(min_length=1)
    """Profile name (looked up in :attr:`profile_dirs`) or path to a ``.toml`` file."""
    profiles_dir: Path | None = None
    """Folder of profile files; None = ``profiles/`` next to this file, then the
    installed ``configs/profiles`` (see :func:`profile_search_dirs`)."""
    device: str | None = None
    """The card this node runs on (``cuda:<n>``, ``cuda``, ``cpu`` or ``auto``), in
    place of the profile's ``device``. The engine fingerprint records the card *model*,
    not its index, so one profile and one reference set serve every card of a host."""
    name: str = ""
    warmup_batches: int = Field(default=2, ge=0, le=16)
    """Full batches of fresh prompts run after the engine loads and before the node
    joins (answers discarded): the first batch pays one-time costs (CUDA context, kernel
    selection, allocator growth: +0.53 s, 1.24x, on an H200) that would make the first
    round ``late``. The last batch's time is compared with the profile's deadline and
    logged (``node.warmup``); the default 2 makes that last batch a warm one."""

    @field_validator("coordinator_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not re.match(r"^wss?://", value):
            raise ValueError("coordinator_url must start with ws:// or wss://")
        if re.search(r"\s", value):
            raise ValueError("coordinator_url must not contain whitespace")
        try:
            url = URL(value)
        except ValueError as exc:  # yarl: bad or out-of-range port, missing host
            raise ValueError(f"not a valid URL: {exc}") from None
        if not url.host:
            raise ValueError("coordinator_url has no host")
        if url.explicit_port is not None and not 1 <= url.explicit_port <= 65535:
            raise ValueError(f"port must be 1..65535, got {url.explicit_port}")
        return value

    @field_validator("coordinator_key")
    @classmethod
    def _check_key(cls, value: str) -> str:
        if value == KEY_TEXT_PREFIX + "A" * 43:
            raise ValueError(
                "still the placeholder: paste the public key that `netcheck keygen` printed "
                "on the coordinator host"
            )
        return _check_key_text(value)

    @field_validator("identity_key")
    @classmethod
    def _resolve_key(cls, value: Path, info: ValidationInfo) -> Path:
        return _resolve_path(value, info)

    @field_validator("profiles_dir")
    @classmethod
    def _resolve_dir(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else _resolve_path(value, info)

    @field_validator("device")
    @classmethod
    def _check_node_device(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"cpu|auto|cuda(:\d+)?", value):
            raise ValueError("device must be 'cpu', 'auto', 'cuda' or 'cuda:<n>'")
        return value

    def node_profile(self) -> Profile:
        """The claimed profile with this node's ``device`` (when set) in place of the
        profile's (raises ConfigError like :meth:`load_profile`)."""
        profile = self.load_profile(self.profile)
        if self.device is None:
            return profile
        return profile.model_copy(update={"device": self.device})


_M = TypeVar("_M", bound=BaseModel)


class GatewayConfig(CoordinatorConfig):
    """A coordinator config (same keys, same identity key on every gateway) plus:"""

    gateway_id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._-]+$")
    """This gateway's name, unique among the live gateways of the deployment."""
    max_clock_offset_s: float = Field(default=0.010, gt=0)
    """Sit a round out when the clock offset to the leader exceeds this (seconds)."""
    max_clock_uncertainty_s: float = Field(default=0.025, gt=0)
    """Sit a round out when the offset is known no better than this (seconds)."""
    release_margin_s: float = Field(default=0.25, gt=0)
    """The release instant is this far ahead of the leader's decision (≥ NOTIFY latency)."""
    join_timeout_s: float = Field(default=20.0, gt=0)
    """How long the leader waits for live gateways to join a round."""
    close_grace_s: float = Field(default=5.0, ge=0)
    """Extra wait for gateway reports after the result timeout."""
    round_interval_s: float = Field(default=0.0, ge=0)
    """When leader: start a full round of the first profile this often (0 = only on request)."""

    @field_validator("database")
    @classmethod
    def _postgres_only(cls, value: str) -> str:
        if not value.startswith("postgresql"):
            raise ValueError("gateways share one PostgreSQL database: use postgresql+psycopg://...")
        return value


def _format_error(path: Path, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        lines.append(f"{path}: {loc}: {msg}" if loc else f"{path}: {msg}")
    return "\n".join(lines)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def _load(model: type[_M], path: Path, data: dict[str, Any]) -> _M:
    try:
        return model.model_validate(data, context={"base_dir": path.resolve().parent})
    except ValidationError as exc:
        raise ConfigError(_format_error(path, exc)) from None


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
    data = _read_toml(path)
    data.setdefault("name", path.stem)
    if by_name and data["name"] != text:
        raise ConfigError(f"{path}: name: {data['name']!r} does not match the profile name")
    return _load(Profile, path, data)


def load_coordinator_config(path: str | Path) -> CoordinatorConfig:
    """Load ``coordinator.toml``; relative paths resolve against its directory.

    Raises ConfigError naming file and field.
    """
    path = Path(path)
    cfg = _load(CoordinatorConfig, path, _read_toml(path))
    cfg._config_dir = path.resolve().parent
    return cfg


def load_node_config(path: str | Path) -> NodeConfig:
    """Load ``node.toml``; relative paths resolve against its directory.

    Raises ConfigError naming file and field.
    """
    path = Path(path)
    cfg = _load(NodeConfig, path, _read_toml(path))
    cfg._config_dir = path.resolve().parent
    return cfg


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """Load and validate a gateway config TOML.

    Raises:
        ConfigError: missing file, bad TOML or a bad field (named).
    """
    p = Path(path)
    cfg = _load(GatewayConfig, p, _read_toml(p))
    cfg._config_dir = p.resolve().parent
    return cfg
