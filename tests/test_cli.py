"""The ``netcheck`` command line: help texts, keygen, config errors."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from netcheck.cli import main
from netcheck.exitcodes import Exit

COMMANDS = [
    [],
    ["keygen"],
    ["model", "synth"],
    ["reference", "build"],
    ["coordinator", "serve"],
    ["coordinator", "check"],
    ["node", "run"],
    ["round", "run"],
    ["nodes"],
    ["demo"],
    ["doctor"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "netcheck")
def test_every_command_has_help(args: list[str]) -> None:
    """``--help`` works on every command and describes it."""
    result = CliRunner().invoke(main, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_keygen_writes_private_key_and_prints_public(tmp_path: Path) -> None:
    """keygen writes a 0600 PEM file and prints the ed25519: public key."""
    path = tmp_path / "node.pem"
    result = CliRunner().invoke(main, ["keygen", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.strip().startswith("ed25519:")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().startswith("-----BEGIN PRIVATE KEY-----")


def test_keygen_refuses_to_overwrite(tmp_path: Path) -> None:
    """A second keygen on the same path fails with a clear error and keeps the key."""
    path = tmp_path / "node.pem"
    runner = CliRunner()
    runner.invoke(main, ["keygen", str(path)])
    before = path.read_bytes()
    result = runner.invoke(main, ["keygen", str(path)])
    assert result.exit_code == Exit.CONFIG  # a key-file problem
    assert "error:" in result.output
    assert path.read_bytes() == before


def test_bad_config_names_the_field(tmp_path: Path) -> None:
    """A coordinator config with a bad field fails with the file and field named."""
    cfg = tmp_path / "coordinator.toml"
    cfg.write_text('port = "eighty"\nidentity_key = "k.pem"\nadmin_token = "x"\nprofiles = []\n')
    result = CliRunner().invoke(main, ["round", "run", "--config", str(cfg)])
    assert result.exit_code == Exit.CONFIG
    assert "coordinator.toml" in result.output
    assert "port" in result.output


def test_round_run_without_coordinator_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asking for a round when no coordinator listens gives a one-line error."""
    cfg = tmp_path / "coordinator.toml"
    cfg.write_text(
        'port = 1\nidentity_key = "k.pem"\nadmin_token = "0123456789abcdef0123"\n'
        'profiles = ["cpu-tiny"]\nopen_enrollment = true\n'
    )
    result = CliRunner().invoke(main, ["round", "run", "--config", str(cfg)])
    assert result.exit_code == Exit.UNREACHABLE
    assert "cannot reach the coordinator" in result.output
    # nothing listens (e.g. after `netcheck demo`): the error names the command to start it
    for args in (["round", "run"], ["flags", "list"], ["screen", "run"]):
        result = CliRunner().invoke(main, [*args, "--config", str(cfg)])
        assert result.exit_code == Exit.UNREACHABLE, result.output
        assert f"start it with `netcheck coordinator serve --config {cfg}`" in result.output
    # called as the README calls it, the hint calls netcheck the same way
    monkeypatch.setattr(sys, "argv", [".venv/bin/netcheck", "flags", "list"])
    result = CliRunner().invoke(main, ["flags", "list", "--config", str(cfg)])
    assert f"start it with `.venv/bin/netcheck coordinator serve --config {cfg}`" in result.output


def test_non_utf8_config_is_a_config_error(tmp_path: Path) -> None:
    """A config file of random bytes is a one-line error naming the file, exit status 3."""
    cfg = tmp_path / "bad.toml"
    cfg.write_bytes(bytes(range(128, 256)))
    result = CliRunner().invoke(main, ["round", "run", "--config", str(cfg)])
    assert result.exit_code == Exit.CONFIG, result.output
    assert f"error: {cfg}: not UTF-8 text" in result.output
    assert "Traceback" not in result.output


def help_text(*args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())  # unwrapped


def option_help(text: str, option: str) -> str:
    """The help text after ``option`` in a --help page (up to the next option)."""
    after = text.split(f" {option} ", 1)[1]
    return after.split(" --", 1)[0]


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (["coordinator", "serve"], ["--config FILE", "-v, --verbose"]),
        (["node", "run"], ["--config FILE", "-v, --verbose"]),
        (["doctor"], ["--config FILE"]),
        (["demo"], ["--profile TEXT"]),
    ],
    ids=lambda a: " ".join(a),
)
def test_options_have_help(args: list[str], options: list[str]) -> None:
    """--config, -v and demo --profile say what they are for."""
    text = help_text(*args)
    for option in options:
        words = option_help(text, option).split("[default")[0].strip()
        assert len(words) > 10, (option, text)


def test_coordinator_serve_help_says_where_the_fields_are() -> None:
    """An operator changing a setting learns from --help where the fields are described
    and that a bad one is refused, naming it."""
    text = help_text("coordinator", "serve")
    assert "configs/coordinator.toml" in text and "docs/detection.md" in text
    assert "naming the file and the field (exit 3)" in text


def test_every_option_of_every_command_has_help() -> None:
    """No option's --help line is bare (hidden commands included: the demo starts them)."""
    import click

    bare = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden and not param.help:
                bare.append(f"{' '.join(path)} {param.opts[0]}")
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])

    walk(main, ["netcheck"])
    assert not bare, bare


def test_no_rest_markup_in_help() -> None:
    """click shows docstrings raw, so help pages carry no reST markup."""
    for args in COMMANDS:
        assert "``" not in help_text(*args), args
    assert "allowed_nodes" in help_text("keygen")


def test_model_synth_lists_every_preset() -> None:
    """model synth --help lists the presets from the presets table, tiny-alt included."""
    from netcheck.engines.presets import PRESETS

    text = help_text("model", "synth")
    assert "tiny-alt" in text
    for name in PRESETS:
        assert name in text


def test_screen_run_rounds_help_says_total() -> None:
    """screen run --rounds is the total, with every n-th a full-load round."""
    text = option_help(help_text("screen", "run"), "--rounds INTEGER")
    assert "in total" in text and "full-load" in text


def test_reference_build_interrupted_says_what_was_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during `reference build` reports the whole batches already stored, exit 130."""
    import netcheck.engines
    import netcheck.references.build

    def build(profile: object, engine: object, store: object, count: int, progress) -> int:  # type: ignore[no-untyped-def]
        progress(16, count)
        progress(32, count)
        raise KeyboardInterrupt

    monkeypatch.setattr(netcheck.references.build, "build_references", build)
    monkeypatch.setattr(netcheck.engines, "load_engine", lambda profile: object())
    db = f"sqlite:///{tmp_path / 'refs.db'}"
    result = CliRunner().invoke(
        main, ["reference", "build", "--profile", "cpu-tiny", "--count", "64", "--database", db]
    )
    assert result.exit_code == 130, result.output
    assert "interrupted: 32 of 64 references stored" in result.output
    # the engine load (minutes on a model's first use) is announced before it starts
    assert "loading engine torch synth:tiny (float32 on cpu)" in result.output


def test_engine_calibrate_help_names_the_capacity_steps() -> None:
    """``netcheck engine calibrate`` exists with its co-location and output options."""
    from click.testing import CliRunner

    from netcheck.cli import main

    out = CliRunner().invoke(main, ["engine", "calibrate", "--help"]).output
    for option in ("--profile", "--out", "--max-k", "--trials", "--update-profile"):
        assert option in out


def test_engine_selftest_states_an_unmeasured_capacity() -> None:
    """``engine selftest`` ends by saying plainly that the profile's capacity is unmeasured
    (cpu-factoring has no [capacity] table; its engine is instant)."""
    from click.testing import CliRunner

    from netcheck.cli import main

    result = CliRunner().invoke(
        main, ["engine", "selftest", "--profile", "cpu-factoring", "--quick"]
    )
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "profile cpu-factoring: capacity not measured" in text
    assert "cannot tell two identities on one card apart" in text


def test_node_refused_for_good_is_a_config_error() -> None:
    """A node stopped by a fatal refusal (wrong coordinator key or URL) exits 3, not 2."""
    from netcheck.exitcodes import exit_code_for
    from netcheck.node.client import NodeFatalError

    assert exit_code_for(NodeFatalError("WRONG_COORDINATOR_KEY: ...")) == Exit.CONFIG


def test_no_command_help_shows_rst_markup() -> None:
    """Every command's --help reads as plain text: no ``literal``, :func: or :class: markup."""
    import click

    from netcheck.cli import main

    found = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        text = cmd.get_help(click.Context(cmd, info_name=path[-1]))
        for mark in ("``", ":func:", ":class:", ":meth:", ":mod:"):
            if mark in text:
                found.append(f"{' '.join(path)}: {mark}")
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])

    walk(main, ["netcheck"])
    assert not found, found


def _coordinator_toml(tmp_path: Path, host: str = "127.0.0.1") -> Path:
    cfg = tmp_path / "coordinator.toml"
    cfg.write_text(
        f'host = "{host}"\nport = 8471\nidentity_key = "k.pem"\nopen_enrollment = true\n'
        'admin_token = "a-test-token-of-some-length"\nprofiles = ["cpu-tiny"]\n'
    )
    return cfg


def test_nodes_with_no_node_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`netcheck nodes` on a coordinator no node ever joined prints one line (the
    coordinator asked, the join command and the URL for it), not an empty table; exit 0."""
    from netcheck import cli

    monkeypatch.setattr(cli, "admin_call", lambda *a, **k: {"connected": [], "known": []})
    cfg = _coordinator_toml(tmp_path, "0.0.0.0")
    result = CliRunner().invoke(main, ["nodes", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1, result.output
    assert "known node(s)" not in result.output  # no table
    assert f"no node connected to the coordinator at http://127.0.0.1:8471 ({cfg})" in result.output
    assert "`netcheck node run --config node.toml`" in result.output
    assert "coordinator_url = ws://<this host>:8471/v1/ws" in result.output


def test_nodes_with_known_nodes_none_connected_adds_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes seen before but none connected: the table of known nodes, then the line."""
    from netcheck import cli

    known = {"node_key": "ed25519:" + "A" * 43, "name": "", "display_name": "gpu-a",
             "profile": "cpu-tiny", "fingerprint_id": "f" * 64, "last_seen_at": 1.0e9}  # fmt: skip
    monkeypatch.setattr(cli, "admin_call", lambda *a, **k: {"connected": [], "known": [known]})
    cfg = _coordinator_toml(tmp_path)
    result = CliRunner().invoke(main, ["nodes", "--config", str(cfg)], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "1 known node(s), 0 connected" in result.output
    assert "no node connected to the coordinator at http://127.0.0.1:8471" in result.output
    assert "coordinator_url = ws://127.0.0.1:8471/v1/ws" in result.output


@pytest.mark.parametrize(
    ("database", "code", "message"),
    [
        ("sqlite:///garbage.db", Exit.STORAGE, "cannot open database 'sqlite:///"),
        ("sqlite:////proc/netcheck-no/x.db", Exit.STORAGE, "cannot create its folder /proc/"),
        ("postgresql+psycopg://u:s3cret@127.0.0.1:1/x", Exit.STORAGE, "cannot open database"),
        ("postgresql+nodriver://u:s3cret@h/x", Exit.CONFIG, "c.toml: database: cannot open"),
        ("postgresql://u:s3cret@h:notaport/x", Exit.CONFIG, "c.toml: database: cannot open"),
    ],
)
def test_coordinator_serve_database_errors(
    tmp_path: Path, database: str, code: Exit, message: str
) -> None:
    """`coordinator serve` with a database it cannot use: a URL that cannot work (backend,
    driver, port) is a config error naming file and field (3); a database that is down or
    broken (not a database, folder not creatable, server refusing) is exit 10. One line,
    no traceback, no password."""
    from netcheck.keys import generate_key

    generate_key(tmp_path / "c.pem")
    (tmp_path / "garbage.db").write_bytes(b"not a database" * 100)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'identity_key = "c.pem"\nadmin_token = "0123456789abcdef0123"\n'
        f'profiles = ["cpu-tiny"]\nopen_enrollment = true\ndatabase = "{database}"\n'
    )
    result = CliRunner().invoke(main, ["coordinator", "serve", "--config", str(cfg)])
    assert result.exit_code == code, result.output
    assert "error: " in result.output and message in result.output
    assert "s3cret" not in result.output and "Traceback" not in result.output


def test_storage_errors_have_their_exit_codes() -> None:
    """StorageError (and StorageUnavailable) exit 10; an unusable URL exits 3, like any
    config error."""
    from netcheck.errors import DatabaseURLError, StorageError, StorageUnavailable
    from netcheck.exitcodes import exit_code_for

    assert exit_code_for(StorageError("x")) == exit_code_for(StorageUnavailable("x")) == 10
    assert exit_code_for(DatabaseURLError("x")) == Exit.CONFIG


def test_round_messages_name_commands_as_help_lists_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The round table's footer and the nothing-checked error name commands by the names
    `netcheck --help` lists (`reference status`, not the alias `references`)."""
    import re

    from netcheck.admin_client import NothingChecked
    from netcheck.report import check_round_outcome, print_round

    unchecked = {
        "node_key": "ed25519:k", "verdict": "unchecked", "elapsed_s": None,
        "canaries_matched": 0, "canaries_checked": 0, "reason": "no unspent canary",
    }  # fmt: skip
    passed = {**unchecked, "node_key": "ed25519:j", "verdict": "pass", "canaries_checked": 1}
    print_round({"round_id": "r1", "profile": "cpu-tiny", "verdicts": [unchecked, passed]})
    with pytest.raises(NothingChecked) as err:
        check_round_outcome([{"profile": "cpu-tiny", "verdicts": [unchecked]}])
    texts = [" ".join(capsys.readouterr().out.split()), str(err.value)]
    named = [m for text in texts for m in re.findall(r"`netcheck ([a-z-]+)", text)]
    assert "reference" in named
    assert set(named) <= set(main.commands), named


def test_hints_call_netcheck_as_it_was_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Called as the README calls it (``.venv/bin/netcheck``), every command a hint of
    flags, rounds, references and node status tells the user to run is called that way
    (a bare ``netcheck`` is "command not found" without an activated venv)."""
    from netcheck.admin_client import AdminConflict, NothingChecked
    from netcheck.coordinator import commands, round_commands
    from netcheck.references import commands as ref_commands
    from netcheck.report import check_round_outcome, print_round

    monkeypatch.setattr(sys, "argv", [".venv/bin/netcheck"])
    cfg = _coordinator_toml(tmp_path)
    flag = {
        "flag_id": 5, "kind": "capacity", "status": "confirmed", "profile": "p",
        "node_keys": ["ed25519:x"], "statistic": 3.0, "threshold": 3.0, "created_at": 0.0,
        "evidence_rounds": [], "evidence": {}, "review": {"state": "false-positive"},
    }  # fmt: skip

    def fake_call(config: object, method: str, path: str, *a: object, **k: object) -> object:
        if method == "POST":
            raise AdminConflict("flag 5 is false-positive: it can go to open")
        return {"/admin/flags/5": flag, "/admin/flags": {"flags": []},
                "/admin/references": {"references": []}}.get(path, {"rounds": [], "total": 0})  # fmt: skip

    for module in (commands, round_commands, ref_commands):
        monkeypatch.setattr(module, "admin_call", fake_call)
    node_cfg = tmp_path / "node.toml"
    node_cfg.write_text(
        'coordinator_url = "ws://127.0.0.1:1/v1/ws"\ncoordinator_key = '
        '"ed25519:IVL40Zt5HSRFMkLhXy6rbLfP-ntqXtMAl5YOBpiB2xI"\n'
        'identity_key = "node.pem"\nprofile = "cpu-tiny"\n'
    )
    c = ["--config", str(cfg)]
    outputs = {}
    for args in (
        ["flags", "show", "5", *c], ["flags", "list", *c], ["flags", "ack", "5", *c, "--by", "a"],
        ["round", "list", *c], ["round", "show", *c], ["reference", "status", *c],
        ["node", "status", "--config", str(node_cfg)],
    ):  # fmt: skip
        result = CliRunner().invoke(main, args, terminal_width=400)
        outputs[" ".join(args[:2])] = " ".join(result.output.split())
    unchecked = {
        "node_key": "ed25519:k", "verdict": "unchecked", "elapsed_s": None,
        "canaries_matched": 0, "canaries_checked": 0, "reason": "no unspent canary",
    }  # fmt: skip
    print_round({"round_id": "r1", "profile": "cpu-tiny", "verdicts": [unchecked]})
    with pytest.raises(NothingChecked) as err:
        check_round_outcome([{"profile": "cpu-tiny", "verdicts": [unchecked]}], config_path=cfg)
    outputs["round report"] = " ".join(capsys.readouterr().out.split()) + str(err.value)
    for what, out in outputs.items():
        assert ".venv/bin/netcheck " in out, (what, out)
        assert "`netcheck " not in out and ": netcheck " not in out, (what, out)


@pytest.mark.parametrize(
    ("args", "example"),
    [
        (["nodes", "--log-format", "json"], "`netcheck --log-format json nodes`"),
        (["engine", "calibrate", "--log-timezone=local"],
         "`netcheck --log-timezone local engine calibrate`"),
    ],
)  # fmt: skip
def test_a_global_option_after_the_command_says_where_it_goes(
    args: list[str], example: str
) -> None:
    """`netcheck nodes --log-format json` (s15-new15 finding 13): click's "No such option"
    plus that it is netcheck's own option and the command line with it in front."""
    result = CliRunner().invoke(main, args, prog_name="netcheck")
    assert result.exit_code == 2
    option = next(a.split("=")[0] for a in args if a.startswith("--"))
    assert f"No such option '{option}'" in result.output
    assert "is an option of netcheck itself: put it before the command" in result.output
    assert example in " ".join(result.output.split())


def test_an_unknown_option_gets_no_global_option_hint() -> None:
    """An option that netcheck itself does not have either stays click's plain error."""
    result = CliRunner().invoke(main, ["nodes", "--bogus"], prog_name="netcheck")
    assert result.exit_code == 2 and "No such option '--bogus'" in result.output
    assert "netcheck itself" not in result.output


def test_a_missing_identity_key_names_the_keygen_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node config whose key file does not exist yet: ``node run`` (exit 3) and
    ``doctor`` both name the ``netcheck keygen`` line that creates it, called as this
    command was (the coordinator's ``check`` already did; ``node run`` and ``doctor``
    said only "key file not found"). Checked to fail before the change."""
    from netcheck.node.doctor import run_checks

    cfg = tmp_path / "node dir" / "node.toml"
    cfg.parent.mkdir()
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from netcheck.keys import public_key_text

    coordinator_key = public_key_text(Ed25519PrivateKey.generate())
    cfg.write_text(
        'coordinator_url = "ws://127.0.0.1:1/v1/ws"\n'
        f'coordinator_key = "{coordinator_key}"\n'
        'identity_key = "keys/node.pem"\nprofile = "cpu-tiny"\n'
    )
    key = cfg.parent / "keys" / "node.pem"
    monkeypatch.setattr(sys, "argv", [".venv/bin/netcheck", "node", "run"])
    result = CliRunner().invoke(main, ["node", "run", "--config", str(cfg)])
    assert result.exit_code == Exit.CONFIG, result.output
    assert f"{key}: key file not found; create it with: .venv/bin/netcheck keygen '{key}'" in (
        " ".join(result.output.split())
    )
    found = {c.name: c for c in run_checks(cfg, selftest=False)}
    assert not found["identity key"].ok
    assert found["identity key"].detail.endswith(f".venv/bin/netcheck keygen '{key}'")


def test_reference_build_without_a_database_says_which_option_and_why() -> None:
    """``reference build`` with neither --config nor --database names what --config is
    for and an example (was "give --config or --database"). Checked to fail before."""
    result = CliRunner().invoke(main, ["reference", "build", "--profile", "cpu-tiny"])
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert "give --config FILE, the coordinator config whose database receives" in out
    assert "(e.g. --config configs/coordinator.toml), or --database URL" in out
