"""Analysis: verdicts per node per round, timing models and detectors (pure functions)."""
