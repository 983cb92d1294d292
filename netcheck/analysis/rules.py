"""The rule of each flag kind in plain words, with its numbers and units (pure).

Every flag carries a ``statistic`` and a ``threshold``; every rule text ends the same
way, so the two numbers read the same on every flag:

    Statistic: <what was measured, unit>. Threshold: <what it was held to>; flagged
    when the statistic is <at least | above | below> the threshold.

:func:`rule_text` builds the text from the parameters stored in a flag's evidence (and
the flag's threshold), so the evidence builders (:mod:`netcheck.analysis.evidence`,
:mod:`netcheck.analysis.failures`) store it and the dashboard can show it for flags
stored before the wording changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _pct_from_log(x: Any, default: float) -> float:
    v = x if isinstance(x, int | float) and math.isfinite(x) else default
    return (math.exp(v) - 1.0) * 100.0


def _num(x: Any, default: float) -> float:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else default


def _count(x: Any) -> str:
    return str(int(x)) if isinstance(x, int | float) and math.isfinite(x) else "the set number of"


def tail(statistic: str, threshold: str, direction: str) -> str:
    """The common last sentence: ``direction`` is ``at least``, ``above`` or ``below``."""
    return (
        f"Statistic: {statistic}. Threshold: {threshold}; flagged when the statistic is "
        f"{direction} the threshold."
    )


def shared_backend(effect_floor_log: Any) -> str:
    """Rule of ``shared-backend`` flags (confirmation rounds, netcheck.analysis.confirm)."""
    pct = _pct_from_log(effect_floor_log, math.log(1.25))
    return (
        "Screening rounds showed these nodes slowing down when the others were loaded, so "
        "extra confirmation rounds loaded them all together and each one alone. A node "
        f"counts as slowed by the others when its service time with them loaded is more "
        f"than {pct:.0f}% above its time alone, and a one-sided Welch test says so with a "
        "p-value below the threshold. With more than two nodes each pair is then tested "
        "alone the same way; the flag names nodes that all slow each other, as identities "
        "served by one shared GPU do. "
        + tail("the largest p-value among the flagged nodes' tests",
               "the p-value each test had to stay below", "below")
    )  # fmt: skip


def declared_host(effect_floor_log: Any, host: Any) -> str:
    """Rule of ``declared-host`` flags: a confirmed slowdown between identities that
    their operator declared to share one host (``node_hosts``)."""
    pct = _pct_from_log(effect_floor_log, math.log(1.25))
    where = f"host {host!s}" if isinstance(host, str) and host else "one host"
    return (
        f"These identities are declared to share {where}. Identities on one host are "
        "expected to slow each other a little (shared CPU, PCIe and network), far less "
        f"than {pct:.0f}%. Confirmation rounds loaded them together and each alone: each "
        f"one's service time with the others loaded is more than {pct:.0f}% above its time "
        "alone (one-sided Welch test, p-value below the threshold), as when identities "
        "share one GPU. Declared, so not reported as a proxy farm; but a host that claims "
        "one card per identity should not slow them like one card. "
        + tail("the largest p-value among the flagged nodes' tests",
               "the p-value each test had to stay below", "below")
    )  # fmt: skip


def capacity(window: Any, strikes: Any) -> str:
    """Rule of ``capacity`` flags of the fixed-count rule (stored before the capacity
    test, :func:`capacity_test`)."""
    w = _count(window)
    return (
        f"The node's answers came after the round's deadline, or not at all, in at least "
        f"{_count(strikes)} of its last {w} rounds: it cannot serve its batch in time. "
        + tail(
            f"late or missing rounds among the last {w}",
            "the late or missing rounds that raise a flag",
            "at least",
        )
    )


def capacity_test(window: Any, p0: Any, alpha: Any, min_strikes: Any) -> str:
    """Rule of ``capacity`` flags raised by the capacity test
    (netcheck.analysis.lateness)."""
    pct = _num(p0, 0.02) * 100.0
    return (
        "The node's answers came after the round's deadline, or not at all, more often "
        f"than a node of its class allows: such a node is late or missing in at most "
        f"{pct:g}% of its rounds. Each time one of its rounds ends late or missing, its "
        f"last {_count(window)} rounds judged against the deadline are tested (one-sided "
        "binomial test; that newest round is not counted as evidence, since it is why the "
        f"test runs). At least {_count(min_strikes)} late or missing rounds are needed; "
        "the level is split across the tests of the node's whole life so that it sums to "
        f"{_num(alpha, 0.03):g}: a node late in {pct:g}% of its rounds is flagged with at "
        "most that probability, however long it runs. "
        + tail("the test's p-value", "the p-value this test had to stay below", "at most")
    )


def result_sharing() -> str:
    """Rule of ``result-sharing`` flags (netcheck.analysis.answers)."""
    return (
        "Two nodes were given different prompts in the same round but returned the same "
        "commitment or identical output rows, which nodes computing their own batches "
        "never do: one answered with the other's results. "
        + tail("identical output rows (1 for an identical commitment)", "1 row", "at least")
    )


def relay(floor_s: Any, mad_k: Any, min_rounds: Any) -> str:
    """Rule of ``relay`` flags (netcheck.analysis.screening.relay_check)."""
    floor_ms = _num(floor_s, 0.0) * 1e3
    return (
        "The node answered the coordinator's timing probe later than its plain network "
        "echo by more than the probe's own compute time, in at least "
        f"{_count(min_rounds)} rounds: a relayed probe pays an extra network trip. The "
        f"allowed extra delay is {floor_ms:.0f} ms plus {_num(mad_k, 0.0):g} times the "
        "spread (median absolute deviation) of the extra delays. Pending instead when "
        "the node answered echoes but no probe correctly in that many rounds (statistic "
        "= such rounds). "
        + tail("the median extra delay, in seconds", "the delay allowed, in seconds", "above")
    )


def answer_failure(window: Any, strikes: Any) -> str:
    """Rule of ``answer-failure`` flags (netcheck.analysis.failures)."""
    w = _count(window)
    return (
        f"The node's answers failed the canary check (wrong tokens, or a malformed answer) "
        f"in at least {_count(strikes)} of its last {w} checked rounds: it does not run "
        "the model it claims, or runs it wrongly. "
        + tail(
            f"failed rounds among the last {w} checked",
            "the failed rounds that raise a flag",
            "at least",
        )
    )


def slow(floor: Any, alpha: Any, min_rounds: Any, null_rate: Any = None) -> str:
    """Rule of ``slow`` flags (netcheck.analysis.slowness); ``null_rate``: the sign
    test's rate under ``H0`` where it is not 1/2 (screening load probability above 1/2)."""
    f = _num(floor, 1.25)
    rate = _num(null_rate, 0.5)
    if rate == 0.5:
        test = (
            f"was more often above {f:g} times the profile's reference time t_ref (one "
            "card of the claimed class, one batch) than below it"
        )
        share = "in at least half of its rounds"
    else:
        test = (
            f"was above {f:g} times the profile's reference time t_ref (one card of the "
            f"claimed class, one batch) in more than {rate:.3g} of them (the share of its "
            "screening rounds that also load any one other node)"
        )
        share = f"in at least {1.0 - rate:.3g} of its rounds"
    return (
        "In the screening rounds that loaded it, the node's service time (result arrival "
        f"minus release minus its echo round trip) {test}, by a one-sided sign test (rounds "
        "without a result count as above). An honest card of the class, even slowed a "
        f"little by a co-hosted neighbour in some rounds, takes at most {f:g} t_ref {share}; "
        "identities sharing one card, each held back to the card's slowest answer "
        "(padding), do not. The test is repeated at every analysis; its level is split "
        f"across the repeats so that it sums to {_num(alpha, 0.01):g} over all of them "
        f"(at least {_count(min_rounds)} rounds per test). "
        + tail("the sign test's p-value", "the p-value this analysis had to stay below",
               "at most")
    )  # fmt: skip


def slow_alone(floor: Any, alpha: Any) -> str:
    """Rule of ``slow`` flags confirmed on rounds loading the node alone
    (netcheck.analysis.alone)."""
    f = _num(floor, 1.2)
    return (
        "After the screening rounds had shown it slow more often than not, the node was "
        "sent rounds in which it was the only node loaded. In those rounds its service time "
        "(result arrival minus release minus its echo round trip) was more often above "
        f"{f:g} times the profile's reference time t_ref (one card of the claimed class, "
        "one batch) than below it, by a one-sided sign test (rounds without a result count "
        "as above; earlier rounds that loaded only this node count too). Alone, with no "
        f"neighbour to slow it, an honest card of the class takes at most {f:g} t_ref in at "
        "least half of its rounds; identities sharing one card, each held back to the "
        "card's slowest answer (padding), do not. The test is repeated when the node is "
        "picked again; its level is split across the repeats so that it sums to "
        f"{_num(alpha, 0.01):g} over all of them. "
        + tail("the sign test's p-value", "the p-value this test had to stay below",
               "at most")
    )  # fmt: skip


def rule_text(kind: str, evidence: Mapping[str, Any], threshold: Any) -> str | None:
    """The rule of a stored flag of ``kind`` from its evidence's parameters and its
    ``threshold``; None for a kind this module does not know."""
    conf = evidence.get("confirmation")
    if kind == "shared-backend":
        floor = conf.get("effect_floor") if isinstance(conf, Mapping) else None
        return shared_backend(floor)
    if kind == "declared-host":
        floor = conf.get("effect_floor") if isinstance(conf, Mapping) else None
        return declared_host(floor, evidence.get("declared_host"))
    if kind == "capacity" and "p0" in evidence:
        return capacity_test(evidence.get("window"), evidence.get("p0"),
                             evidence.get("alpha"), evidence.get("min_strikes"))  # fmt: skip
    if kind == "capacity":  # flags of the fixed-count rule before the test
        return capacity(evidence.get("window"), threshold)
    if kind == "result-sharing":
        return result_sharing()
    if kind == "relay":
        return relay(evidence.get("floor_s"), evidence.get("mad_k"), evidence.get("min_rounds"))
    if kind == "answer-failure":
        return answer_failure(evidence.get("window"), threshold)
    if kind == "slow" and evidence.get("stage") == "alone":
        return slow_alone(evidence.get("floor"), evidence.get("alpha"))
    if kind == "slow":
        return slow(evidence.get("floor"), evidence.get("alpha"), evidence.get("min_rounds"),
                    evidence.get("null_rate"))  # fmt: skip
    return None
