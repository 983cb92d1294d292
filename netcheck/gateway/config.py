"""``gateway serve`` configuration: a coordinator config plus the gateway settings."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from netcheck.config import CoordinatorConfig, _load, _read_toml


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


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """Load and validate a gateway config TOML.

    Raises:
        ConfigError: missing file, bad TOML or a bad field (named).
    """
    p = Path(path)
    return _load(GatewayConfig, p, _read_toml(p))
