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

One module per file kind: :mod:`~netcheck.config.profile` (profiles),
:mod:`~netcheck.config.coordinator` (coordinator and gateway),
:mod:`~netcheck.config.node` (node), over :mod:`~netcheck.config.base` (the strict
model base, the file readers, path and key checks). This package re-exports their
public names, so ``from netcheck.config import Profile`` is the import to use.
"""

from netcheck.config.base import KEY_TEXT_PREFIX, read_toml
from netcheck.config.coordinator import (
    MAX_MESSAGE_BYTES_LIMIT,
    PLACEHOLDER_ADMIN_TOKEN,
    CoordinatorConfig,
    GatewayConfig,
    load_coordinator_config,
    load_gateway_config,
)
from netcheck.config.node import NodeConfig, load_node_config
from netcheck.config.profile import (
    DEFAULT_PROFILES_DIR,
    CapacityRecord,
    DeadlineParams,
    Profile,
    load_profile,
    profile_search_dirs,
)

__all__ = [
    "DEFAULT_PROFILES_DIR",
    "KEY_TEXT_PREFIX",
    "MAX_MESSAGE_BYTES_LIMIT",
    "PLACEHOLDER_ADMIN_TOKEN",
    "CapacityRecord",
    "CoordinatorConfig",
    "DeadlineParams",
    "GatewayConfig",
    "NodeConfig",
    "Profile",
    "load_coordinator_config",
    "load_gateway_config",
    "load_node_config",
    "load_profile",
    "profile_search_dirs",
    "read_toml",
]
