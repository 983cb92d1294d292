"""One identity per card: keys and node configs for a host with several GPUs.

``netcheck node setup --cards N`` writes, for i = 0..N-1, ``keys/<host>-gpu<i>.pem`` (a
fresh Ed25519 key, mode 0600) and ``<host>-gpu<i>.toml`` (the node config with
``device = "cuda:<i>"`` and ``name = "<host>-gpu<i>"``), and returns what the
coordinator's operator needs: each public key with its name, for ``allowed_nodes`` and
``node_names``, and the declaration that they share one host (``node_hosts``).
Existing files are never overwritten, and each written config is loaded back (its
coordinator URL and key, and its profile, found): if one fails, nothing is left written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from netcheck.config import load_node_config
from netcheck.errors import ConfigError
from netcheck.keys import generate_key, public_key_text

HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class CardNode:
    """One written identity: its name, card, public key and files."""

    name: str
    device: str
    public_key: str
    key_path: Path
    config_path: Path


def _toml_str(value: str) -> str:
    """``value`` as a TOML basic string: JSON's string escapes (``\\"``, ``\\\\``,
    ``\\n``, ``\\uXXXX``) are TOML's too, so a quote or newline in an option stays
    inside the value instead of adding keys to the written config."""
    return json.dumps(value, ensure_ascii=False)


def setup_cards(
    out_dir: Path,
    host: str,
    cards: int,
    *,
    coordinator_url: str,
    coordinator_key: str,
    profile: str,
    first_card: int = 0,
) -> list[CardNode]:
    """Write a key and a node config per card (see the module docstring).

    Raises:
        ConfigError: a bad host name or card count, a file that already exists, or a
            written config that does not load (a bad coordinator URL or key, an unknown
            profile): nothing is left written then.
        KeyFileError: a key could not be written.
    """
    if not HOST_RE.fullmatch(host):
        raise ConfigError(f"host name {host!r}: use letters, digits, '.', '_' or '-'")
    if not 1 <= cards <= 64:
        raise ConfigError(f"cards must be 1..64, got {cards}")
    plan = []
    for i in range(first_card, first_card + cards):
        name = f"{host}-gpu{i}"
        plan.append((name, f"cuda:{i}", out_dir / "keys" / f"{name}.pem", out_dir / f"{name}.toml"))
    existing = [str(p) for _, _, k, c in plan for p in (k, c) if p.exists()]
    if existing:
        raise ConfigError(f"not overwriting existing files: {', '.join(existing)}")
    out: list[CardNode] = []
    try:
        for name, device, key_path, config_path in plan:
            key = generate_key(key_path)
            out.append(CardNode(name, device, public_key_text(key), key_path, config_path))
            config_path.parent.mkdir(parents=True, exist_ok=True)
            config_path.write_text(
                f"# Node {name}: one identity per card (written by `netcheck node setup`).\n"
                f"coordinator_url = {_toml_str(coordinator_url)}\n"
                f"coordinator_key = {_toml_str(coordinator_key)}\n"
                f'identity_key = "keys/{name}.pem"\n'
                f"profile = {_toml_str(profile)}\n"
                f'device = "{device}"\n'
                f'name = "{name}"\n'
            )
            # what was written must load, profile included (a mistyped key, URL or
            # profile name is found now, not at `node run` on every card)
            load_node_config(config_path).node_profile()
    except ConfigError as exc:
        for n in out:  # every file written here is new (existing ones were refused)
            n.key_path.unlink(missing_ok=True)
            n.config_path.unlink(missing_ok=True)
        raise ConfigError(f"{exc} (nothing written: fix the option and run it again)") from None
    return out


def coordinator_snippet(nodes: list[CardNode], host: str | None = None) -> str:
    """TOML lines for the coordinator config: the keys to allow, their names and, with
    ``host``, the declaration that they share that host (``node_hosts``)."""
    allowed = ",\n".join(f'  "{n.public_key}"' for n in nodes)
    names = "\n".join(f'"{n.public_key}" = "{n.name}"' for n in nodes)
    out = f"allowed_nodes = [\n{allowed},\n]\n\n[node_names]\n{names}\n"
    if host is not None:
        hosts = "\n".join(f'"{n.public_key}" = "{host}"' for n in nodes)
        out += (
            f"\n# these identities share one machine (declared co-hosting)\n[node_hosts]\n{hosts}\n"
        )
    return out
