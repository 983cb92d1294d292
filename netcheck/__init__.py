"""netcheck: a validator for untrusted GPU providers.

A coordinator holds signed, encrypted websocket sessions with nodes and runs
validation rounds: each node receives, at the same instant, a distinct mixed batch
of B prompts in which a secret few canaries (answers computed on trusted hardware)
hide among decoys. See ``docs/design.md`` for the module map.
"""

__version__ = "0.1.0"
