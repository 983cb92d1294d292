"""The capacity gate of ``POST /admin/screening`` (issue 10).

A screening run on a profile whose capacity margin is below 1.2 or unmeasured
(:func:`netcheck.capacity.capacity_status`) cannot tell two identities on one card apart.
The request body's fields:

* ``check_capacity`` (bool, sent by ``netcheck screen run``): refuse such a profile with
  409 Conflict unless ``capacity_override`` is given;
* ``capacity_override`` (str, the operator's reason, at most 500 characters): run anyway.

Whenever the profile is unsafe, the status (and the override, if any) is stored with
every round of the run as the schedule's context, so the record says under which
capacity the rounds were judged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from netcheck.capacity import CapacityStatus, calibrate_hint, capacity_status
from netcheck.config import Profile

if TYPE_CHECKING:
    from netcheck.coordinator.server import Coordinator

log = logging.getLogger("netcheck.coordinator")
MAX_REASON_CHARS = 500


def capacity_context(
    coord: Coordinator, profile_name: str, body: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The context to store with the run's rounds (None when the profile is safe or
    unknown; an unknown profile is refused later by the round itself).

    Raises:
        web.HTTPBadRequest: a malformed ``check_capacity`` or ``capacity_override``.
        web.HTTPConflict: ``check_capacity`` set, profile unsafe, no override.
    """
    check = body.get("check_capacity", False)
    override = body.get("capacity_override")
    if not isinstance(check, bool):
        raise web.HTTPBadRequest(text="check_capacity must be true or false")
    if override is not None and (
        not isinstance(override, str) or not override.strip() or len(override) > MAX_REASON_CHARS
    ):
        raise web.HTTPBadRequest(
            text=f"capacity_override must be a non-empty reason of at most "
            f"{MAX_REASON_CHARS} characters"
        )
    profile = coord.profiles.get(profile_name)
    if profile is None:
        return None
    # prog=None: this text goes to an HTTP client; how it calls netcheck (a venv path,
    # `python -m netcheck`, a script of its own) is not known here, so no command line
    # is spelt with a program name
    status = capacity_status(profile, prog=None)
    if status.safe:
        return None
    if override is None and check:
        raise web.HTTPConflict(text=refusal(profile, status))
    log.warning("screening on an unsafe profile%s: %s",
                " (operator override)" if override else "", status.message)  # fmt: skip
    return {
        "capacity": {
            "safe": False,
            "margin": status.margin,
            "status": status.message,
            "override": override.strip() if override else None,
        }
    }


def refusal(profile: Profile, status: CapacityStatus) -> str:
    """The 409 text for an unsafe ``profile`` without an override: its status, how to
    measure its capacity (:func:`netcheck.capacity.calibrate_hint` without a program name;
    the status of an unmeasured profile says it already) and how to run anyway, named as
    the CLI option (``screen run --override-capacity``) and as this request's JSON field
    (``capacity_override``), so neither a CLI user nor an API caller is handed a command
    line that assumes how they call netcheck."""
    measure = "" if status.margin is None else f" ({calibrate_hint(profile, None)})"
    return (
        f"refused: {status.message}{measure}. To run anyway, give a reason, recorded with "
        "every round: `screen run --override-capacity REASON`, or the request field "
        "`capacity_override`"
    )
