"""One identity per card: ``netcheck node setup`` and the node config's ``device``."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from netcheck.cli import main
from netcheck.config import load_node_config
from netcheck.exitcodes import Exit
from netcheck.keys import load_private_key, public_key_text

COORD_KEY = "ed25519:IVL40Zt5HSRFMkLhXy6rbLfP-ntqXtMAl5YOBpiB2xI"


def test_setup_writes_one_identity_per_card(tmp_path: Path) -> None:
    """N keys and N configs, each on its own card, distinct keys, and the snippet for
    the coordinator; a second run refuses to overwrite."""
    args = [
        "node", "setup", "--cards", "3", "--host", "rack7", "--out", str(tmp_path),
        "--coordinator-url", "ws://10.0.0.1:8470/v1/ws", "--coordinator-key", COORD_KEY,
        "--profile", "cpu-tiny",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    keys = set()
    for i in range(3):
        cfg = load_node_config(tmp_path / f"rack7-gpu{i}.toml")
        assert (cfg.device, cfg.name) == (f"cuda:{i}", f"rack7-gpu{i}")
        assert cfg.node_profile().device == f"cuda:{i}"
        assert cfg.node_profile().name == "cpu-tiny"  # same profile, same reference set
        key = public_key_text(load_private_key(cfg.identity_key))
        assert f'"{key}" = "rack7-gpu{i}"' in result.output
        keys.add(key)
    assert len(keys) == 3
    # the snippet pastes into a coordinator config: names and the declared shared host
    snippet = result.output.split("# for the coordinator operator (coordinator.toml):")[1]
    assert "replaces the config's own allowed_nodes line" in snippet  # how to paste it
    coord = tmp_path / "coordinator.toml"
    coord.write_text(
        'identity_key = "c.pem"\nadmin_token = "a-long-enough-random-token-42"\n'
        'profiles = ["cpu-tiny"]\n' + snippet
    )
    from netcheck.config import load_coordinator_config

    loaded = load_coordinator_config(coord)
    assert loaded.node_hosts == dict.fromkeys(keys, "rack7")
    assert set(loaded.allowed_nodes) == keys
    again = CliRunner().invoke(main, args)
    assert again.exit_code == Exit.CONFIG and "not overwriting" in again.output


def test_device_is_checked(tmp_path: Path) -> None:
    """A device that is not cpu/auto/cuda[:n] is a config error naming the field."""
    cfg = tmp_path / "n.toml"
    cfg.write_text(
        f'coordinator_url = "ws://h:1/v1/ws"\ncoordinator_key = "{COORD_KEY}"\n'
        'identity_key = "k.pem"\nprofile = "cpu-tiny"\ndevice = "gpu3"\n'
    )
    result = CliRunner().invoke(main, ["doctor", "--config", str(cfg), "--no-selftest"])
    assert "device" in result.output


def test_setup_checks_what_it_writes_and_leaves_nothing_on_error(tmp_path: Path) -> None:
    """A mistyped coordinator key or profile name is an error at setup (exit 3, the field
    named), with no key or config left behind, so the corrected command runs at once."""
    base = [
        "node", "setup", "--cards", "2", "--host", "rack7", "--out", str(tmp_path),
        "--coordinator-url", "ws://10.0.0.1:8470/v1/ws",
    ]  # fmt: skip
    for bad, field in (
        (["--coordinator-key", "bogus", "--profile", "cpu-tiny"], "coordinator_key"),
        (["--coordinator-key", COORD_KEY, "--profile", "cpu-tinyy"], "cpu-tinyy"),
    ):
        result = CliRunner().invoke(main, base + bad)
        assert result.exit_code == Exit.CONFIG, result.output
        assert field in result.output and "nothing written" in result.output
        assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    good = CliRunner().invoke(
        main, [*base, "--coordinator-key", COORD_KEY, "--profile", "cpu-tiny"]
    )
    assert good.exit_code == 0, good.output
    # what to do next, and that a CPU profile on cards is probably not meant
    assert f"netcheck node run --config {tmp_path / 'rack7-gpu0.toml'}" in good.output
    assert "runs on the CPU" in good.output
