"""The canary pool: how many unspent references are left per fingerprint (pure).

Operators see this on every surface (``netcheck references status``, the admin API's
``GET /admin/references`` and ``/admin/status``, the ``netcheck_reference_unspent``
gauge and the dashboard banner), because an empty pool does not fail loudly by itself:
a node whose fingerprint has no unspent canary gets the verdict ``unchecked``.

*Rounds left* for a fingerprint is ``unspent // (canaries_max * nodes)``: the number of
full rounds the pool still covers in the worst case, where every one of the ``nodes``
connected nodes with that fingerprint draws ``canaries_max`` canaries (one node when
none is connected, so an idle pool still reads in rounds).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from netcheck.config import Profile

#: Below this many rounds left a pool is reported as ``low`` (the round runner warns too).
LOW_POOL_ROUNDS = 10


#: Stands for the coordinator config in :func:`build_command` where the surface does not
#: know its path (admin API, dashboard); the CLI puts its ``--config`` there
#: (:func:`with_config`), since a shell reads ``<coordinator.toml>`` as a redirection.
CONFIG_PLACEHOLDER = "<coordinator.toml>"


def build_command(profile: str) -> str:
    """The command that adds references for ``profile`` (shown wherever a pool is short),
    with :data:`CONFIG_PLACEHOLDER` for the config (:func:`with_config` fills it in)."""
    return f"netcheck reference build --profile {profile} --config {CONFIG_PLACEHOLDER}"


def with_config(text: str, config_path: Path | None, program: str = "netcheck") -> str:
    """``text`` with :data:`CONFIG_PLACEHOLDER` replaced by ``config_path`` (shell-quoted;
    kept without a path) and a leading ``netcheck`` by ``program`` (the CLI passes
    :func:`netcheck.admin_client.invoked_as`, e.g. ``.venv/bin/netcheck``), so that a
    printed command runs as shown."""
    if program != "netcheck" and text.startswith("netcheck "):
        text = program + text.removeprefix("netcheck")
    if config_path is None:
        return text
    return text.replace(CONFIG_PLACEHOLDER, shlex.quote(str(config_path)))


@dataclass(frozen=True)
class PoolEntry:
    """One (profile, fingerprint) pool.

    ``total``/``unspent``: stored / not yet used references; ``nodes``: connected nodes
    claiming this profile with this fingerprint; ``per_round``: canaries one round draws
    at most from it; ``rounds_left``: ``unspent // per_round``; ``state``: ``ok``,
    ``low`` (< :data:`LOW_POOL_ROUNDS` rounds) or ``empty`` (not one more round).
    """

    profile: str
    fingerprint_id: str
    total: int
    unspent: int
    nodes: int
    per_round: int
    rounds_left: int
    state: str
    build_command: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pool_status(
    counts: Iterable[Mapping[str, Any]],
    profiles: Mapping[str, Profile],
    connected: Mapping[tuple[str, str], int] | None = None,
) -> list[PoolEntry]:
    """Pool entries for every stored (profile, fingerprint) and every connected one.

    Args:
        counts: rows of :meth:`netcheck.storage.Store.reference_pool` (``profile``,
            ``fingerprint_id``, ``total``, ``unspent``).
        profiles: profiles by name; gives ``canaries_max`` (a profile unknown here
            counts as 1 canary per node and round).
        connected: connected nodes per ``(profile, fingerprint_id)``. A pair with nodes
            and no stored reference appears with ``total = 0`` (state ``empty``).

    Returns:
        Entries sorted by profile then fingerprint id.
    """
    connected = dict(connected or {})
    rows: dict[tuple[str, str], tuple[int, int]] = {
        (str(c["profile"]), str(c["fingerprint_id"])): (int(c["total"]), int(c["unspent"]))
        for c in counts
    }
    for pair in connected:
        rows.setdefault(pair, (0, 0))
    out = []
    for (profile, fp), (total, unspent) in sorted(rows.items()):
        nodes = connected.get((profile, fp), 0)
        p = profiles.get(profile)
        per_round = (p.canaries_max if p is not None else 1) * max(nodes, 1)
        left = unspent // per_round
        state = "empty" if left == 0 else "low" if left < LOW_POOL_ROUNDS else "ok"
        out.append(
            PoolEntry(profile, fp, total, unspent, nodes, per_round, left, state,
                      build_command(profile))
        )  # fmt: skip
    return out


def shortest(entries: Iterable[PoolEntry]) -> PoolEntry | None:
    """The entry with the fewest rounds left among pools nodes draw from now (or among
    all, when no node is connected); None without entries."""
    entries = list(entries)
    live = [e for e in entries if e.nodes] or entries
    return min(live, key=lambda e: (e.rounds_left, e.profile, e.fingerprint_id), default=None)
