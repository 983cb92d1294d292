"""The canary pool arithmetic (pure) and the store's per-fingerprint counts."""

from __future__ import annotations

from pathlib import Path

from netcheck.lab.testing import small_profile
from netcheck.references.pool import (
    LOW_POOL_ROUNDS,
    build_command,
    pool_status,
    shortest,
    with_config,
)
from netcheck.storage import ReferenceRow, Store

PROFILE = small_profile("p", canaries_max=2, batch_size=4)


def test_rounds_left_counts_every_connected_node() -> None:
    """Rounds left = unspent // (canaries_max * connected nodes), floor division."""
    counts = [{"profile": "p", "fingerprint_id": "fa", "total": 50, "unspent": 41}]
    (e,) = pool_status(counts, {"p": PROFILE}, {("p", "fa"): 3})
    assert (e.per_round, e.rounds_left, e.state) == (6, 6, "low")
    (idle,) = pool_status(counts, {"p": PROFILE})  # nobody connected: one node's rounds
    assert (idle.nodes, idle.rounds_left) == (0, 20)
    assert idle.state == ("ok" if LOW_POOL_ROUNDS <= 20 else "low")


def test_connected_fingerprint_without_references_is_empty() -> None:
    """A fingerprint nodes claim but no reference was built for shows as an empty pool."""
    counts = [{"profile": "p", "fingerprint_id": "fa", "total": 9, "unspent": 9}]
    entries = pool_status(counts, {"p": PROFILE}, {("p", "fb"): 1})
    by_fp = {e.fingerprint_id: e for e in entries}
    assert by_fp["fb"].total == 0 and by_fp["fb"].state == "empty"
    assert "netcheck reference build --profile p" in by_fp["fb"].build_command
    assert shortest(entries) == by_fp["fb"]  # the pool a connected node draws from


def test_store_counts_per_profile_and_fingerprint(tmp_path: Path) -> None:
    """reference_pool() groups by (profile, fingerprint) and counts unspent rows."""
    store = Store(f"sqlite:///{tmp_path / 'n.db'}")
    rows = [ReferenceRow(f"a{i}", "p", "fa", f"q{i}", (1,), 0.0, None) for i in range(3)]
    rows += [ReferenceRow("b0", "p", "fb", "q", (1,), 0.0, "r1")]
    store.add_references(rows)
    assert store.reference_pool() == [
        {"profile": "p", "fingerprint_id": "fa", "total": 3, "unspent": 3},
        {"profile": "p", "fingerprint_id": "fb", "total": 1, "unspent": 0},
    ]
    store.close()


def test_build_command_names_the_callers_config() -> None:
    """Surfaces that know the coordinator config (the CLI) print a command that runs as
    shown, the path shell-quoted; others keep the placeholder."""
    assert build_command("p").endswith("--config <coordinator.toml>")
    assert with_config(build_command("p"), None) == build_command("p")
    assert with_config(build_command("p"), Path("etc/c.toml")) == (
        "netcheck reference build --profile p --config etc/c.toml"
    )
    # and netcheck called as the CLI was (invoked_as(), e.g. .venv/bin/netcheck)
    assert with_config(build_command("p"), Path("c.toml"), ".venv/bin/netcheck") == (
        ".venv/bin/netcheck reference build --profile p --config c.toml"
    )
    assert with_config(build_command("p"), Path("my dir/c.toml")).endswith(
        "--config 'my dir/c.toml'"
    )


def _status_offline(config: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from netcheck.cli import main

    result = CliRunner().invoke(
        main, ["reference", "status", "--config", config], terminal_width=200
    )
    return result.exit_code, result.output


def test_reference_status_reads_a_read_only_database_without_a_coordinator() -> None:
    """No coordinator answering: `reference status` reads the config's database, opened
    read-only, so a copy on a read-only mount works (opening it to write failed); a
    missing database file is no references, and is not created."""
    import socket

    from readonly_support import as_reader, read_only_folder

    from netcheck.storage import ReferenceRow, Store

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def fill(folder: Path) -> None:
        with Store(f"sqlite:///{folder / 'n.db'}") as store:
            store.add_references(
                [ReferenceRow(f"r{i}", "cpu-tiny", "f" * 64, "p", (1, 2), 0.0) for i in range(3)]
            )
        for name, db in (("coordinator.toml", "n.db"), ("none.toml", "none.db")):
            (folder / name).write_text(
                f'port = {port}\nidentity_key = "k.pem"\nopen_enrollment = true\n'
                'admin_token = "a-test-token-of-some-length"\nprofiles = ["cpu-tiny"]\n'
                f'database = "sqlite:///{folder / db}"\n'
            )

    with read_only_folder(fill) as folder:
        code, output = as_reader(_status_offline, str(folder / "coordinator.toml"))
        assert code == 0, output
        assert "canary pool (database only)" in output and "ffffffffffff" in output, output
        code, output = as_reader(_status_offline, str(folder / "none.toml"))
        assert code == 0 and "no references stored" in output, output
        assert not (folder / "none.db").exists()
