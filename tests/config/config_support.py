"""Helpers for the config tests: a real node key, a minimal valid coordinator config
and writers for config files."""

from __future__ import annotations

from pathlib import Path

from netcheck.config import CoordinatorConfig, load_coordinator_config

#: A real key (seed 0x42 * 32); not the all-zero placeholder of the examples.
KEY = "ed25519:IVL40Zt5HSRFMkLhXy6rbLfP-ntqXtMAl5YOBpiB2xI"
#: The smallest coordinator config that loads (one admitted node, ``cpu-tiny``).
COORD = f"""
identity_key = "keys/c.pem"
allowed_nodes = ["{KEY}"]
admin_token = "0123456789abcdef"
profiles = ["cpu-tiny"]
"""


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, making its folders; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load_coordinator(tmp_path: Path, lines: str) -> CoordinatorConfig:
    """Load ``tmp_path/c.toml`` holding ``lines`` (TOML, may be empty) above
    :data:`COORD`; raises :class:`~netcheck.errors.ConfigError` as the loader does."""
    return load_coordinator_config(write(tmp_path / "c.toml", lines + COORD))
