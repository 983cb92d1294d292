"""The factoring engine refuses an input whose answer cannot be sent: a prime (answer
``[1, n]``) or a factor >= 2**31 (token ids are below 2**31, docs/protocol.md §5.5).
Before: it answered, and the node's job task died in ``commitment`` with
LocalProtocolError ("Task exception was never retrieved"), sending the coordinator
nothing (a 24-digit prime from the coordinator, prompt_len 24 of cpu-factoring)."""

from __future__ import annotations

import pytest

from netcheck.engines.factoring_engine import FactoringEngine
from netcheck.errors import EngineError


def test_an_answer_that_is_no_token_id_is_an_engine_error() -> None:
    engine = FactoringEngine(batch_size=2, prompt_len=24)
    with pytest.raises(EngineError, match="does not fit a token id"):
        engine.generate(["100000000000000000000117", "15"])  # a prime > 2**31
    with pytest.raises(EngineError, match="does not fit a token id"):
        engine.generate(["15", str(3 * 2_147_483_659)])  # 3 x a prime above 2**31
    # a semiprime of the workload (factors below 2**30) still answers
    assert engine.generate(["15", str(1_073_741_827 * 1_073_741_831)]) == [
        [3, 5],
        [1_073_741_827, 1_073_741_831],
    ]
