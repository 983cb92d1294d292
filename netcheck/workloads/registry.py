"""Workloads by name: :func:`get_workload` (``llm`` or ``factoring``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from netcheck.workloads.base import LlmWorkload, Workload
from netcheck.workloads.factoring import FactoringWorkload

if TYPE_CHECKING:
    from netcheck.config import Profile


def get_workload(profile_or_name: Profile | str) -> Workload:
    """The workload of a profile (its ``workload`` field) or by name.

    Raises:
        ValueError: unknown workload name.
    """
    name = (
        profile_or_name
        if isinstance(profile_or_name, str)
        else getattr(profile_or_name, "workload", "llm")
    )
    if name == "llm":
        chars = None if isinstance(profile_or_name, str) else profile_or_name.prompt_chars
        return LlmWorkload(chars)
    if name == "factoring":
        return FactoringWorkload()
    raise ValueError(f"unknown workload {name!r} (use llm or factoring)")
