"""The gateway's process entry point loads what the coordinator's does, the same way."""

from __future__ import annotations

from pathlib import Path

from gw_support import PROFILE, write_gateway_config

from netcheck.gateway.app import build_gateway
from netcheck.keys import generate_key
from netcheck.lab.loadrun import write_profile


def test_gateway_resolves_profiles_in_its_config_folder(tmp_path: Path, pg_url: str) -> None:
    """A profile named by name is found in ``profiles/`` beside the gateway config (as for
    the coordinator), not only in the install tree."""
    (tmp_path / "profiles").mkdir()
    write_profile(
        tmp_path / "profiles" / "site-only.toml",
        "site-only",
        **PROFILE.model_dump(exclude={"name"}),
    )
    key = tmp_path / "gw.pem"
    generate_key(key)
    cfg, _, _ = write_gateway_config(tmp_path, pg_url, "gw-a", Path("site-only"), key)
    gw = build_gateway(cfg)
    try:
        assert set(gw.profiles) == {"site-only"}
    finally:
        gw.store.close()
