"""The worked examples and numbers of docs/protocol.md are what the code produces."""

from __future__ import annotations

import re
from pathlib import Path

from netcheck import __version__
from netcheck.engines.factoring_engine import FactoringEngine
from netcheck.engines.fingerprint import canonical_json, fingerprint_id
from netcheck.protocol.codec import encode_message
from netcheck.protocol.limits import node_receive_limits
from netcheck.protocol.messages import Auth, ProfileClaim

SPEC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
EXAMPLE = SPEC.split("#### §2.4.1", 1)[1].split("\n## ", 1)[0]


def annotated_bytes(text: str) -> bytes:
    """Bytes written as hex pairs and "quoted" UTF-8 text, as in the spec's example."""
    out = b""
    for quoted, hexpair in re.findall(r'"([^"]*)"|\b([0-9a-f]{2})\b', text):
        out += quoted.encode() if not hexpair else bytes.fromhex(hexpair)
    return out


def example_fingerprint() -> dict[str, str | int]:
    return dict(FactoringEngine(batch_size=16, prompt_len=24).fingerprint)


def test_fingerprint_example_and_its_id() -> None:
    """The example fingerprint is the factoring engine's canonical JSON, with that id."""
    fp = example_fingerprint()
    block = EXAMPLE.split("the fingerprint\n\n", 1)[1].split("\n\n", 1)[0]
    assert "".join(line.strip() for line in block.splitlines()).encode() == canonical_json(fp)
    assert f"canonical_json`, {len(canonical_json(fp))} bytes" in EXAMPLE
    assert f"fingerprint_id = {fingerprint_id(fp)}" in EXAMPLE


def test_claim_example_bytes() -> None:
    """The annotated 242 bytes are the claim's encoding, and the auth body prefix too."""
    claim = ProfileClaim("cpu-factoring", example_fingerprint(), f"netcheck/{__version__}")
    unsigned = encode_message(Auth(bytes(64), claim), omit=("signature",))
    block = EXAMPLE.split("encodes (§4.1) to these", 1)[1]
    layout, rest = block.split("\n\nso `enc(auth", 1)
    claim_bytes = annotated_bytes(layout.split("bytes:", 1)[1])
    assert f"these {len(claim_bytes)} bytes" in EXAMPLE
    prefix = annotated_bytes(rest.split("is `", 1)[1].split("`", 1)[0])
    assert prefix + claim_bytes == unsigned


def test_receive_cap_numbers() -> None:
    """§3.3's node receive cap examples match netcheck.protocol.limits."""
    for b, n in ((16, 64), (240, 128)):
        assert f"{node_receive_limits(b, n).max_message_bytes:,} bytes" in SPEC
