"""EMULATION: a population of simulated nodes, honest and proxied, and their timing rows.

Service-time model (detection.md §1–2; the same processor-sharing model as
:mod:`netcheck.lab.emulation`). Node i loaded in round r takes::

    s[i, r] = T_ref * speed_i * exp(g_r) * F[i, r] * exp(sigma_w * z[i, r])

- ``speed_i``: per-node speed, log-normal with log-sd ``speed_sd`` (farm identities
  share their backend's speed); ``g_r ~ N(0, round_sd)``: a per-round common effect;
  ``z ~ N(0, 1)`` independent: log-normal timing noise; node i's noise level is
  ``sigma_i = sigma_w * exp(sigma_spread * u_i)``, ``u_i ~ N(0, 1)`` (nodes are not
  equally noisy; ``sigma_w`` is the median level).
- ``F = 1`` for an honest node, times ``1 + benign_coupling`` when its co-hosted honest
  partner (another GPU in the same host) is loaded too.
- ``F = 1 + beta * (k_loaded - 1)`` for a farm identity, ``k_loaded`` = the farm's
  identities loaded in that round (one GPU serving k batches with batching efficiency
  ``beta``).
- ``farm_backend = "matched"``: the backend is of the claimed class (its alone time is
  an honest node's); ``"fast"``: ``1 + beta * (k - 1)`` times faster, so a fully loaded
  farm meets the reference time and passes a capacity deadline.

Evading adversaries (farm identities only): ``pad`` reports every result as if all k
identities were loaded (``F = 1 + beta * (k - 1)`` always — it holds fast answers
back); ``jitter`` adds a random delay, ``exp(jitter_log_sd * |z'|)``; ``selective``
drops its result whenever another identity of its farm is loaded too.

Rows: the release loop writes one node every ``release_gap_ns``; the result arrives
``s + rtt_i + e`` later, ``e ~ Exp(rtt_jitter_s)`` (``rtt_i`` is the measured min echo).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from netcheck.analysis.timing import TimingRow

ADVERSARIES = ("none", "pad", "jitter", "selective")
FARM_BACKENDS = ("matched", "fast")
DEFAULT_FARMS = (2,) * 8 + (3,) * 6 + (5,) * 4  # 54 farm identities


@dataclass(frozen=True)
class PopulationSpec:
    """Parameters of a simulated population (units in the names; defaults documented).

    ``n_nodes`` (200) identities in all, of which ``sum(farm_sizes)`` are farm
    identities (default 8 farms of 2, 6 of 3, 4 of 5 = 54) and the rest honest, with
    ``cohosted_pairs`` (10) honest pairs sharing a host (``benign_coupling`` 3%).
    """

    n_nodes: int = 200
    farm_sizes: tuple[int, ...] = DEFAULT_FARMS
    sigma_w: float = 0.05
    sigma_spread: float = 0.3
    beta: float = 0.5
    t_ref_s: float = 2.0
    speed_sd: float = 0.05
    round_sd: float = 0.02
    cohosted_pairs: int = 10
    benign_coupling: float = 0.03
    rtt_min_s: float = 0.005
    rtt_max_s: float = 0.15
    rtt_jitter_s: float = 0.001
    release_gap_ns: int = 20_000
    adversary: str = "none"
    jitter_log_sd: float = 0.3
    farm_backend: str = "matched"

    def __post_init__(self) -> None:
        n_farm = sum(self.farm_sizes)
        if any(k < 2 for k in self.farm_sizes) or n_farm + 2 * self.cohosted_pairs > self.n_nodes:
            raise ValueError("farms need k >= 2 and must fit in n_nodes with the co-hosted pairs")
        if self.adversary not in ADVERSARIES or self.farm_backend not in FARM_BACKENDS:
            raise ValueError(f"adversary in {ADVERSARIES}, farm_backend in {FARM_BACKENDS}")
        if not 0.0 <= self.beta <= 1.0 or self.sigma_w < 0 or self.t_ref_s <= 0:
            raise ValueError("need 0 <= beta <= 1, sigma_w >= 0, t_ref_s > 0")


@dataclass(frozen=True)
class Population:
    """A drawn population. Arrays are indexed like ``node_keys``.

    ``farm_of``: farm index per node (-1 = honest); ``farms``: each farm's node keys;
    ``cohost_of``: index of the co-hosted honest partner (-1 = none); ``speed``:
    speed factor (service time multiplier); ``rtt_s``: measured echo RTT; ``sigma``:
    log-sd of the node's timing noise.
    """

    spec: PopulationSpec
    node_keys: tuple[str, ...]
    farm_of: npt.NDArray[np.int64]
    farms: tuple[tuple[str, ...], ...]
    cohost_of: npt.NDArray[np.int64]
    speed: npt.NDArray[np.float64]
    rtt_s: npt.NDArray[np.float64]
    sigma: npt.NDArray[np.float64]
    farm_size: npt.NDArray[np.int64] = field(repr=False)

    @property
    def honest(self) -> frozenset[str]:
        """Keys of the honest nodes."""
        return frozenset(k for k, f in zip(self.node_keys, self.farm_of, strict=True) if f < 0)

    def cohosted(self) -> list[tuple[str, str]]:
        """The honest co-hosted pairs, as key pairs."""
        return [
            (self.node_keys[i], self.node_keys[j]) for i, j in enumerate(self.cohost_of) if j > i
        ]

    def service_times(
        self, loaded: npt.NDArray[np.bool_], rng: np.random.Generator
    ) -> npt.NDArray[np.float64]:
        """EMULATION: service time (s) of every node for one round; NaN = not loaded or
        no result (``selective`` adversary). ``loaded``: ``(n,)`` bool."""
        spec = self.spec
        n = len(self.node_keys)
        is_farm = self.farm_of >= 0
        factor = np.ones(n)
        n_farms = len(self.farms)
        k_loaded = np.bincount(self.farm_of[is_farm & loaded], minlength=max(n_farms, 1))
        k_node = np.where(is_farm, k_loaded[np.maximum(self.farm_of, 0)], 0)
        if spec.adversary == "pad":
            factor[is_farm] = 1.0 + spec.beta * (self.farm_size[is_farm] - 1)
        else:
            factor[is_farm] = 1.0 + spec.beta * np.maximum(k_node[is_farm] - 1, 0)
        has_host = self.cohost_of >= 0
        partner_loaded = np.zeros(n, dtype=bool)
        partner_loaded[has_host] = loaded[self.cohost_of[has_host]]
        factor[partner_loaded] *= 1.0 + spec.benign_coupling
        noise = self.sigma * rng.standard_normal(n)
        if spec.adversary == "jitter":
            noise[is_farm] += spec.jitter_log_sd * np.abs(rng.standard_normal(int(is_farm.sum())))
        g = spec.round_sd * rng.standard_normal()
        s = spec.t_ref_s * self.speed * math.exp(g) * factor * np.exp(noise)
        dropped = is_farm & (k_node >= 2) if spec.adversary == "selective" else np.zeros(n, bool)
        return np.where(loaded & ~dropped, s, np.nan)

    def simulate_round(
        self,
        round_id: str,
        loaded: Mapping[str, bool] | npt.NDArray[np.bool_],
        rng: np.random.Generator,
        start_ns: int = 0,
    ) -> list[TimingRow]:
        """EMULATION: timing rows of one round, one per node, as the coordinator stores
        them (unloaded nodes: no release, no result)."""
        if isinstance(loaded, Mapping):
            bits = np.array([bool(loaded.get(k, False)) for k in self.node_keys])
        else:
            bits = np.asarray(loaded, dtype=bool)
        service = self.service_times(bits, rng)
        transit = self.rtt_s + rng.exponential(self.spec.rtt_jitter_s, len(self.node_keys))
        order = rng.permutation(len(self.node_keys))
        rows = []
        for slot, i in enumerate(order):
            key = self.node_keys[i]
            if not bits[i]:
                rows.append(TimingRow(round_id, key, False, None, None, float(self.rtt_s[i])))
                continue
            released = start_ns + slot * self.spec.release_gap_ns
            arrived = (
                None
                if math.isnan(service[i])
                else released + round((service[i] + transit[i]) * 1e9)
            )
            rows.append(TimingRow(round_id, key, True, released, arrived, float(self.rtt_s[i])))
        return rows


def make_population(spec: PopulationSpec, rng: np.random.Generator) -> Population:
    """EMULATION: draw a population (keys ``sim:000``…, farms at random positions)."""
    n = spec.n_nodes
    keys = tuple(f"sim:{i:03d}" for i in range(n))
    perm = rng.permutation(n)
    farm_of = np.full(n, -1, dtype=np.int64)
    farm_size = np.zeros(n, dtype=np.int64)
    farms: list[tuple[str, ...]] = []
    pos = 0
    for f, k in enumerate(spec.farm_sizes):
        members = perm[pos : pos + k]
        farm_of[members] = f
        farm_size[members] = k
        farms.append(tuple(keys[m] for m in sorted(members)))
        pos += k
    cohost_of = np.full(n, -1, dtype=np.int64)
    for _ in range(spec.cohosted_pairs):
        a, b = int(perm[pos]), int(perm[pos + 1])
        cohost_of[a], cohost_of[b] = b, a
        pos += 2
    speed = np.exp(spec.speed_sd * rng.standard_normal(n))
    backend_speed = np.exp(spec.speed_sd * rng.standard_normal(len(spec.farm_sizes)))
    for f, k in enumerate(spec.farm_sizes):
        s = backend_speed[f]
        if spec.farm_backend == "fast":
            s /= 1.0 + spec.beta * (k - 1)
        speed[farm_of == f] = s
    rtt = rng.uniform(spec.rtt_min_s, spec.rtt_max_s, n)
    sigma = spec.sigma_w * np.exp(spec.sigma_spread * rng.standard_normal(n))
    return Population(spec, keys, farm_of, tuple(farms), cohost_of, speed, rtt, sigma, farm_size)
