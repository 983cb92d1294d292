"""EMULATION: the settings and snapshots of :mod:`netcheck.lab.sim.live` (the simulated
coordinator's detection loop): :class:`LiveConfig` (defaults: the coordinator's),
:func:`legacy_config` (the behaviour before issue 13), :func:`sim_profile`, and
:class:`Snapshot` (the flags and counters at a checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from netcheck.analysis.alone import AloneConfig
from netcheck.analysis.confirm import ConfirmConfig
from netcheck.analysis.detectors import DetectorConfig
from netcheck.analysis.slowness import SlownessConfig
from netcheck.capacity import derive_deadline
from netcheck.config import CoordinatorConfig, DeadlineParams, Profile
from netcheck.lab.sim.population import Population

_DEFAULTS = CoordinatorConfig.model_fields


#: The capacity rule before the capacity test: 3 late/missing among the last 8 verdicts
#: (``capacity_check``); tracked beside the test as the same-run baseline.
LEGACY_CAPACITY = (8, 3)

DeadlineRule = Literal["legacy", "derived", "card"]
"""How :func:`sim_profile` sets the deadline: ``legacy``, the :class:`DeadlineParams`
defaults (a 1.5, b 1.2, slack 0.5 s) over the honest p99; ``derived``, the product's
calibration rule (:func:`~netcheck.capacity.derive_deadline` with the co-hosting
allowance :data:`SIM_COUPLING`)."""
SIM_COUPLING = 0.2
"""The co-hosting allowance of the ``derived`` deadline (as ``netcheck engine calibrate``'s
``--coupling`` default: the benign coupling the detectors allow)."""


def _fdefault(name: str) -> float:
    value = _DEFAULTS[name].default
    assert isinstance(value, float)
    return value


def _bdefault(name: str) -> bool:
    value = _DEFAULTS[name].default
    assert isinstance(value, bool)
    return value


def _default(name: str) -> int:
    value = _DEFAULTS[name].default
    assert isinstance(value, int)
    return value


def _max_rtt_default() -> float:
    value = DeadlineParams.model_fields["max_rtt_s"].default
    assert isinstance(value, float)
    return value


@dataclass(frozen=True)
class LiveConfig:
    """The coordinator settings the loop uses (defaults: :class:`CoordinatorConfig`'s).

    ``checkpoints``: round counts at which :class:`Snapshot` s are taken (they must be
    analysis rounds). ``legacy_confirm``: the previous confirmation behaviour
    (:class:`ConfirmationRun` ``legacy``), for the before/after baseline.
    ``probe_ref_s``: the profile's reference probe time. ``slowness``: the
    persistent-slowness test's settings (None: not run, the behaviour before it).
    ``pool_rounds``: ``confirm_pool_rounds`` (0: each confirmation attempt judged on its
    own rounds, the behaviour before evidence was pooled). ``alone``: the alone-round
    confirmation of slowness nominees (None: not run, the behaviour before it; the
    screening test's rejections then flag by themselves, as with
    ``SlownessConfig.direct_flags``).
    ``confirm_batching``: confirm the disjoint suspect groups of an analysis in shared
    rounds (:class:`~netcheck.analysis.confirm_batch.ConfirmationBatch`, as the
    coordinator's ``confirm_batching``); False = one group at a time, the behaviour
    before it. ``confirm_coins``: screening coins for the nodes outside the groups in
    confirmation rounds (as the coordinator's ``confirm_coins``); False = the behaviour
    before it. ``confirm_budget_rounds``: contention confirmation rounds per analysis,
    strongest nominations first (as the coordinator's; 0 = no bound, the behaviour
    before it, :mod:`netcheck.analysis.confirm_budget`). ``confirm_aging``: within it,
    the groups that waited longest first (their pairs' analyses left unserved in a row,
    as the coordinator does, :func:`~netcheck.analysis.confirm_budget.next_waits`);
    False = strongest first only, the behaviour before it (the baseline).
    ``capacity_*``: the capacity test's settings; ``capacity_legacy``: flag by the
    fixed-count rule before it (:data:`LEGACY_CAPACITY`) instead (:class:`Snapshot`
    ``capacity_legacy`` holds that rule's flags in every run). ``floors_for_q``: the
    capacity test's null rate, the screening slowness test's null rate and the alone
    nomination account for ``load_probability``, as the coordinator does
    (:func:`~netcheck.analysis.lateness.null_p0`,
    :func:`~netcheck.analysis.slowness.null_rate`, :func:`~netcheck.analysis.alone.trimmed`;
    session 9); False: calibrated for 1/2 whatever ``q`` (the behaviour before, the
    baseline; the same at ``q = 1/2``). ``deadline_rule``: how the simulated profile's
    deadline is set (:data:`DeadlineRule`, :func:`sim_profile`; ``derived`` since session
    13, the product's calibration rule on the class's honest spread; ``legacy`` the
    constants before); used when :class:`~netcheck.lab.sim.live.LiveSimulation` is given
    no profile.
    """

    full_every: int = field(default_factory=lambda: _default("screening_full_every"))
    load_probability: float = field(default_factory=lambda: _fdefault("screening_load_probability"))
    analyze_every: int = field(default_factory=lambda: _default("screening_analyze_every"))
    window_rounds: int = field(default_factory=lambda: _default("screening_window_rounds"))
    confirm_cycles: int = field(default_factory=lambda: _default("confirm_cycles"))
    confirm_max_cycles: int = field(default_factory=lambda: _default("confirm_max_cycles"))
    pool_rounds: int = field(default_factory=lambda: _default("confirm_pool_rounds"))
    confirm_batching: bool = field(default_factory=lambda: _bdefault("confirm_batching"))
    confirm_coins: bool = field(default_factory=lambda: _bdefault("confirm_coins"))
    confirm_budget_rounds: int = field(default_factory=lambda: _default("confirm_budget_rounds"))
    confirm_aging: bool = True
    capacity_window: int = field(default_factory=lambda: _default("capacity_window"))
    capacity_strikes: int = field(default_factory=lambda: _default("capacity_strikes"))
    capacity_p0: float = field(default_factory=lambda: _fdefault("capacity_p0"))
    capacity_alpha: float = field(default_factory=lambda: _fdefault("capacity_alpha"))
    capacity_legacy: bool = False
    floors_for_q: bool = True
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    confirm: ConfirmConfig = field(default_factory=ConfirmConfig)
    legacy_confirm: bool = False
    probe_ref_s: float = 0.005
    slowness: SlownessConfig | None = field(default_factory=SlownessConfig)
    alone: AloneConfig | None = field(default_factory=AloneConfig)
    deadline_rule: DeadlineRule = "derived"


def legacy_config() -> LiveConfig:
    """The detection behaviour before issue 13 (full rounds analysed, connected
    components, point-estimate floor, stop at the first passing look, no spending)."""
    return LiveConfig(
        detector=DetectorConfig(
            alpha=0.01,
            grouping="components",
            drop_full_rounds=False,
            mutual_fdr=0.0,
            mutual_min_rounds=2,
        ),
        confirm=ConfirmConfig(floor_test=False, member_level="bonferroni"),
        legacy_confirm=True,
        slowness=None,
        capacity_legacy=True,
        pool_rounds=0,
        alone=None,
        confirm_batching=False,
        confirm_coins=False,
        load_probability=0.5,
        deadline_rule="legacy",
    )


def sim_profile(
    population: Population, rng: np.random.Generator, *, deadline_rule: DeadlineRule,
    **deadline: float,
) -> Profile:  # fmt: skip
    """EMULATION: a profile whose deadline is calibrated on the population's honest
    nodes. Both rules draw the same 32 simulated rounds of every honest node loaded
    (the same draws from ``rng``), then:

    - ``legacy`` (as ``benchmarks/calibrate_profile.py`` did on hardware): ``t_ref_s`` =
      the spec's reference time, ``p99_s`` = the 99th percentile of those service times;
      ``a``, ``b``, ``slack_s``, ``max_rtt_s``: the :class:`DeadlineParams` defaults;
    - ``derived`` (as ``netcheck engine calibrate`` does): :func:`derive_deadline` of the
      honest nodes' *alone* service times pooled over nodes and rounds (a co-hosted
      node's time divided by ``1 + benign_coupling``: its partner was loaded too),
      ``rtt_jitter_s`` = the spec's, ``max_rtt_s`` = the :class:`DeadlineParams`
      default, ``coupling`` = :data:`SIM_COUPLING`;
    - ``card`` (as ``netcheck engine calibrate`` does on *one* trusted card of the class):
      :func:`derive_deadline` of 256 batch times of a card at the class's reference
      speed and the population's median noise (``t_ref_s exp(g + e)``, ``g`` the round
      effect, ``e ~ N(0, sigma_w)``; drawn from ``rng`` after the samples above), same
      RTT jitter, ``max_rtt_s`` and coupling as ``derived``. Cards slower or noisier
      than the calibration card are not in it, as on hardware.

    ``deadline_rule`` has no default: ``LiveConfig.deadline_rule`` (``"derived"`` since
    session 13) is the simulator's choice, and a caller names the rule it measures.
    Fields given in ``deadline`` replace the rule's. Raises ValueError for another rule.
    """
    if deadline_rule not in ("legacy", "derived", "card"):
        raise ValueError(
            f"deadline_rule must be 'legacy', 'derived' or 'card', got {deadline_rule!r}"
        )
    honest = population.farm_of < 0
    samples = [population.service_times(honest, rng)[honest] for _ in range(32)]
    if deadline_rule == "legacy":
        p99 = float(np.nanpercentile(np.concatenate(samples), 99)) if honest.any() else 0.0
        params = DeadlineParams(t_ref_s=population.spec.t_ref_s, p99_s=p99, **deadline)
    elif deadline_rule == "card":
        spec = population.spec
        card = spec.t_ref_s * np.exp(
            spec.round_sd * rng.standard_normal(256) + spec.sigma_w * rng.standard_normal(256)
        )
        derived = derive_deadline(
            card.tolist(), rtt_jitter_s=spec.rtt_jitter_s, max_rtt_s=_max_rtt_default(),
            coupling=SIM_COUPLING,
        )  # fmt: skip
        params = DeadlineParams(**{**derived.model_dump(), **deadline})
    else:
        if not honest.any():
            raise ValueError("the derived deadline needs honest nodes")
        coupled = 1.0 + population.spec.benign_coupling * (population.cohost_of[honest] >= 0)
        alone = np.concatenate([s / coupled for s in samples])
        derived = derive_deadline(
            alone[~np.isnan(alone)].tolist(), rtt_jitter_s=population.spec.rtt_jitter_s,
            max_rtt_s=_max_rtt_default(), coupling=SIM_COUPLING,
        )  # fmt: skip
        params = DeadlineParams(**{**derived.model_dump(), **deadline})
    return Profile(name="sim", engine="torch", model="synth:tiny", dtype="float32", batch_size=4,
                   prompt_len=16, max_new_tokens=4, deadline=params)  # fmt: skip


@dataclass(frozen=True)
class Snapshot:
    """State after ``rounds`` screening rounds (and their confirmations).

    ``shared_flags``: confirmed ``shared-backend`` flags so far (member keys);
    ``cleared``: cleared records so far; ``capacity``/``relay``/``slow``: nodes flagged
    so far (``slow``: the persistent-slowness test); ``capacity_legacy``: nodes the
    fixed-count capacity rule (:data:`LEGACY_CAPACITY`) would have flagged so far, on the
    same verdicts (the same-run baseline of the capacity test);
    ``suspects``: members of suspect groups at each analysis so far;
    ``confirmation_rounds``: spent so far; ``analyses``: analyses so far;
    ``unserved``: suspect groups left unconfirmed by ``confirm_budget_rounds`` so far
    (one per group and analysis).
    """

    rounds: int
    shared_flags: tuple[tuple[str, ...], ...]
    cleared: int
    capacity: frozenset[str]
    relay: frozenset[str]
    suspects: tuple[frozenset[str], ...]
    confirmation_rounds: int
    analyses: int
    slow: frozenset[str] = frozenset()
    capacity_legacy: frozenset[str] = frozenset()
    unserved: int = 0
