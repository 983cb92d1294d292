"""Profiles named in a config file resolve against that file's folder (or its
``profiles_dir``), never silently against the install tree first."""

from __future__ import annotations

from pathlib import Path

import pytest
from config_support import COORD, KEY, write

from netcheck.config import DEFAULT_PROFILES_DIR, load_coordinator_config, load_node_config
from netcheck.errors import ConfigError

NODE = f"""
coordinator_url = "ws://127.0.0.1:8470/v1/ws"
coordinator_key = "{KEY}"
identity_key = "keys/n.pem"
profile = "cpu-tiny"
"""


def calibrated(folder: Path, t_ref_s: float) -> None:
    """A copy of the shipped cpu-tiny profile with another deadline t_ref_s."""
    text = (DEFAULT_PROFILES_DIR / "cpu-tiny.toml").read_text()
    lines = [f"t_ref_s = {t_ref_s}" if ln.startswith("t_ref_s") else ln for ln in text.split("\n")]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cpu-tiny.toml").write_text("\n".join(lines))


@pytest.mark.parametrize("body", [COORD, NODE])
def test_profile_next_to_the_config_wins(tmp_path: Path, body: str) -> None:
    """A calibrated profile in <config folder>/profiles is the one loaded."""
    calibrated(tmp_path / "etc" / "profiles", 23.0)
    path = write(tmp_path / "etc" / "x.toml", body)
    cfg = load_coordinator_config(path) if body is COORD else load_node_config(path)
    assert cfg.load_profile("cpu-tiny").deadline.t_ref_s == 23.0
    assert cfg.profile_dirs[0] == (tmp_path / "etc" / "profiles").resolve()


def test_shipped_profiles_are_the_fallback(tmp_path: Path) -> None:
    """Without a local profiles/ folder the installed profile loads."""
    cfg = load_node_config(write(tmp_path / "n.toml", NODE))
    shipped = cfg.load_profile("cpu-tiny")
    assert shipped.deadline.t_ref_s != 23.0
    assert cfg.profile_dirs[-1] == DEFAULT_PROFILES_DIR


def test_profiles_dir_setting_and_error_lists_folders(tmp_path: Path) -> None:
    """profiles_dir (relative to the config) is the only folder; a missing name lists it."""
    calibrated(tmp_path / "cal", 7.0)
    cfg = load_node_config(write(tmp_path / "etc" / "n.toml", NODE + 'profiles_dir = "../cal"\n'))
    assert cfg.profile_dirs == [tmp_path / "etc" / ".." / "cal"]
    assert cfg.load_profile("cpu-tiny").deadline.t_ref_s == 7.0
    with pytest.raises(ConfigError) as err:
        cfg.load_profile("gpu-h200")
    assert str(tmp_path / "etc" / ".." / "cal") in str(err.value)
    assert "available profiles: cpu-tiny" in str(err.value)


def test_missing_name_lists_every_folder_searched(tmp_path: Path) -> None:
    """Without profiles_dir, both the local and the installed folder are named."""
    cfg = load_coordinator_config(write(tmp_path / "c.toml", COORD))
    with pytest.raises(ConfigError) as err:
        cfg.load_profile("nope")
    assert str((tmp_path / "profiles").resolve()) in str(err.value)
    assert str(DEFAULT_PROFILES_DIR) in str(err.value)


def test_profile_path_is_relative_to_the_config(tmp_path: Path) -> None:
    """A profile given as a path in the config resolves against the config's folder."""
    calibrated(tmp_path / "etc" / "mine", 9.0)
    (tmp_path / "etc" / "mine" / "cpu-tiny.toml").rename(tmp_path / "etc" / "mine" / "p.toml")
    text = NODE.replace('profile = "cpu-tiny"', 'profile = "mine/p.toml"')
    cfg = load_node_config(write(tmp_path / "etc" / "n.toml", text))
    assert cfg.load_profile(cfg.profile).deadline.t_ref_s == 9.0


@pytest.mark.parametrize(
    ("line", "field"),
    [("batch_size = 16", "batch_size = 65537"), ("max_new_tokens = 2", "max_new_tokens = 65537")],
)
def test_a_profile_beyond_the_protocol_frames_is_refused_naming_the_field(
    tmp_path: Path, line: str, field: str
) -> None:
    """A batch or output length no job or result frame may carry (docs/protocol.md §5.2)
    is a config error naming the field (before: accepted by the config and by
    ``coordinator check``, then no job frame could be built: ``Job`` refuses it); the bounds are
    the protocol's own."""
    from netcheck.config import load_profile
    from netcheck.config.profile import PROTOCOL_MAX_BATCH, PROTOCOL_MAX_TOKENS
    from netcheck.protocol.messages import MAX_BATCH, MAX_TOKENS

    assert (PROTOCOL_MAX_BATCH, PROTOCOL_MAX_TOKENS) == (MAX_BATCH, MAX_TOKENS)
    text = (DEFAULT_PROFILES_DIR / "cpu-factoring.toml").read_text()
    assert line in text
    path = write(tmp_path / "cpu-factoring.toml", text.replace(line, field, 1))
    with pytest.raises(ConfigError, match=field.split()[0] + r": Input should be less than"):
        load_profile(str(path))
    load_profile(str(write(tmp_path / "ok" / "cpu-factoring.toml", text)))  # the shipped one


@pytest.mark.parametrize("tokens", [1, 3])
def test_a_factoring_profile_must_answer_two_numbers(tmp_path: Path, tokens: int) -> None:
    """The factoring workload answers [p, q]: another max_new_tokens is a config error
    naming the field (before: accepted by the config and `coordinator check`, then
    `reference build` and every node failed loading the engine)."""
    from netcheck.config import load_profile

    text = (DEFAULT_PROFILES_DIR / "cpu-factoring.toml").read_text()
    line = "max_new_tokens = 2"
    assert line in text
    path = write(tmp_path / "cpu-factoring.toml", text.replace(line, f"max_new_tokens = {tokens}"))
    with pytest.raises(ConfigError, match="max_new_tokens: workload 'factoring' answers"):
        load_profile(str(path))
