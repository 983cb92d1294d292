"""The coordinator's file (``configs/coordinator.toml``) and a gateway's (the same keys
plus its cluster settings, docs/gateways.md)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator, model_validator

from netcheck.config.base import ConfigPath, base_dir, check_key_text, resolve_path
from netcheck.config.profile import FileConfig, load_file_config
from netcheck.errors import KeyFileError
from netcheck.keys import parse_public_key

PLACEHOLDER_ADMIN_TOKEN = "change-me-to-a-long-random-token"
"""The ``admin_token`` shipped in ``configs/coordinator.toml``; refused, since the token
guards the admin API."""
MAX_MESSAGE_BYTES_LIMIT = 64 * 1024 * 1024
"""Upper bound of ``max_message_bytes`` (64 MiB): larger caps only help a peer exhaust
memory."""
_DATABASE_URL = re.compile(r"^(sqlite|postgresql)(\+\w+)?://")
_SQLITE_URL = re.compile(r"^(sqlite(?:\+\w+)?:///)([^?]*)(\?.*)?$")


class CoordinatorConfig(FileConfig):
    """``configs/coordinator.toml``: the coordinator service."""

    host: str = "127.0.0.1"
    port: int = Field(default=8470, ge=0, le=65535)
    identity_key: ConfigPath
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
    profiles_dir: ConfigPath | None = None
    """Folder of profile files; None = ``profiles/`` next to this file, then the
    installed ``configs/profiles`` (see :func:`profile_search_dirs`)."""
    handshake_timeout_s: float = Field(default=5.0, gt=0)
    trusted_proxies: list[str] = Field(default_factory=list)
    """CIDR networks of reverse proxies in front of the coordinator. A connection from
    one of them is charged to the rightmost untrusted ``X-Forwarded-For`` hop instead
    of the proxy's address (docs/protocol.md §3.3b). Empty: the TCP peer address."""
    max_sessions: int = Field(default=1024, ge=1)
    """Most websocket sessions at once (still handshaking or connected), all sources
    together; an upgrade past it is closed with ``TRY_AGAIN_LATER`` before any
    handshake work (docs/protocol.md §3.3c)."""
    max_sessions_per_source: int = Field(default=256, ge=1)
    """Most websocket sessions at once from one source address (the TCP peer, or the
    forwarded client behind ``trusted_proxies``); applies with ``allowed_nodes`` too.
    Behind a reverse proxy not listed in ``trusted_proxies`` every session has the
    proxy's address: for more nodes than this there, list the proxy or raise it up to
    ``max_sessions`` (docs/protocol.md §3.3c)."""
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
    spool_file: ConfigPath | None = None
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
    schedule_secret_file: ConfigPath | None = None
    """Secret key of the screening schedule (32 random bytes, mode 0600), created on
    first start if missing. None = ``schedule.secret`` next to ``identity_key``."""
    screening_interval_s: float = Field(default=0.0, ge=0)
    """Run one screening round per profile every this many seconds (0 = no timer)."""
    screening_full_every: int = Field(default=4, ge=1)
    """Every n-th screening round loads every node (a full-load capacity round)."""
    screening_load_probability: float = Field(default=2 / 3, gt=0, lt=1)
    """Chance that a node is loaded in a (not full) screening round, from the secret
    schedule (netcheck.analysis.schedule). 2/3 (the default since session 10; 1/2
    before) gives each pair's contention contrast the least variance per round: pair
    coverage after 12 screening rounds 0.998 against 0.968 at 1/2. The capacity test's
    null, the screening slowness test's null rate and the alone nomination's floor follow
    this value (netcheck.analysis.lateness.null_p0, netcheck.analysis.slowness.null_rate,
    netcheck.analysis.alone.nominate_floor; session 9); with the floors of 1/2 the
    benchmark flagged honest nodes at 2/3 (docs/detection-history.md, "Session 8").
    After a change the slowness test and the alone nomination judge a node whose rounds
    ran at both values at the larger null rate and floor (each round's q read from its
    stored rule: netcheck.analysis.slowness.window_null_rate,
    netcheck.analysis.alone.window_nominate_floor; session 11), and the capacity test
    takes its null from the window's own rounds (q per screening round, 1 per full or
    confirmation round, from their stored rules: netcheck.analysis.lateness.window_share;
    session 12), so a change of this value or of ``screening_full_every`` does not
    judge the old rounds at the new mix.
    Measured against 1/2: docs/detection.md, "Current figures"."""
    screening_window_rounds: int = Field(default=128, ge=4)
    """Analysis uses the most recent this many screening and full rounds."""
    screening_analyze_every: int = Field(default=16, ge=1)
    """With the timer: run the analysis and confirmation after this many rounds."""
    confirm_cycles: int = Field(default=8, ge=3)
    """Confirmation cycles (group, then each member alone) before the first look; later
    looks come at doubling cumulative cycles (16, 32, ...)."""
    confirm_max_cycles: int = Field(default=256, ge=3, le=4096)
    """Cycles before a suspect group is cleared (a group phase also stops early when all
    members pass, or, from its second look, when fewer than 2 are even estimated above
    the floor). At most 4096 (a pair's run of 12,288 rounds; more is a typo, not a
    setting). 256 since session 7 (128 before): looks at 8 ... 256 cycles; pairs whose
    slowdown sits near the floor pass in one attempt more often
    (docs/detection-history.md "Session 7")."""
    confirm_pool_rounds: int = Field(default=4096, ge=0)
    """Confirmation judges a group on its own rounds plus the earlier confirmation rounds
    that loaded only members of the group, among the this many most recent confirmation
    rounds that loaded any member (evidence accumulates across attempts; docs/detection.md
    "Confirmation"); 0 = each attempt alone."""
    confirm_batching: bool = True
    """Confirm the disjoint suspect groups of one analysis in shared rounds (each round
    loads the union of their load sets, each group judged on its own members;
    docs/confirmation-batches.md); false = one group at a time."""
    confirm_budget_rounds: int = Field(default=6144, ge=0, le=1_000_000)
    """Confirmation rounds one analysis may run for its suspect groups (shared rounds, as
    run; the alone stage of slowness nominees is not counted); 0 = no bound. The groups
    are served longest-waiting first (analyses their pairs were left unserved in a row,
    kept in memory: a restart resets it), then strongest first (their screening
    evidence above the effect floor; decoys cannot starve a pair for ever); a
    group whose first look does not fit is left for the next analysis (no round, no
    attempt spent), a running group whose next look does not fit is stopped at its last
    look (the pairs its split phase confirmed there are flagged, else a cleared record;
    its attempt counts). At least ``3 * confirm_cycles`` (a pair's first look) unless 0.
    6144 (session 9): the smallest measured budget with no recall loss by 32 screening
    rounds in the simulated populations of 200 (beta 0.3 farms need the most: 3072 found
    0.81 of their pairs instead of 0.97); it binds where the cost is extreme (1,000
    identities with jitter: 28% fewer rounds by 32) and bounds an operator who makes its
    own identities slow each other at the floor (docs/detection.md "Confirmation";
    netcheck/analysis/confirm_budget.py)."""
    confirm_coins: bool = False
    """Confirmation rounds also load every node outside the groups under test (and their
    linked neighbours) with the screening schedule's coin, and screening reads those
    nodes' cells (docs/screening-in-confirmation.md). Off by default: it raises pairs
    found per *screening* round but multiplies confirmation rounds 2-9 times, and per
    round of any kind it finds no more (docs/detection-history.md, "Session 6")."""
    capacity_window: int = Field(default=48, ge=2)
    """Capacity test (docs/detection.md): a node's most recent this many verdicts judged
    against the deadline (``pass``, ``late``, ``missing``) form the window."""
    capacity_strikes: int = Field(default=3, ge=2)
    """Capacity test: ``late``/``missing`` verdicts (in the window and in the node's
    life) before the test runs at all."""
    capacity_p0: float = Field(default=0.03, gt=0, lt=1)
    """Capacity test: the late/missing rate per round an honest node of the profile may
    have (the hypothesis tested); above the 1% of honest batch times over the p99 the
    deadline is calibrated on, for noisier nodes and co-hosted neighbours. Stated for
    ``screening_load_probability`` 1/2 and a full round every 4th
    (``screening_full_every`` 4); at a mix whose rounds load a co-hosted neighbour too
    more often the test scales it by that share (netcheck.analysis.lateness.null_p0:
    3.33% at 2/3 every 4th, 3.11% at 2/3 every 8th, 3.57% at 1/2 every 2nd). 3% since
    session 10 (2% before): noisy co-hosted honest cards are late more often than 2%
    (expected honest capacity flags per 1,000 analyses at sigma_w 0.15 and load
    probability 2/3: 0.18 at 2%, 0.06 at 3%; docs/detection.md "Limits and next steps")."""
    capacity_alpha: float = Field(default=0.03, gt=0, lt=1)
    """Capacity test: a node late in ``capacity_p0`` of its rounds is flagged with at
    most this probability over its whole life (the level split across its strikes)."""
    slowness_floor: float = Field(default=1.25, gt=1)
    """Persistent-slowness test (docs/detection.md, "Persistent slowness"): the ratio to
    the profile's ``t_ref`` that an honest node's median screening time stays below (the
    test's null hypothesis; netcheck.analysis.slowness.SlownessConfig.floor). 1.25: the
    spread between cards of one class (a few %) plus benign co-hosting coupling of up to
    20% in the rounds where a neighbour is loaded too. Raise it for a class whose cards
    differ by more (``netcheck engine pool`` reports the slowest pooled card against it)
    or while ``t_ref`` is stale; it also sets the test's reference check (no rejection
    when the median node is above it). The alone stage's floor (1.2, rounds without a
    neighbour) is a separate constant and does not follow this value. A floor with
    ``slowness_floor * t_ref_s >= result_timeout_s`` for a profile turns the stage off
    for it (netcheck.analysis.slowness.floor_problem): a warning at start and in
    ``coordinator check``, not an error."""
    slowness_alpha: float = Field(default=0.01, gt=0, lt=1)
    """Persistent-slowness test: a node whose median sits at ``slowness_floor`` is
    rejected with at most this probability over its whole life (spent over the looks,
    netcheck.analysis.slowness.spent_level)."""
    slowness_min_rounds: int = Field(default=8, ge=1)
    """Persistent-slowness test: loaded screening rounds of the window a node needs before
    it is tested; at most ``screening_window_rounds`` (more would test no node)."""
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
        return None if value is None else resolve_path(value, info)

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
                check_key_text(text)
            except ValueError as exc:
                raise ValueError(f"entry {i}: {exc}") from None
        return value

    @field_validator("node_names", "node_hosts")
    @classmethod
    def _check_names(cls, value: dict[str, str]) -> dict[str, str]:
        for text, name in value.items():
            try:
                parse_public_key(text)
            except KeyFileError as exc:
                raise ValueError(str(exc)) from None  # names the key
            if not name.isprintable():  # shown in log lines and tables: no forged lines
                raise ValueError(f"{text}: {name!r} has a control character: remove it")
        return value

    @field_validator("admin_token")
    @classmethod
    def _check_token(cls, value: str) -> str:
        if value == PLACEHOLDER_ADMIN_TOKEN:
            raise ValueError(
                "still the placeholder: replace it with a long random token, e.g. the output "
                'of python3 -c "import secrets; print(secrets.token_urlsafe(32))"'
            )
        # It travels in an HTTP header: a control character cannot be sent (aiohttp
        # refuses the request: a traceback from every admin command), and whitespace at
        # either end is stripped from the header (every request is then 401).
        if not value.isprintable():
            raise ValueError("has a control character (a newline, tab, ...): remove it")
        if value != value.strip():
            raise ValueError("starts or ends with a space: remove it")
        return value

    @field_validator("database")
    @classmethod
    def _resolve_database(cls, value: str, info: ValidationInfo) -> str:
        if not _DATABASE_URL.match(value):  # the value is not echoed: it may hold a password
            raise ValueError(
                "not a database URL: use sqlite:///path/netcheck.db or "
                "postgresql+psycopg://user:password@host/name"
            )
        match = _SQLITE_URL.match(value)
        base = base_dir(info)
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
            raise ValueError(
                f"capacity_strikes ({self.capacity_strikes}) must be <= capacity_window "
                f"({self.capacity_window})"
            )
        if self.answer_failure_strikes > self.answer_failure_window:
            raise ValueError(
                f"answer_failure_strikes ({self.answer_failure_strikes}) must be <= "
                f"answer_failure_window ({self.answer_failure_window})"
            )
        if self.confirm_max_cycles < self.confirm_cycles:
            raise ValueError(
                f"confirm_max_cycles ({self.confirm_max_cycles}) must be >= confirm_cycles "
                f"({self.confirm_cycles}, the first look)"
            )
        if self.slowness_min_rounds > self.screening_window_rounds:
            raise ValueError(
                f"slowness_min_rounds ({self.slowness_min_rounds}) must be <= "
                f"screening_window_rounds ({self.screening_window_rounds}): a node is loaded in "
                "at most every round of the window, so no node would ever be tested"
            )
        pair_look = 3 * self.confirm_cycles  # confirm_budget.first_block_rounds(2, cycles)
        if 0 < self.confirm_budget_rounds < pair_look:
            raise ValueError(
                f"confirm_budget_rounds ({self.confirm_budget_rounds}) must be 0 (no bound) "
                f"or at least {pair_look} (3 * confirm_cycles: a pair's first look; less "
                "confirms nothing)"
            )
        return self


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


def load_coordinator_config(path: str | Path) -> CoordinatorConfig:
    """Load ``coordinator.toml``; relative paths resolve against its directory.

    Raises ConfigError naming file and field.
    """
    return load_file_config(CoordinatorConfig, path)


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """Load and validate a gateway config TOML.

    Raises:
        ConfigError: missing file, bad TOML or a bad field (named).
    """
    return load_file_config(GatewayConfig, path)
