"""A model-cache marker file (``netcheck-synth.json``, ``netcheck-package.json``) that is
JSON but not an object (truncated to ``[]``, overwritten with a string) is an
EngineError naming it, or ignored where only a label is read. Before: TypeError
("list indices must be integers") out of the cache check, a traceback from `node run`,
`doctor`, `engine selftest` and `reference build` loading the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from netcheck.engines.base import model_identity
from netcheck.engines.packaged import ensure_packaged_model
from netcheck.engines.synth import ensure_synth_model
from netcheck.errors import EngineError


@pytest.mark.parametrize("text", ["[]", '"tiny"', "1", "[" * 5000 + "]" * 5000])
def test_a_marker_that_is_not_an_object(tmp_path: Path, text: str) -> None:
    synth = tmp_path / "tiny"
    synth.mkdir()
    (synth / "netcheck-synth.json").write_text(text)
    with pytest.raises(EngineError, match="cannot read .*netcheck-synth.json"):
        ensure_synth_model("tiny", tmp_path)
    assert model_identity(synth) == "tiny"  # the folder's name, as without a marker

    package = tmp_path / "package-smollm2-135m"
    package.mkdir()
    (package / "netcheck-package.json").write_text(text)
    with pytest.raises(EngineError, match="cannot read .*netcheck-package.json"):
        ensure_packaged_model("smollm2-135m", tmp_path)
