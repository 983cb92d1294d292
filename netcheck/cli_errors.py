"""How the ``netcheck`` command line meets a mistake (:mod:`netcheck.cli` uses these).

:class:`NetcheckGroup`, the root command group: an error netcheck raises on purpose
(:class:`~netcheck.errors.NetcheckError`) is one red line and the exit status
:func:`netcheck.exitcodes.exit_code_for` gives; a global option written after the
command gets a hint that puts it before (:func:`global_option_hint`); other spellings
of a command are accepted. :func:`seconds_option` refuses a time that is not a finite
number of seconds >= 0.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import click

from netcheck.errors import NetcheckError


class NetcheckGroup(click.Group):
    """The root command group: reports errors as the module docstring says."""

    #: Other spellings of a command (``netcheck references status`` = ``reference status``).
    ALIASES = {"references": "reference", "rounds": "round"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.ALIASES.get(cmd_name, cmd_name))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            hint = global_option_hint(ctx, exc)
            if not hint:
                raise
            raise click.NoSuchOption(
                exc.option_name, f"{exc.message} {hint}", exc.possibilities, exc.ctx
            ) from exc
        except NetcheckError as exc:
            from netcheck.admin_client import keygen_fix
            from netcheck.exitcodes import exit_code_for

            click.secho(f"error: {exc}{keygen_fix(exc)}", fg="red", err=True)
            sys.exit(exit_code_for(exc))


def global_option_hint(root: click.Context, exc: click.NoSuchOption) -> str:
    """For ``exc`` (an unknown option of a subcommand), the sentence saying that it is an
    option of netcheck itself when ``root``'s command has it (``--log-format``, ...),
    with the command line that puts it before the command name; "" otherwise."""
    param = next((p for p in root.command.params if exc.option_name in p.opts), None)
    if not isinstance(param, click.Option):
        return ""
    value = ""
    if isinstance(param.type, click.Choice) and param.type.choices:
        value = f" {param.type.choices[-1]}"
    elif not param.is_flag:
        value = f" {param.metavar or param.name or 'VALUE'}".upper()
    prog = root.command_path
    sub = exc.ctx.command_path[len(prog) :] if exc.ctx is not None else " COMMAND"
    example = f"{prog} {exc.option_name}{value}" + ("" if param.is_eager else sub)
    return (
        f"{exc.option_name} is an option of netcheck itself: put it before the command, "
        f"e.g. `{example}`."
    )


def seconds_option(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Click callback: a time in seconds must be a finite number >= 0 (``float`` alone
    takes ``nan``, ``inf`` and negatives, which the emulation refused with a traceback
    or never finished).

    Raises:
        click.BadParameter: ``value`` is not such a number.
    """
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise click.BadParameter(f"{value} is not a number of seconds >= 0")
    return value
