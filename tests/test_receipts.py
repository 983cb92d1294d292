"""Offline receipt checks (netcheck.receipts): the function and `receipt verify`."""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.keys import public_key_text
from netcheck.protocol.jobs import commitment, sign_receipt, verify_receipt
from netcheck.receipts import (
    MAX_OUTPUTS_JSON_BYTES,
    outputs_json_limit,
    receipt,
    verify_stored_receipt,
)
from netcheck.records import NodeOutcome, NodeRecord, RoundPlan, Verdict
from netcheck.storage import Store

OUTPUTS = [[1, 2, 3], [4, 5, 6]]
ROUND = "r20260101T000000-abcdef"
SID = bytes(range(16))


@pytest.fixture
def signed() -> dict[str, str]:
    """A valid stored receipt, as hex/text fields."""
    key = Ed25519PrivateKey.generate()
    digest = commitment(OUTPUTS)
    return {
        "node_key": public_key_text(key),
        "session_id": SID.hex(),
        "round_id": ROUND,
        "commitment_hex": digest.hex(),
        "signature_hex": sign_receipt(key, SID, ROUND, digest).hex(),
    }


def _flip(hex_text: str) -> str:
    return ("0" if hex_text[0] != "0" else "1") + hex_text[1:]


def test_valid_receipt_verifies(signed):
    """A receipt signed by the node verifies with its public key alone."""
    check = verify_stored_receipt(**signed)
    assert check.valid and not check.outputs_checked


def test_valid_receipt_with_outputs(signed):
    """Outputs that hash to the commitment make the check stronger and still valid."""
    check = verify_stored_receipt(**signed, outputs=OUTPUTS)
    assert check.valid and check.outputs_checked


@pytest.mark.parametrize("field", ["commitment_hex", "session_id", "signature_hex"])
def test_tampered_field_fails(signed, field):
    """Changing one hex digit of the commitment, session id or signature is invalid."""
    assert not verify_stored_receipt(**{**signed, field: _flip(signed[field])}).valid


def test_tampered_round_id_fails(signed):
    """The receipt does not verify for another round id."""
    assert not verify_stored_receipt(**{**signed, "round_id": ROUND + "x"}).valid


def test_other_node_key_fails(signed):
    """Another node's public key does not verify the receipt."""
    other = public_key_text(Ed25519PrivateKey.generate())
    assert not verify_stored_receipt(**{**signed, "node_key": other}).valid


def test_recomputed_commitment_must_match(signed):
    """Outputs that differ from the committed ones make the receipt invalid."""
    check = verify_stored_receipt(**signed, outputs=[[1, 2, 3], [4, 5, 7]])
    assert not check.valid and "hash to" in check.reason


@pytest.mark.parametrize(
    "changes",
    [
        {"node_key": "ed25519:nope"},
        {"session_id": "zz"},
        {"commitment_hex": "00" * 31},
        {"signature_hex": "00" * 65},
    ],
)
def test_malformed_input_is_invalid(signed, changes):
    """Malformed keys or hex give an invalid check with a reason, never an exception."""
    check = verify_stored_receipt(**{**signed, **changes})
    assert not check.valid and "malformed" in check.reason


def test_malformed_outputs_are_invalid(signed):
    """Token ids outside [0, 2**31) cannot be recomputed: invalid."""
    assert not verify_stored_receipt(**signed, outputs=[[-1]]).valid


def _args(signed: dict[str, str]) -> list[str]:
    return [
        "verify",
        "--node-key",
        signed["node_key"],
        "--session-id",
        signed["session_id"],
        "--round-id",
        signed["round_id"],
        "--commitment",
        signed["commitment_hex"],
        "--signature",
        signed["signature_hex"],
    ]


def test_cli_valid_exits_0(signed):
    """`receipt verify` with a valid receipt prints valid and exits 0."""
    result = CliRunner().invoke(receipt, _args(signed))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("valid:")


def test_cli_invalid_exits_1(signed):
    """A tampered commitment exits 1 and says INVALID."""
    args = _args({**signed, "commitment_hex": _flip(signed["commitment_hex"])})
    result = CliRunner().invoke(receipt, args)
    assert result.exit_code == 1
    assert "INVALID" in result.output


def test_cli_outputs_json(signed, tmp_path: Path):
    """--outputs-json recomputes the commitment: matching outputs 0, others 1."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"outputs": OUTPUTS}))
    bad.write_text(json.dumps([[9, 9, 9], [4, 5, 6]]))
    runner = CliRunner()
    ok = runner.invoke(receipt, [*_args(signed), "--outputs-json", str(good)])
    assert ok.exit_code == 0 and "outputs match" in ok.output
    assert runner.invoke(receipt, [*_args(signed), "--outputs-json", str(bad)]).exit_code == 1


def test_cli_needs_fields_or_db(signed):
    """Without the receipt fields or --from-db the command is a usage error (exit 2)."""
    result = CliRunner().invoke(
        receipt, ["verify", "--node-key", signed["node_key"], "--round-id", ROUND]
    )
    assert result.exit_code == 2


def _store_result(url: str, signed: dict[str, str], *, outputs: list[list[int]]) -> None:
    store = Store(url)
    try:
        store.record_plan(RoundPlan(ROUND, "p", 2, 3, (), ()), started_at=1.0)
        outcome = NodeOutcome(signed["node_key"], Verdict.PASS, "ok", 0.5, 0, 0)
        record = NodeRecord(
            session_id=bytes.fromhex(signed["session_id"]),
            commitment=bytes.fromhex(signed["commitment_hex"]),
            signature=bytes.fromhex(signed["signature_hex"]),
            outputs=outputs,
        )
        store.record_outcome(ROUND, [outcome], {signed["node_key"]: record})
    finally:
        store.close()


def test_store_result_row(signed, tmp_path: Path):
    """Store.result_row returns the stored hex fields and outputs, or None."""
    url = f"sqlite:///{tmp_path / 'n.db'}"
    _store_result(url, signed, outputs=OUTPUTS)
    with Store(url) as store:
        row = store.result_row(ROUND, signed["node_key"])
        assert row is not None
        assert row["signature"] == signed["signature_hex"] and row["outputs"] == OUTPUTS
        assert store.result_row(ROUND, "ed25519:other") is None
        assert store.round_shape(ROUND) == (2, 3) and store.round_shape("nope") is None


def test_cli_from_db(signed, tmp_path: Path):
    """--from-db reads the row and checks signature and outputs; altered outputs fail."""
    good, bad = tmp_path / "good.db", tmp_path / "bad.db"
    _store_result(f"sqlite:///{good}", signed, outputs=OUTPUTS)
    _store_result(f"sqlite:///{bad}", signed, outputs=[[0, 0, 0], [4, 5, 6]])
    runner = CliRunner()
    base = ["verify", "--round-id", ROUND, "--node-key", signed["node_key"], "--from-db"]
    ok = runner.invoke(receipt, [*base, f"sqlite:///{good}"])
    assert ok.exit_code == 0, ok.output
    assert "outputs match" in ok.output
    assert runner.invoke(receipt, [*base, f"sqlite:///{bad}"]).exit_code == 1


def test_cli_from_db_missing(signed, tmp_path: Path):
    """A missing database file or row is reported, not created or guessed."""
    runner = CliRunner()
    base = ["verify", "--round-id", ROUND, "--node-key", signed["node_key"], "--from-db"]
    missing = tmp_path / "none.db"
    assert runner.invoke(receipt, [*base, f"sqlite:///{missing}"]).exit_code == 2
    assert not missing.exists()
    url = f"sqlite:///{tmp_path / 'n.db'}"
    _store_result(url, signed, outputs=OUTPUTS)
    other = public_key_text(Ed25519PrivateKey.generate())
    result = runner.invoke(
        receipt, ["verify", "--round-id", ROUND, "--node-key", other, "--from-db", url]
    )
    assert result.exit_code == 1 and "no result" in result.output


def test_identity_key_forged_receipt_invalid(signed):
    """A receipt 'signed' R = identity, S = 0 under the identity key is INVALID in the CLI."""
    identity = bytes.fromhex("01" + "00" * 31)
    forged = {
        **signed,
        "node_key": "ed25519:" + base64.urlsafe_b64encode(identity).rstrip(b"=").decode(),
        "signature_hex": (identity + bytes(32)).hex(),
    }
    assert not verify_stored_receipt(**forged).valid
    assert not verify_receipt(identity, identity + bytes(32), SID, ROUND, bytes(32))
    result = CliRunner().invoke(receipt, _args(forged))
    assert result.exit_code == 1
    assert "INVALID" in result.output and "small-order" in result.output


def test_cli_config_reads_the_coordinators_database(signed, tmp_path: Path, monkeypatch):
    """--config takes the database from a coordinator config, relative to its folder."""
    from netcheck.cli import main

    conf = tmp_path / "configs"
    conf.mkdir()
    _store_result(f"sqlite:///{conf / 'netcheck.db'}", signed, outputs=OUTPUTS)
    cfg = conf / "coordinator.toml"
    cfg.write_text(
        'identity_key = "keys/c.pem"\ndatabase = "sqlite:///netcheck.db"\n'
        'admin_token = "a-long-enough-random-admin-token-0123"\nprofiles = ["cpu-tiny"]\nopen_enrollment = true\n'
    )
    monkeypatch.chdir(tmp_path / "..")  # not the config's folder
    args = ["receipt", "verify", "--round-id", ROUND, "--node-key", signed["node_key"]]
    ok = CliRunner().invoke(main, [*args, "--config", str(cfg)])
    assert ok.exit_code == 0, ok.output
    assert "outputs match" in ok.output
    both = CliRunner().invoke(main, [*args, "--config", str(cfg), "--from-db", "sqlite:///x.db"])
    assert both.exit_code == 2 and "not both" in both.output


def _verify_from_db(url: str, node_key: str) -> tuple[int, str]:
    base = ["verify", "--round-id", ROUND, "--node-key", node_key, "--from-db", url]
    result = CliRunner().invoke(receipt, base)
    return result.exit_code, result.output


def test_cli_from_db_reads_a_read_only_copy(signed) -> None:
    """An auditor's copy of the database on a read-only mount (file and folder not
    writable) is read: the command opens it read-only (it failed with 'unable to open
    database file'; the workaround was a ?immutable=1&uri=true URL)."""
    from readonly_support import as_reader, read_only_folder

    def fill(folder: Path) -> None:
        _store_result(f"sqlite:///{folder / 'n.db'}", signed, outputs=OUTPUTS)

    with read_only_folder(fill) as folder:
        code, output = as_reader(
            _verify_from_db, f"sqlite:///{folder / 'n.db'}", signed["node_key"]
        )
    assert code == 0, output
    assert "outputs match" in output


def _padded(path: Path, size: int) -> Path:
    """A valid outputs file (OUTPUTS), padded with spaces to ``size`` bytes."""
    text = json.dumps({"outputs": OUTPUTS})
    path.write_text(text + " " * (size - len(text)))
    return path


def test_outputs_json_bounded_by_the_stored_rounds_shape(signed, tmp_path: Path):
    """With --from-db, an --outputs-json larger than what the round's shape (B = 2 rows
    of at most 3 ids) can hold as JSON is refused naming the file and the limit; one
    byte less is read. It accepted up to 256 MB whatever the round."""
    url = f"sqlite:///{tmp_path / 'n.db'}"
    _store_result(url, signed, outputs=OUTPUTS)
    limit = outputs_json_limit((2, 3))
    assert limit == 2 * (3 * 24 + 64) + 64 * 1024
    base = ["verify", "--round-id", ROUND, "--node-key", signed["node_key"], "--from-db", url]
    runner = CliRunner()
    fits = _padded(tmp_path / "fits.json", limit)
    ok = runner.invoke(receipt, [*base, "--outputs-json", str(fits)])
    assert ok.exit_code == 0 and "outputs match" in ok.output, ok.output
    big = _padded(tmp_path / "big.json", limit + 1)
    result = runner.invoke(receipt, [*base, "--outputs-json", str(big)])
    assert result.exit_code == 2
    assert f"{big}: larger than {limit} bytes" in result.output
    assert "batch size 2 x 3 new tokens" in result.output


def test_outputs_json_bounded_by_profile(signed, tmp_path: Path):
    """--profile gives the shape when the receipt's fields come from the options."""
    limit = outputs_json_limit((16, 64))  # configs/profiles/cpu-tiny.toml
    big = _padded(tmp_path / "big.json", limit + 1)
    args = [*_args(signed), "--profile", "cpu-tiny", "--outputs-json", str(big)]
    result = CliRunner().invoke(receipt, args)
    assert result.exit_code == 2 and f"larger than {limit} bytes" in result.output
    fits = _padded(tmp_path / "fits.json", limit)
    args = [*_args(signed), "--profile", "cpu-tiny", "--outputs-json", str(fits)]
    assert CliRunner().invoke(receipt, args).exit_code == 0


def test_outputs_json_hard_cap_without_a_shape(signed, tmp_path: Path):
    """Without a shape the hard cap (64 MiB) applies, and the error says how to bound it."""
    big = tmp_path / "big.json"
    with big.open("wb") as f:  # sparse: no disk used
        f.truncate(MAX_OUTPUTS_JSON_BYTES + 1)
    result = CliRunner().invoke(receipt, [*_args(signed), "--outputs-json", str(big)])
    assert result.exit_code == 2
    assert f"larger than {MAX_OUTPUTS_JSON_BYTES} bytes, the hard cap" in result.output


def test_outputs_json_read_is_bounded(signed, tmp_path: Path):
    """A pipe that reports no size is read only up to the limit, not to its end: the
    writer finds the reader gone (it read the whole 1 MiB, then failed on the JSON)."""
    fifo = tmp_path / "outputs.fifo"
    os.mkfifo(fifo)
    outcome: dict[str, object] = {}

    def write() -> None:
        try:
            with fifo.open("wb") as f:
                for _ in range(64):
                    f.write(b" " * 16384)
            outcome["wrote"] = "all"
        except BrokenPipeError:
            outcome["wrote"] = "stopped"

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    args = [*_args(signed), "--profile", "cpu-tiny", "--outputs-json", str(fifo)]
    result = CliRunner().invoke(receipt, args)
    writer.join(10)
    assert result.exit_code == 2 and "larger than" in result.output, result.output
    assert outcome.get("wrote") == "stopped"
