"""The click plumbing of the commands that do their work in ``run(args)``.

How this works and why: ``serve``, ``storage``, ``dump-log`` and the other
kafka-*.sh-shaped commands were argparse commands; each keeps its ``run(args) -> int``
(its exit status) and now declares a click command whose callback hands ``run`` the
parsed options as attributes (``Args``), so the body of those commands did not change
when the whole ``odradek`` command moved to click. A usage error is one line in
the shape of the command's other errors (``show_usage_error``): ``odradek CMD: error:
... (usage: ...)`` for these commands, which ``ArgparseStyle`` marks, click's ``Error:
...`` for the client tools. Mutually
exclusive options, which click lacks, are checked by ``one_of``. This module imports
only click, so a command never imports ``main.py`` (which imports it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import IO, Any, TypeAlias

import click

Args: TypeAlias = SimpleNamespace  # the parsed options, as attributes
Run: TypeAlias = Callable[[Args], int]


class ArgparseStyle:
    """A command whose usage errors print as argparse's (``usage:`` then ``error:``)."""


class ArgparseStyleCommand(ArgparseStyle, click.Command):
    pass


class ArgparseStyleGroup(ArgparseStyle, click.Group):
    command_class = ArgparseStyleCommand


def usage_line(ctx: click.Context) -> str:
    pieces = " ".join(ctx.command.collect_usage_pieces(ctx))
    return f"usage: {ctx.command_path} {pieces}".rstrip()


def show_usage_error(error: click.UsageError, file: IO[str] | None = None) -> None:
    """Print a usage error as one line, in the shape of the command's other errors:
    ``odradek CMD: error: ...`` for the argparse-born commands, click's ``Error: ...``
    for the client tools, each with the usage it broke."""
    file = sys.stderr if file is None else file
    ctx = error.ctx
    message = error.format_message()
    if ctx is None:
        click.echo(f"Error: {message}", file=file)
    elif isinstance(ctx.command, ArgparseStyle):
        click.echo(
            f"{ctx.command_path}: error: {message} ({usage_line(ctx)}; -h for help)", file=file
        )
    else:
        click.echo(f"Error: {message} ({usage_line(ctx)}; -h for help)", file=file)


def invoke(run: Run, params: dict[str, Any], **extra: Any) -> int:
    """Call ``run`` with the options of the command and of the groups above it (a
    group's options, such as ``--bootstrap-server``, come before the action)."""
    ctx = click.get_current_context()
    merged: dict[str, Any] = {}
    for parent in reversed(_parents(ctx)):
        merged.update(parent.params)
    merged.update(params)
    merged.update(extra)
    merged.setdefault("print_usage", lambda file=None: click.echo(usage_line(ctx), file=file))
    return int(run(Args(**merged)))


def _parents(ctx: click.Context) -> list[click.Context]:
    found = []
    parent = ctx.parent
    while parent is not None and parent.parent is not None:  # the root has no options here
        found.append(parent)
        parent = parent.parent
    return found


def one_of(params: dict[str, Any], names: Sequence[str], required: bool = True) -> None:
    """At most one of the options ``names`` (their ``--flag`` spellings) was given, and
    one was if ``required`` (argparse's mutually exclusive group)."""
    given = [n for n in names if params.get(_dest(n)) not in (None, False, (), [])]
    if len(given) > 1:
        raise click.UsageError(f"argument {given[1]}: not allowed with argument {given[0]}")
    if required and not given:
        raise click.UsageError(f"one of the arguments {' '.join(names)} is required")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


class Checked(click.ParamType):
    """A value converted by ``function``; its ``ValueError`` is a usage error."""

    def __init__(self, function: Callable[[str], Any], name: str) -> None:
        self.function = function
        self.name = name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self.function(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)
