"""Workloads: what nodes are asked to compute (seeded prompts, canaries and decoys alike)."""

from netcheck.workloads.prompts import PromptGenerator

__all__ = ["PromptGenerator"]
