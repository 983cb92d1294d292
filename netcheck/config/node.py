"""A node's file (``configs/node.toml``): its coordinator, identity and claimed profile."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator
from yarl import URL

from netcheck.config.base import (
    KEY_TEXT_PREFIX,
    ConfigPath,
    check_key_text,
    resolve_path,
)
from netcheck.config.profile import FileConfig, Profile, load_file_config


class NodeConfig(FileConfig):
    """``configs/node.toml``: one node."""

    coordinator_url: str
    coordinator_key: str
    """Pinned coordinator public key, ``ed25519:<base64url-no-pad>``."""
    identity_key: ConfigPath
    profile: str = Field(min_length=1)
    """Profile name (looked up in :attr:`profile_dirs`) or path to a ``.toml`` file."""
    profiles_dir: ConfigPath | None = None
    """Folder of profile files; None = ``profiles/`` next to this file, then the
    installed ``configs/profiles`` (see :func:`profile_search_dirs`)."""
    device: str | None = None
    """The card this node runs on (``cuda:<n>``, ``cuda``, ``cpu`` or ``auto``), in
    place of the profile's ``device``. The engine fingerprint records the card *model*,
    not its index, so one profile and one reference set serve every card of a host."""
    name: str = ""
    """Label of this node in its own log lines (never sent); printable characters only."""
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

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        # it starts every log line of the node: a newline or an escape sequence would
        # forge lines or recolour the terminal
        if not value.isprintable():
            raise ValueError("has a control character (a newline, escape, tab, ...): remove it")
        return value

    @field_validator("coordinator_key")
    @classmethod
    def _check_key(cls, value: str) -> str:
        if value == KEY_TEXT_PREFIX + "A" * 43:
            raise ValueError(
                "still the placeholder: paste the public key that `netcheck keygen` printed "
                "on the coordinator host"
            )
        return check_key_text(value)

    @field_validator("identity_key")
    @classmethod
    def _resolve_key(cls, value: Path, info: ValidationInfo) -> Path:
        return resolve_path(value, info)

    @field_validator("profiles_dir")
    @classmethod
    def _resolve_dir(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else resolve_path(value, info)

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


def load_node_config(path: str | Path) -> NodeConfig:
    """Load ``node.toml``; relative paths resolve against its directory.

    Raises ConfigError naming file and field.
    """
    return load_file_config(NodeConfig, path)
