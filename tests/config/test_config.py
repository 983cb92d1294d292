"""Tests for netcheck.config: profiles, coordinator and node files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from config_support import COORD, KEY, write
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from netcheck.config import (
    DEFAULT_PROFILES_DIR,
    PLACEHOLDER_ADMIN_TOKEN,
    CoordinatorConfig,
    Profile,
    load_coordinator_config,
    load_node_config,
    load_profile,
)
from netcheck.errors import ConfigError
from netcheck.keys import public_key_text

REPO = Path(__file__).resolve().parents[2]

PROFILE = """
engine = "torch"
model = "synth:tiny"
dtype = "float32"
batch_size = 16
prompt_len = 64
max_new_tokens = 16
[deadline]
t_ref_s = 2.0
"""


def test_repo_profiles_load() -> None:
    """The shipped cpu-tiny profiles load by name with the documented values."""
    p = load_profile("cpu-tiny")
    assert (p.name, p.engine, p.model, p.dtype, p.device) == (
        "cpu-tiny",
        "torch",
        "synth:tiny",
        "float32",
        "cpu",
    )
    assert (p.batch_size, p.prompt_len, p.max_new_tokens) == (16, 64, 64)
    assert (p.canaries_min, p.canaries_max) == (2, 3)
    assert p.deadline.t_ref_s == 2.0 and p.deadline.slack_s == 0.5
    v = load_profile("cpu-tiny-vllm")
    assert v.engine == "vllm" and v.model_dump(
        exclude={"name", "engine", "cpu_threads", "deadline"}
    ) == p.model_dump(exclude={"name", "engine", "cpu_threads", "deadline"})
    assert v.cpu_threads == 1 and v.deadline.t_ref_s == 3.0  # demo margin on 2 cores
    assert DEFAULT_PROFILES_DIR == REPO / "configs" / "profiles"


def test_deadline_formula() -> None:
    """deadline_s = max(a*t_ref, b*p99) + 2*rtt + slack."""
    p = load_profile("cpu-tiny")
    assert p.deadline_s(0.0) == pytest.approx(1.5 * 2.0 + 0.5)
    assert p.deadline_s(0.1) == pytest.approx(3.0 + 0.2 + 0.5)
    slow = p.model_copy(update={"deadline": p.deadline.model_copy(update={"p99_s": 5.0})})
    assert slow.deadline_s(0.0) == pytest.approx(1.2 * 5.0 + 0.5)
    with pytest.raises(ValueError):
        p.deadline_s(-1.0)


def test_deadline_coupling_scales_the_compute_term() -> None:
    """coupling c: max(a*t_ref, b*p99) * (1 + c) + 2*min(rtt, max_rtt) + slack; 0 (the
    default) gives the same float as the formula without it."""
    p = load_profile("cpu-tiny")
    assert p.deadline.coupling == 0.0
    d = p.deadline
    assert p.deadline_s(0.07) == max(d.a * d.t_ref_s, d.b * d.p99_s) + 2 * 0.07 + d.slack_s
    c = p.model_copy(update={"deadline": d.model_copy(update={"coupling": 0.2})})
    assert c.deadline_s(0.0) == pytest.approx(1.5 * 2.0 * 1.2 + 0.5)
    assert c.deadline_s(1.0) == pytest.approx(3.6 + 2 * d.max_rtt_s + 0.5)  # rtt capped


@pytest.mark.parametrize("value", ["-0.1", "1.0", "1.5"])
def test_deadline_coupling_out_of_range_is_refused(tmp_path: Path, value: str) -> None:
    """coupling must be in [0, 1); the error names the file and deadline.coupling."""
    path = write(
        tmp_path / "x.toml", PROFILE.replace("t_ref_s = 2.0", f"t_ref_s = 2.0\ncoupling = {value}")
    )
    with pytest.raises(ConfigError, match=r"x\.toml: deadline\.coupling: Input should be"):
        load_profile(path)


def test_profile_by_path_and_name(tmp_path: Path) -> None:
    """A profile loads by path (name = file stem) or by name from a given directory."""
    path = write(tmp_path / "x.toml", PROFILE)
    assert load_profile(path).name == "x"
    assert load_profile("x", profiles_dir=tmp_path).name == "x"


def test_bad_field_names_file_and_field(tmp_path: Path) -> None:
    """A bad value is reported as '<file>: <field>: <pydantic message>'."""
    path = write(tmp_path / "x.toml", PROFILE.replace("batch_size = 16", "batch_size = 1"))
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert str(err.value) == f"{path}: batch_size: Input should be greater than 1"


def test_nested_field_named(tmp_path: Path) -> None:
    """A bad nested value names its dotted path."""
    path = write(tmp_path / "x.toml", PROFILE.replace("t_ref_s = 2.0", "t_ref_s = -1"))
    with pytest.raises(ConfigError, match=r"x\.toml: deadline\.t_ref_s: "):
        load_profile(path)


def test_unknown_field_rejected(tmp_path: Path) -> None:
    """Unknown fields are errors, not silently ignored; a typo names the field it is
    probably meant to be, in a nested table too."""
    path = write(tmp_path / "x.toml", "batch_sise = 3\n" + PROFILE)
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert str(err.value) == f"{path}: batch_sise: unknown field; did you mean 'batch_size'?"
    path = write(tmp_path / "x.toml", PROFILE.replace("t_ref_s", "t_reff_s"))
    with pytest.raises(
        ConfigError, match=r"deadline\.t_reff_s: unknown field; did you mean 't_ref_s'"
    ):
        load_profile(path)
    path = write(tmp_path / "x.toml", "colour = 3\n" + PROFILE)
    with pytest.raises(
        ConfigError, match="colour: unknown field \\(not a setting netcheck reads\\)$"
    ):
        load_profile(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("canaries_max = 16\n", "canaries_max (16) must be < batch_size (16)"),
        ("canaries_min = 3\ncanaries_max = 2\n", "canaries_min (3) must be <= canaries_max"),
    ],
)
def test_canary_bounds(tmp_path: Path, extra: str, message: str) -> None:
    """1 <= canaries_min <= canaries_max < batch_size is enforced."""
    path = write(tmp_path / "x.toml", extra + PROFILE)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_profile(path)


def test_prompt_chars_too_short_for_the_reference(tmp_path: Path) -> None:
    """prompt_chars below 34 (the 60-bit reference and 16 characters of text) is
    refused, naming the field."""
    path = write(tmp_path / "x.toml", "prompt_chars = 31\n" + PROFILE)
    with pytest.raises(
        ConfigError, match="prompt_chars: Input should be greater than or equal to 34"
    ):
        load_profile(path)


def test_result_timeout_below_the_deadline_is_refused(tmp_path: Path) -> None:
    """result_timeout_s below the deadline at the RTT cap (here 1.5 x 2 + 2 x 0.1 + 0.5
    = 3.7 s) is refused, naming the field and both values; equal to it is accepted."""
    path = write(tmp_path / "x.toml", "result_timeout_s = 2.0\n" + PROFILE)
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert (
        "result_timeout_s (2 s) is below the deadline at the RTT cap (3.7 s): "
        "a node answering in time after it would be missing"
    ) in str(err.value)
    path = write(tmp_path / "x.toml", "result_timeout_s = 3.7\n" + PROFILE)
    assert load_profile(path).result_timeout_s == 3.7


def test_prompt_len_of_one_is_refused(tmp_path: Path) -> None:
    """prompt_len 1 (every prompt would be the same engine input, just ``<s>``) is
    refused, naming the field; 2 loads."""
    path = write(tmp_path / "x.toml", PROFILE.replace("prompt_len = 64", "prompt_len = 1"))
    with pytest.raises(ConfigError, match="prompt_len: Input should be greater than or equal to 2"):
        load_profile(path)
    path = write(tmp_path / "x.toml", PROFILE.replace("prompt_len = 64", "prompt_len = 2"))
    assert load_profile(path).prompt_len == 2


def test_profile_name_mismatch(tmp_path: Path) -> None:
    """A profile loaded by name must carry that name."""
    write(tmp_path / "x.toml", 'name = "y"\n' + PROFILE)
    with pytest.raises(ConfigError, match="name: 'y' does not match"):
        load_profile("x", profiles_dir=tmp_path)


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    """A missing file and invalid TOML are ConfigErrors naming the file."""
    with pytest.raises(ConfigError, match="no file nope.toml in the folders searched"):
        load_profile("nope", profiles_dir=tmp_path)
    path = write(tmp_path / "bad.toml", "engine = \n")
    with pytest.raises(ConfigError, match="bad.toml: invalid TOML"):
        load_profile(path)


@pytest.mark.parametrize("text", ["a = 1\na = 2\n", "[t]\nb = 1\n[t]\nc = 2\n"])
def test_duplicate_key_says_what_to_do(tmp_path: Path, text: str) -> None:
    """tomllib's 'Cannot overwrite a value' / 'Cannot declare ... twice' (e.g. node
    setup's allowed_nodes pasted under the example's) says a key is given twice."""
    path = write(tmp_path / "dup.toml", text)
    with pytest.raises(ConfigError, match="dup.toml: invalid TOML: .*given twice"):
        load_profile(path)


def test_unknown_profile_name_lists_available(tmp_path: Path) -> None:
    """A profile name that has no file lists the profiles that do exist."""
    write(tmp_path / "cpu-tiny.toml", PROFILE)
    write(tmp_path / "a-other.toml", PROFILE)
    with pytest.raises(ConfigError) as err:
        load_profile("cpu-tny", profiles_dir=tmp_path)
    assert str(err.value) == (
        f"profile 'cpu-tny': no file cpu-tny.toml in the folders searched ({tmp_path}); "
        "available profiles: a-other, cpu-tiny"
    )
    with pytest.raises(ConfigError, match="available profiles: .*cpu-tiny-vllm"):
        load_profile("cpu-tny")  # the repository's profiles


@pytest.mark.parametrize("loader", [load_profile, load_coordinator_config, load_node_config])
def test_non_utf8_file_is_a_config_error(tmp_path: Path, loader: object) -> None:
    """A file that is not UTF-8 is a ConfigError naming the file, not a traceback."""
    path = tmp_path / "bad.toml"
    path.write_bytes(b'name = "\xff\xfe\x80"\n\x9c')
    with pytest.raises(ConfigError) as err:
        loader(path)  # type: ignore[operator]
    assert str(err.value) == f"{path}: not UTF-8 text"


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_profile_floats_must_be_finite(tmp_path: Path, value: str) -> None:
    """inf and nan (valid TOML) are refused for times such as result_timeout_s and t_ref_s."""
    path = write(tmp_path / "x.toml", f"result_timeout_s = {value}\n" + PROFILE)
    with pytest.raises(ConfigError, match="result_timeout_s: Input should be a finite number"):
        load_profile(path)
    path = write(tmp_path / "x.toml", PROFILE.replace("t_ref_s = 2.0", f"t_ref_s = {value}"))
    with pytest.raises(ConfigError, match=r"deadline\.t_ref_s: Input should be a finite"):
        load_profile(path)


def test_profile_is_frozen() -> None:
    """Profiles are immutable."""
    p = load_profile("cpu-tiny")
    with pytest.raises(ValueError):
        p.batch_size = 3  # type: ignore[misc]
    assert isinstance(p, Profile)


def test_example_configs_load(tmp_path: Path) -> None:
    """configs/coordinator.toml and configs/node.toml are refused until their placeholders
    are replaced, then load; relative paths resolve against the file's folder."""
    shipped = REPO / "configs" / "coordinator.toml"
    with pytest.raises(ConfigError, match=r"admin_token: still the placeholder.*token_urlsafe"):
        load_coordinator_config(shipped)  # must be edited before use
    text = shipped.read_text()
    assert PLACEHOLDER_ADMIN_TOKEN in text
    edited_coord = write(
        tmp_path / "etc" / "coordinator.toml", text.replace(PLACEHOLDER_ADMIN_TOKEN, "x" * 43)
    )
    c = load_coordinator_config(edited_coord)
    assert c.identity_key == tmp_path / "etc" / "keys" / "coordinator.pem"
    assert c.database == f"sqlite:///{(tmp_path / 'etc' / 'netcheck.db').as_posix()}"
    assert c.profiles and c.open_enrollment
    example = (REPO / "configs" / "node.toml").read_text()
    with pytest.raises(ConfigError, match="coordinator_key: .*placeholder"):
        load_node_config(REPO / "configs" / "node.toml")  # must be edited before use
    edited = REPO / "configs" / ".node-edited.toml"
    edited.write_text(example.replace("ed25519:" + "A" * 43, KEY))
    try:
        n = load_node_config(edited)
    finally:
        edited.unlink()
    assert n.identity_key == REPO / "configs" / "keys" / "node.pem"
    assert n.coordinator_url.startswith("ws://")


def test_coordinator_paths(tmp_path: Path) -> None:
    """Relative key and sqlite paths resolve against the file; absolute/other URLs stay."""
    c = load_coordinator_config(write(tmp_path / "etc" / "c.toml", COORD))
    assert c.identity_key == tmp_path / "etc" / "keys" / "c.pem"
    assert c.database == f"sqlite:///{(tmp_path / 'etc' / 'netcheck.db').as_posix()}"
    for url in ("sqlite:////abs/x.db", "sqlite://", "postgresql://u@h/db"):
        text = COORD + f'database = "{url}"\n'
        assert load_coordinator_config(write(tmp_path / "c2.toml", text)).database == url


def extra(line: str) -> tuple[str, str]:
    """A change to COORD that adds ``line`` at the top."""
    return ("\nidentity_key =", f"\n{line}\nidentity_key =")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('allowed_nodes = ["' + KEY + '"]', "allowed_nodes = []"), "set open_enrollment"),
        (("0123456789abcdef", "short"), "admin_token: String should have at least 16"),
        ((KEY, "ed25519:abc"), "allowed_nodes: Value error, entry 0: public key must encode"),
        (
            (KEY, "ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
            "entry 0: public key ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA refused: "
            "small-order point",
        ),
        (('profiles = ["cpu-tiny"]', "profiles = []"), "profiles: List should have at least 1"),
        (("0123456789abcdef", PLACEHOLDER_ADMIN_TOKEN), "admin_token: still the placeholder"),
        (("0123456789abcdef", PLACEHOLDER_ADMIN_TOKEN), "secrets.token_urlsafe(32)"),
        (extra("handshake_timeout_s = inf"), "handshake_timeout_s: Input should be a finite"),
        (
            extra("request_header_timeout_s = nan"),
            "request_header_timeout_s: Input should be a finite number",
        ),
        (extra("max_message_bytes = 1e14"), "max_message_bytes: Input should be"),
        (extra("max_message_bytes = 67108865"), "max_message_bytes: Input should be less"),
        (
            extra("confirm_max_cycle = 64"),
            "confirm_max_cycle: unknown field; did you mean 'confirm_max_cycles' or "
            "'confirm_cycles'?",
        ),
        (extra("confirm_max_cycles = 2"), "confirm_max_cycles: Input should be greater than"),
        (
            extra("screening_load_probability = 1"),
            "screening_load_probability: Input should be less than 1",
        ),
        (
            extra("screening_load_probability = 0"),
            "screening_load_probability: Input should be greater than 0",
        ),
        (extra("confirm_max_cycles = 100000000"), "confirm_max_cycles: Input should be less than"),
        (
            extra("confirm_max_cycles = 4"),
            "confirm_max_cycles (4) must be >= confirm_cycles (8, the first look)",
        ),
        (
            extra("capacity_strikes = 9\ncapacity_window = 8"),
            "capacity_strikes (9) must be <= capacity_window (8)",
        ),
        (
            extra('database = "postgres:/u:s3cret@host/x"'),
            "database: not a database URL: use sqlite:///path/netcheck.db or postgresql+psycopg",
        ),
        (extra('database = "garbage"'), "database: not a database URL"),
        (
            extra("answer_failure_strikes = 9"),
            "answer_failure_strikes (9) must be <= answer_failure_window (8)",
        ),
        (
            extra('node_names = { "bob" = "x" }'),
            "node_names: not a public key of the form ed25519:<43 base64url chars>: 'bob'",
        ),
        (
            extra(f'node_names = {{ "{KEY[:-1]}!" = "x" }}'),
            f"node_names: not a public key of the form ed25519:<43 base64url chars>: '{KEY[:-1]}!'",
        ),
    ],
)
def test_coordinator_rejects(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    """Empty allow-list without open enrollment, short or placeholder token, bad key text,
    non-finite timeouts, oversized message cap and bad node_names keys are rejected."""
    path = write(tmp_path / "c.toml", COORD.replace(*change))
    with pytest.raises(ConfigError) as err:
        load_coordinator_config(path)
    assert str(path) in str(err.value)
    assert message.replace("Value error, ", "") in str(err.value)
    assert "s3cret" not in str(err.value)  # a database URL's password is never echoed


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            'open_enrollment = "yes"',
            "open_enrollment: Input should be a valid boolean, got a string ('yes'): "
            "write the value without quotes",
        ),
        ("open_enrollment = 1", "open_enrollment: Input should be a valid boolean, got an integer"),
        (
            'port = "8470"',
            "port: Input should be a valid integer, got a string ('8470'): "
            "write the value without quotes",
        ),
        ("port = 8470.0", "port: Input should be a valid integer, got a float"),
        ("port = true", "port: Input should be a valid integer, got a boolean"),
        ('handshake_timeout_s = "5"', "handshake_timeout_s: Input should be a valid number"),
        ("admin_token = 1234567890123456789", "admin_token: Input should be a valid string"),
        (
            'confirm_batching = "false"',
            "confirm_batching: Input should be a valid boolean, got a string ('false')",
        ),
    ],
)
def test_config_types_are_strict(tmp_path: Path, line: str, message: str) -> None:
    """A TOML value of the wrong type is an error naming the field, the expected and the
    given type: a quoted bool or number is not converted (pydantic strict mode)."""
    text = "\n".join(
        ln for ln in COORD.splitlines() if not ln.startswith(line.split(" = ")[0] + " ")
    )
    path = write(tmp_path / "c.toml", f"{line}\n{text}\n")
    with pytest.raises(ConfigError) as err:
        load_coordinator_config(path)
    assert f"{path}: {message}" in str(err.value)


def test_strict_types_keep_int_for_float_and_text_for_paths(tmp_path: Path) -> None:
    """Strictness keeps the two conversions TOML needs: an integer for a float field
    (``t_ref_s = 2``) and a string for a path; a quoted profile number is refused."""
    c = load_coordinator_config(
        write(tmp_path / "c.toml", COORD + 'handshake_timeout_s = 5\nspool_file = "s.jsonl"\n')
    )
    assert c.handshake_timeout_s == 5.0 and isinstance(c.handshake_timeout_s, float)
    assert c.spool_file == tmp_path / "s.jsonl" and c.identity_key == tmp_path / "keys/c.pem"
    p = load_profile(write(tmp_path / "x.toml", PROFILE.replace("t_ref_s = 2.0", "t_ref_s = 2")))
    assert p.deadline.t_ref_s == 2.0 and isinstance(p.deadline.t_ref_s, float)
    bad = write(tmp_path / "y.toml", PROFILE.replace("batch_size = 16", 'batch_size = "16"'))
    with pytest.raises(ConfigError, match=r"y\.toml: batch_size: Input should be a valid integer"):
        load_profile(bad)
    node = (
        f'coordinator_url = "ws://h:1/v1/ws"\ncoordinator_key = "{KEY}"\n'
        'identity_key = "n.pem"\nprofile = "cpu-tiny"\nwarmup_batches = "2"\n'
    )
    with pytest.raises(ConfigError, match="warmup_batches: Input should be a valid integer"):
        load_node_config(write(tmp_path / "n.toml", node))


def test_node_config_rejects(tmp_path: Path) -> None:
    """A node file with a non-websocket URL or a malformed pinned key is rejected."""
    good = (
        f'coordinator_url = "ws://h:1/v1/ws"\ncoordinator_key = "{KEY}"\n'
        'identity_key = "/abs/n.pem"\nprofile = "cpu-tiny"\n'
    )
    n = load_node_config(write(tmp_path / "n.toml", good))
    assert n.identity_key == Path("/abs/n.pem") and n.name == ""
    with pytest.raises(ConfigError, match="coordinator_url: Value error|coordinator_url: "):
        load_node_config(write(tmp_path / "n.toml", good.replace("ws://", "http://")))
    with pytest.raises(ConfigError, match="coordinator_key: .*must start with"):
        load_node_config(write(tmp_path / "n.toml", good.replace("ed25519:", "rsa:")))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ws://127.0.0.1:99999/v1/ws", "Port out of range"),
        ("ws://h:0/v1/ws", "port must be 1..65535, got 0"),
        ("ws://h:abc/v1/ws", "not a valid URL"),
        ("ws:///v1/ws", "has no host"),
        ("ws://:80/v1/ws", "not a valid URL"),
        ("ws://a b/v1/ws", "must not contain whitespace"),
        ("https://h/v1/ws", "must start with ws:// or wss://"),
    ],
)
def test_node_url_is_validated(tmp_path: Path, url: str, message: str) -> None:
    """coordinator_url needs scheme ws/wss, a host and a port in 1..65535; errors name it."""
    text = (
        f'coordinator_url = "{url}"\ncoordinator_key = "{KEY}"\n'
        'identity_key = "/abs/n.pem"\nprofile = "cpu-tiny"\n'
    )
    with pytest.raises(ConfigError) as err:
        load_node_config(write(tmp_path / "n.toml", text))
    assert "n.toml: coordinator_url: " in str(err.value)
    assert message in str(err.value)


@pytest.mark.parametrize("url", ["ws://h/v1/ws", "wss://[::1]:8470/v1/ws", "ws://h:65535/x"])
def test_node_url_accepts_good_urls(tmp_path: Path, url: str) -> None:
    """Default ports, IPv6 literals and the top port are fine."""
    text = (
        f'coordinator_url = "{url}"\ncoordinator_key = "{KEY}"\n'
        'identity_key = "/abs/n.pem"\nprofile = "cpu-tiny"\n'
    )
    assert load_node_config(write(tmp_path / "n.toml", text)).coordinator_url == url


@pytest.mark.parametrize("path", sorted(DEFAULT_PROFILES_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_every_file_a_shipped_profile_cites_exists(path: Path) -> None:
    """The docs/... and netcheck/... files a profile's comments point to exist."""
    cited = re.findall(r"\b((?:docs|netcheck)/[\w./-]*\w)", path.read_text())
    assert [c for c in cited if not (REPO / c).exists()] == []


@pytest.mark.parametrize("path", sorted(DEFAULT_PROFILES_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_profile_loads_and_its_stated_deadline_is_true(path: Path) -> None:
    """Each file in configs/profiles loads by name; where its comment states the
    recommended deadline at rtt 0 (calibrated profiles), that is what the fields give."""
    p = load_profile(path.stem)
    assert p.name == path.stem
    stated = re.search(r"recommended deadline .*?: ([0-9.]+) s at rtt 0", path.read_text())
    if stated:
        assert p.deadline_s(0.0) == pytest.approx(float(stated.group(1)), abs=0.001)


def test_node_names_with_real_keys_load(tmp_path: Path) -> None:
    """node_names keyed by canonical public keys load; a non-canonical key is refused."""
    real = public_key_text(Ed25519PrivateKey.generate())
    c = load_coordinator_config(
        write(tmp_path / "c.toml", f'node_names = {{ "{real}" = "gpu-1" }}' + COORD)
    )
    assert c.node_names == {real: "gpu-1"}
    with pytest.raises(ConfigError, match="node_names: non-canonical public key text"):
        load_coordinator_config(
            write(tmp_path / "c.toml", 'node_names = { "ed25519:' + "B" * 43 + '" = "x" }' + COORD)
        )


def test_every_coordinator_field_is_named_in_the_example_config() -> None:
    """The README says every field is commented in configs/coordinator.toml."""
    text = (REPO / "configs" / "coordinator.toml").read_text()
    deprecated = {"relay_from_batch_times"}  # ignored; kept so that old files load
    missing = [
        name
        for name in CoordinatorConfig.model_fields
        if name not in deprecated and not re.search(rf"^#?\s*{name}\s*=", text, re.M)
    ]
    assert not missing


def _detection_config(tmp_path: Path, **kw: object) -> CoordinatorConfig:
    return CoordinatorConfig(
        identity_key=tmp_path / "keys" / "c.pem", open_enrollment=True,
        admin_token="x" * 16, profiles=["p"], **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_config_detection_fields(tmp_path: Path) -> None:
    """The secret path defaults next to the identity key; bad strike settings are refused."""
    cfg = _detection_config(tmp_path)
    assert cfg.schedule_secret_path == tmp_path / "keys" / "schedule.secret"
    assert cfg.screening_interval_s == 0.0
    assert _detection_config(
        tmp_path, schedule_secret_file=tmp_path / "x"
    ).schedule_secret_path == (tmp_path / "x")
    with pytest.raises(ValueError):
        _detection_config(tmp_path, capacity_window=2, capacity_strikes=3)
    for bad in ({"capacity_p0": 0.0}, {"capacity_p0": 1.0}, {"capacity_alpha": 0.0},
                {"capacity_alpha": 1.0}, {"capacity_strikes": 1}):  # fmt: skip
        with pytest.raises(ValueError):
            _detection_config(tmp_path, **bad)


@pytest.mark.parametrize("name", ["n1\\nFAKE LINE", "n1\\u001b[31mred", "n1\\ttab"])
def test_names_with_control_characters_are_refused_naming_the_field(
    tmp_path: Path, name: str
) -> None:
    """A node's ``name`` starts each of its log lines, a ``node_names``/``node_hosts`` value
    shows in the coordinator's log lines and tables: a newline forged a log line and an
    escape sequence recoloured the terminal (before: both accepted and printed raw)."""
    node = (
        f'coordinator_url = "ws://h:1/v1/ws"\ncoordinator_key = "{KEY}"\n'
        f'identity_key = "/abs/n.pem"\nprofile = "cpu-tiny"\nname = "{name}"\n'
    )
    with pytest.raises(ConfigError, match="n.toml: name: .*control character"):
        load_node_config(write(tmp_path / "n.toml", node))
    real = public_key_text(Ed25519PrivateKey.generate())
    for field in ("node_names", "node_hosts"):
        text = f'{field} = {{ "{real}" = "{name}" }}' + COORD
        with pytest.raises(ConfigError, match=f"c.toml: {field}: .*control character"):
            load_coordinator_config(write(tmp_path / "c.toml", text))
    ok = load_node_config(write(tmp_path / "n.toml", node.replace(name, "gpu-1 (rack 7)")))
    assert ok.name == "gpu-1 (rack 7)"
