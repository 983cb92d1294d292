"""Log lines: ISO-8601 times with zone, and ``--log-format json``."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from netcheck import cli
from netcheck.logs import JsonFormatter, TextFormatter, iso_time

ISO = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}[+-]\d{2}:\d{2}"


def record(msg: str = "round %s done", *args: object) -> logging.LogRecord:
    return logging.LogRecord("netcheck.round", logging.INFO, "x.py", 1, msg, args or ("r1",), None)


def test_text_lines_carry_iso_time_with_zone() -> None:
    """A text line starts with an ISO-8601 time and its UTC offset."""
    line = TextFormatter("node-a").format(record())
    assert re.match(rf"{ISO} INFO    \[node-a\] netcheck.round: round r1 done$", line), line
    assert iso_time(0.0) == "1970-01-01T00:00:00.000+00:00"


def test_json_lines_are_objects() -> None:
    """A JSON line holds time, level, logger, label and the formatted message."""
    obj = json.loads(JsonFormatter("node-a").format(record()))
    assert obj["message"] == "round r1 done" and obj["label"] == "node-a"
    assert obj["level"] == "INFO" and obj["logger"] == "netcheck.round"
    assert re.fullmatch(ISO, obj["time"])


def test_log_format_option_switches_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`netcheck --log-format json ...` makes setup_logging write JSON lines."""
    result = CliRunner().invoke(cli.main, ["--log-format", "json", "model", "--help"])
    assert result.exit_code == 0
    try:
        cli.setup_logging(label="t")
        logging.getLogger("netcheck.test").warning("hello %d", 7)
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert json.loads(line)["message"] == "hello 7"
    finally:
        cli.LOG_STYLE.update(format="text", local_time=False)
        logging.basicConfig(force=True)


def test_coordinator_log_lines_name_nodes(tmp_path: Path) -> None:
    """A coordinator registers its config's node_names: log lines show name and key prefix."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from netcheck.config import CoordinatorConfig
    from netcheck.coordinator.server import Coordinator
    from netcheck.keys import public_key_text
    from netcheck.lab.testing import small_profile
    from netcheck.logs import node_label, set_node_names
    from netcheck.storage import Store

    named, unnamed = (public_key_text(Ed25519PrivateKey.generate()) for _ in range(2))
    cfg = CoordinatorConfig(
        identity_key=tmp_path / "c.pem", database=f"sqlite:///{tmp_path / 'n.db'}",
        admin_token="x" * 24, profiles=["p"], open_enrollment=True,
        node_names={named: "rack7-gpu3"},
    )  # fmt: skip
    store = Store(cfg.database)
    try:
        Coordinator(cfg, Ed25519PrivateKey.generate(), {"p": small_profile("p")}, store)
        assert node_label(named) == f"rack7-gpu3 ({named[:20]})"
        assert node_label(unnamed) == unnamed[:20]
    finally:
        store.close()
        set_node_names({})
