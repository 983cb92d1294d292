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
