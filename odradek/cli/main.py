"""The ``odradek`` command: one argparse parser, one module per subcommand.

How this works and why: every subcommand lives in its own module under
``odradek/cli/`` and exposes two functions, ``add_parser(subparsers)``, which adds
its parser and stores its ``run`` in the parsed namespace (``set_defaults(run=run)``),
and ``run(args) -> int``, which does the work and returns the exit status. This
module only lists those modules in ``SUBCOMMANDS``, so adding a command is one new
module plus one line here, and commands never import each other.

The client tools (``topics``, ``produce``, ``consume``, ``groups``, ``configs``,
``perf``) are click commands instead (``odradek/cli/tools.py``): ``main`` hands the
command line to click when its first word names one (``TOOL_COMMANDS``), and lists
them in ``--help``.

``main`` turns argparse's ``SystemExit`` into a return value, so tests (and
``python -m odradek``) can call it like a function: usage errors give argparse's
one-line message and status 2, ``--help`` and ``--version`` status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from odradek import __version__
from odradek.cli import (
    cluster,
    dump_log,
    leader_election,
    log_dirs,
    metadata_quorum,
    reassign_partitions,
    serve,
    storage,
    transactions,
)
from odradek.cli.subcommand import Subcommand

PROG = "odradek"
EXIT_USAGE = 2  # argparse's status for bad arguments
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C

SUBCOMMANDS: tuple[Subcommand, ...] = (
    serve,
    storage,
    metadata_quorum,
    leader_election,
    reassign_partitions,
    log_dirs,
    dump_log,
    cluster,
    transactions,
)
# The client tools are click commands (odradek/cli/tools.py), imported only when used.
TOOL_COMMANDS: dict[str, str] = {
    "topics": "create, list, describe, alter and delete topics",
    "produce": "send lines of standard input as records",
    "consume": "print records of a topic",
    "groups": "list, describe, reset and delete consumer groups",
    "configs": "describe and alter topic and broker configs",
    "perf": "measure produce and consume throughput and latency",
    "get-offsets": "print partitions' offsets at a time (kafka-get-offsets.sh)",
    "delete-records": "delete records before an offset (kafka-delete-records.sh)",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="odradek: a Kafka-compatible streaming platform."
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    subparsers.required = True
    for command in SUBCOMMANDS:
        command.add_parser(subparsers)
    for name, help_text in TOOL_COMMANDS.items():  # listed here, parsed by click
        subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in _tool_names():
        from odradek.cli.tools import run_tools

        try:
            return run_tools(argv)
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except BrokenPipeError:
            _discard_stdout()
            return 1
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_request:  # usage error, --help or --version
        return _status(exit_request.code)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `odradek dump-log ... | head`
        _discard_stdout()
        return 1


def _tool_names() -> frozenset[str]:
    return frozenset(TOOL_COMMANDS)


def _status(code: object) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else EXIT_USAGE


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
