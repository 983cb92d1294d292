"""netcheck.coordinator.commands: the ``screen`` and ``flags`` command groups."""

from __future__ import annotations


def test_cli_groups_have_commands() -> None:
    """``screen run``, ``flags list`` and ``flags show`` exist with their options."""
    from click.testing import CliRunner

    from netcheck.coordinator.commands import flags, screen

    assert set(screen.commands) == {"run"}
    assert set(flags.commands) == {"list", "show"}
    out = CliRunner().invoke(screen, ["run", "--help"]).output
    assert "--rounds" in out and "--profile" in out and "--json" in out
    assert "--json" in CliRunner().invoke(flags, ["show", "--help"]).output


def test_screen_run_asks_for_the_capacity_check_and_sends_the_override() -> None:
    """``screen run`` always sets check_capacity; --override-capacity sends the reason."""
    import pytest
    from click.testing import CliRunner

    from netcheck.coordinator import commands

    sent: list[dict[str, object]] = []

    def fake_call(config: object, method: str, path: str, body: dict[str, object]) -> object:
        sent.append(body)
        return {"profile": "p", "rounds": [], "flags": []}

    mp = pytest.MonkeyPatch()
    mp.setattr(commands, "admin_call", fake_call)
    try:
        runner = CliRunner()
        assert runner.invoke(commands.screen, ["run", "--json"]).exit_code == 0
        args = ["run", "--json", "--override-capacity", "lab run on CPU"]
        assert runner.invoke(commands.screen, args).exit_code == 0
    finally:
        mp.undo()
    assert sent[0]["check_capacity"] is True and "capacity_override" not in sent[0]
    assert sent[1]["capacity_override"] == "lab run on CPU"
