"""Workloads: what nodes are asked to compute (canaries and decoys alike).

``get_workload(profile)`` gives the profile's :class:`Workload`: ``"llm"`` (seeded
natural-language prompts) or ``"factoring"`` (seeded semiprimes with known factors).
"""

from netcheck.workloads.base import InputStream, LlmWorkload, WorkItem, Workload
from netcheck.workloads.prompts import PromptGenerator
from netcheck.workloads.registry import get_workload

__all__ = [
    "InputStream",
    "LlmWorkload",
    "PromptGenerator",
    "WorkItem",
    "Workload",
    "get_workload",
]
