"""Offline check of signed result receipts (docs/protocol.md §7.2, §7.3).

A receipt is the node's Ed25519 signature (RFC 8032) over

    "netcheck/1 receipt\\0" || lp(session_id) || lp(round_id) || lp(node_key) || lp(commitment)

and the commitment is ``SHA-256("netcheck/1 commitment\\0" || pack_value(outputs))``. So an
analyst holding only the node's public key can check that this node returned exactly
these outputs in that session and round, without trusting netcheck's coordinator or
database: :func:`verify_stored_receipt` and the ``netcheck receipt verify`` command.

The ``receipt`` click group is registered by ``netcheck/cli.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from netcheck.errors import KeyFileError, LocalProtocolError, NetcheckError
from netcheck.keys import parse_public_key, public_key_bytes, public_key_text
from netcheck.protocol.jobs import SESSION_ID_BYTES, commitment, verify_receipt

MAX_OUTPUTS_JSON_BYTES = 64 * 1024 * 1024
"""Hard cap on an ``--outputs-json`` file (64 MiB, the largest ``max_message_bytes`` a
coordinator accepts), also when the round's shape is not known."""
JSON_BYTES_PER_TOKEN = 24
"""JSON bytes one token id may take: 10 digits (ids are below 2**31), a comma and a
space, or, pretty-printed, a comma, a newline and up to 12 spaces of indentation."""
JSON_BYTES_PER_ROW = 64
"""JSON bytes one output row may take besides its ids: brackets, separator, indentation."""
JSON_FRAMING_BYTES = 64 * 1024
"""Room for the rest of a file: the outer list, or a saved receipt object's other keys
(``round_id``, ``node_key``, hex fields, timings) around its ``outputs``."""


@dataclass(frozen=True)
class ReceiptCheck:
    """Result of :func:`verify_stored_receipt`.

    Attributes:
        valid: True iff the signature verifies and, when outputs were given, they hash
            to the commitment.
        reason: one line saying what was checked, or what failed.
        outputs_checked: True when outputs were given and recomputed into the commitment.
    """

    valid: bool
    reason: str
    outputs_checked: bool = False


def _hex(name: str, text: str, size: int) -> bytes:
    try:
        value = bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError(f"{name} is not hex") from None
    if len(value) != size:
        raise ValueError(f"{name} must be {size} bytes ({2 * size} hex digits), got {len(value)}")
    return value


def verify_stored_receipt(
    node_key: str,
    session_id: str,
    round_id: str,
    commitment_hex: str,
    signature_hex: str,
    outputs: Sequence[Sequence[int]] | None = None,
) -> ReceiptCheck:
    """Check a stored result's receipt with only the node's public key (§7.3).

    Args:
        node_key: the node's public key, text form ``ed25519:<43 base64url chars>``.
        session_id: 16-byte session id, hex (32 digits), as stored.
        round_id: the round id (str).
        commitment_hex: 32-byte commitment, hex (64 digits).
        signature_hex: 64-byte Ed25519 signature, hex (128 digits).
        outputs: optional token ids, one list per prompt; if given, the commitment is
            recomputed from them (§7.2) and must match ``commitment_hex``.

    Returns:
        A :class:`ReceiptCheck`. Never raises for bad input: malformed keys, hex or
        outputs make the check invalid with a reason.
    """
    try:
        key = public_key_bytes(parse_public_key(node_key))
        sid = _hex("session id", session_id, SESSION_ID_BYTES)
        digest = _hex("commitment", commitment_hex, 32)
        signature = _hex("signature", signature_hex, 64)
    except (KeyFileError, ValueError) as exc:
        return ReceiptCheck(False, f"malformed input: {exc}")
    if not verify_receipt(key, signature, sid, round_id, digest):
        return ReceiptCheck(
            False,
            "signature does not verify: not this node's receipt for this session, round "
            "and commitment",
        )
    if outputs is None:
        return ReceiptCheck(True, "signature valid; outputs not given, commitment not recomputed")
    try:
        recomputed = commitment(outputs)
    except (LocalProtocolError, TypeError) as exc:
        return ReceiptCheck(False, f"outputs malformed: {exc}", outputs_checked=True)
    if recomputed != digest:
        return ReceiptCheck(
            False,
            f"signature valid, but the outputs hash to {recomputed.hex()}, not the signed "
            "commitment",
            outputs_checked=True,
        )
    return ReceiptCheck(True, "signature valid; outputs match the commitment", True)


def outputs_json_limit(shape: tuple[int, int] | None) -> int:
    """Most bytes an ``--outputs-json`` file may hold for a round of ``shape``
    ``(batch_size, max_new_tokens)``: B rows of at most ``max_new_tokens`` ids at
    :data:`JSON_BYTES_PER_TOKEN` each, :data:`JSON_BYTES_PER_ROW` per row and
    :data:`JSON_FRAMING_BYTES`; never above :data:`MAX_OUTPUTS_JSON_BYTES` (the cap also
    when ``shape`` is None). For B = 240, 32 new tokens: 265 216 bytes."""
    if shape is None:
        return MAX_OUTPUTS_JSON_BYTES
    batch, tokens = shape
    need = batch * (tokens * JSON_BYTES_PER_TOKEN + JSON_BYTES_PER_ROW) + JSON_FRAMING_BYTES
    return min(MAX_OUTPUTS_JSON_BYTES, need)


def _load_outputs(path: Path, shape: tuple[int, int] | None) -> list[list[int]]:
    """The token-id lists of an ``--outputs-json`` file, reading at most
    :func:`outputs_json_limit` bytes (plus one, to tell a larger file).

    Raises:
        click.BadParameter: larger than the limit (file and limit named), unreadable,
            not JSON, or not a list of lists.
    """
    limit = outputs_json_limit(shape)
    why = (
        f"the most the outputs of a round of batch size {shape[0]} x {shape[1]} new tokens "
        "can take as JSON"
        if shape is not None
        else "the hard cap (give --profile, --from-db or --config to bound it by the round's shape)"
    )
    try:
        with path.open("rb") as f:  # bounded: a FIFO or /dev/zero reports no size
            raw = f.read(limit + 1)
    except OSError as exc:
        raise click.BadParameter(f"{path}: not readable ({exc.strerror or exc})") from None
    if len(raw) > limit:
        raise click.BadParameter(
            f"{path}: larger than {limit} bytes, {why}", param_hint="--outputs-json"
        )
    try:
        data: Any = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise click.BadParameter(f"{path}: not readable JSON ({exc})") from None
    if isinstance(data, dict) and "outputs" in data:
        data = data["outputs"]
    if not isinstance(data, list) or not all(isinstance(row, list) for row in data):
        raise click.BadParameter(f"{path}: expected a JSON list of token-id lists")
    return data


def _row_from_db(
    url: str, round_id: str, node_key: str
) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """The stored result of ``node_key`` in ``round_id`` and the round's declared shape."""
    from netcheck.errors import ConfigError
    from netcheck.storage import Store
    from netcheck.storage.urls import missing_sqlite_file

    try:
        missing_file = missing_sqlite_file(url)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--from-db") from None
    if missing_file is not None:
        raise click.BadParameter(f"no database file at {missing_file}", param_hint="--from-db")
    canonical = public_key_text(parse_public_key(node_key))
    store = Store(url, read_only=True)  # an auditor's copy may sit on a read-only mount
    try:
        row = store.result_row(round_id, canonical)
        shape = store.round_shape(round_id)
    finally:
        store.close()
    if row is None:
        raise click.ClickException(f"no result of node {canonical} in round {round_id!r}")
    missing = [k for k in ("session_id", "commitment", "signature") if not row.get(k)]
    if missing:
        raise click.ClickException(
            f"the stored result has no {', '.join(missing)} (no signed result was received)"
        )
    return row, shape


@click.group()
def receipt() -> None:
    """Check signed result receipts offline (docs/protocol.md §7.3)."""


@receipt.command("verify")
@click.option("--node-key", required=True, help="Node public key, ed25519:<base64url>.")
@click.option("--round-id", required=True, help="Round id the result belongs to.")
@click.option("--session-id", help="Session id, 32 hex digits.")
@click.option("--commitment", "commitment_hex", help="Commitment, 64 hex digits.")
@click.option("--signature", "signature_hex", help="Receipt signature, 128 hex digits.")
@click.option(
    "--outputs-json",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON list of token-id lists (or {'outputs': ...}); recomputes the commitment. "
    "Read up to what the round's shape can hold (batch size x max new tokens, from the "
    "database or --profile), 64 MiB at most.",
)
@click.option(
    "--profile",
    "profile_name",
    metavar="NAME",
    help="Profile of the receipt's round (name in configs/profiles or a .toml path): its "
    "batch size and max new tokens bound what --outputs-json may hold. Not needed with "
    "--from-db or --config (the round's own shape is read).",
)
@click.option(
    "--from-db",
    metavar="URL",
    help="Read session id, commitment, signature and outputs from this database "
    "(SQLAlchemy URL, e.g. sqlite:///configs/netcheck.db, relative to the current folder) "
    "instead of the options.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Coordinator config: read the receipt from its database (the config's "
    "`database`, resolved against the config's folder like every other command), as "
    "--from-db does.",
)
def verify_command(
    node_key: str,
    round_id: str,
    session_id: str | None,
    commitment_hex: str | None,
    signature_hex: str | None,
    outputs_json: Path | None,
    profile_name: str | None,
    from_db: str | None,
    config_path: Path | None,
) -> None:
    """Verify a result receipt with only the node's public key.

    The receipt's fields come from the options, or from a database: --from-db URL, or
    --config coordinator.toml for the coordinator's own database.

    Exit status 0: valid; 1: invalid (the reason is printed); 2: usage error; 3: the
    config cannot be read.
    """
    if config_path is not None:
        if from_db is not None:
            raise click.UsageError("give --config or --from-db, not both")
        from netcheck.config import load_coordinator_config

        from_db = load_coordinator_config(config_path).database
    outputs: Sequence[Sequence[int]] | None = None
    shape: tuple[int, int] | None = None
    if profile_name is not None:
        from netcheck.config import load_profile

        profile = load_profile(profile_name)
        shape = (profile.batch_size, profile.max_new_tokens)
    if from_db is not None:
        if session_id or commitment_hex or signature_hex:
            raise click.UsageError(
                "--from-db reads session id, commitment and signature from the database; "
                "do not give them too"
            )
        try:
            row, stored_shape = _row_from_db(from_db, round_id, node_key)
        except KeyFileError as exc:
            click.echo(f"INVALID: malformed input: {exc}", err=True)
            raise SystemExit(1) from None
        except NetcheckError as exc:
            raise click.ClickException(str(exc)) from None
        session_id, commitment_hex = row["session_id"], row["commitment"]
        signature_hex = row["signature"]
        shape = stored_shape or shape
        if outputs_json is None and row.get("outputs") is not None:
            outputs = row["outputs"]
    elif not (session_id and commitment_hex and signature_hex):
        raise click.UsageError(
            "give --session-id, --commitment and --signature, or --from-db or --config"
        )
    if outputs_json is not None:
        outputs = _load_outputs(outputs_json, shape)
    assert session_id is not None and commitment_hex is not None and signature_hex is not None
    check = verify_stored_receipt(
        node_key, session_id, round_id, commitment_hex, signature_hex, outputs
    )
    if check.valid:
        click.echo(f"valid: {check.reason} (node {node_key.strip()}, round {round_id})")
        return
    click.echo(f"INVALID: {check.reason}", err=True)
    raise SystemExit(1)
