"""The ``odradek`` command: one click group, one module per command.

How this works and why: every command lives in its own module under ``odradek/cli/``
and exposes a click command; ``COMMANDS`` names it (``"module:attribute"``) with the
one line ``--help`` shows, so adding a command is one new module plus one line here,
and commands never import each other. The group imports a command's module only when
that command runs (``LazyGroup``): ``odradek serve`` does not load the client, rich
or the dump decoders, and ``--help`` lists every command without importing any.

The kafka-*.sh-shaped commands (``serve``, ``storage``, ``dump-log``, ...) keep their
``run(args)`` bodies and argparse's usage-error shape (``subcommand.py``); the client
tools (``topics``, ``produce``, ``consume``, ...) keep click's, and their client
failures become one line with status 1 (``common.tool_failure``). Kafka's action
flags (``topics --create``) are rewritten to subcommands first (``tools.py``).

``main`` runs click without letting it exit, so tests (and ``python -m odradek``) can
call it like a function: usage errors give a short message and status 2, ``--help``
and ``--version`` status 0, Ctrl-C status 130 without a word, and a closed pipe
(``odradek dump-log ... | head``) status 1 without a traceback. Shell completion is
click's: ``eval "$(odradek completion bash)"`` (or zsh, fish); the script calls
``odradek`` back with ``_ODRADEK_COMPLETE`` set.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from typing import Any

import click
from click.shell_completion import ShellComplete, get_completion_class

# kio's static types register Hypothesis strategies whenever Hypothesis can be imported
# (kio/static/_phantom.py): all of Hypothesis is loaded and every installed package's
# entry points are scanned, ~1 s of each broker start wherever the dev extra is
# installed — every test's and bench's broker (bench/embedded.py, process=True: ready
# in 1.35 s with it, 0.73 s without, at load 8 on 2 cores). ``serve`` never uses them,
# so it hides Hypothesis from kio; the check runs before this module's imports load kio.
if sys.argv[1:2] == ["serve"] and "kio" not in sys.modules:
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from odradek import __version__
from odradek.cli.subcommand import ArgparseStyleGroup, show_usage_error
from odradek.cli.tools import kafka_action

PROG = "odradek"
COMPLETE_VAR = "_ODRADEK_COMPLETE"  # click's default for prog "odradek"
EXIT_USAGE = 2  # bad arguments
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
SHELLS = ("bash", "zsh", "fish")

# name -> ("module:attribute" of the click command, the line --help shows)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("odradek.cli.serve:command", "run a Kafka-compatible broker"),
    "storage": (
        "odradek.cli.storage:command",
        "format log dirs with a cluster id and show their identity (kafka-storage.sh)",
    ),
    "metadata-quorum": (
        "odradek.cli.metadata_quorum:command",
        "describe the KRaft controller quorum (kafka-metadata-quorum.sh)",
    ),
    "acls": (
        "odradek.cli.acls:command",
        "add, list and remove ACLs (kafka-acls.sh)",
    ),
    "leader-election": (
        "odradek.cli.leader_election:command",
        "elect preferred or unclean partition leaders (kafka-leader-election.sh)",
    ),
    "reassign-partitions": (
        "odradek.cli.reassign_partitions:command",
        "move partition replicas between brokers (kafka-reassign-partitions.sh)",
    ),
    "log-dirs": (
        "odradek.cli.log_dirs:command",
        "describe the log dirs of brokers and the replicas in them (kafka-log-dirs.sh)",
    ),
    "dump-log": (
        "odradek.cli.dump_log:command",
        "print the contents of log segments, indexes, snapshots and checkpoints",
    ),
    "cluster": (
        "odradek.cli.cluster:command",
        "format and run a three-node KRaft cluster on this machine until Ctrl-C",
    ),
    "transactions": (
        "odradek.cli.transactions:command",
        "list, describe and abort transactions (kafka-transactions.sh)",
    ),
    "topics": ("odradek.cli.topics:topics", "create, list, describe, alter and delete topics"),
    "produce": ("odradek.cli.produce:produce", "send lines of standard input as records"),
    "consume": ("odradek.cli.consume:consume", "print records of a topic"),
    "groups": (
        "odradek.cli.groups:groups",
        "list, describe, reset and delete consumer groups",
    ),
    "configs": (
        "odradek.cli.configs:configs",
        "describe and alter topic, broker and group configs (kafka-configs.sh)",
    ),
    "perf": ("odradek.cli.perf:perf", "measure produce and consume throughput and latency"),
    "get-offsets": (
        "odradek.cli.get_offsets:get_offsets",
        "print partitions' offsets at a time (kafka-get-offsets.sh)",
    ),
    "delete-records": (
        "odradek.cli.delete_records:delete_records",
        "delete records before an offset (kafka-delete-records.sh)",
    ),
    "console": (
        "odradek.cli.console:command",
        "serve a web console over a Kafka-compatible cluster (needs odradek[console])",
    ),
    "completion": ("odradek.cli.main:completion", "print the shell completion script to eval"),
}
# The client tools: their client failures are one line with status 1 (tool_failure).
TOOLS = frozenset(
    {"topics", "produce", "consume", "groups", "configs", "perf", "get-offsets", "delete-records"}
)


class LazyGroup(ArgparseStyleGroup):
    """The root group: imports a command's module when the command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, _, attribute = COMMANDS[name][0].partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), COMMANDS[name]
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):  # from COMMANDS: no module imported for --help
            formatter.write_dl([(name, line) for name, (_, line) in COMMANDS.items()])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # 130 without a word (click's Abort prints a newline)
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except click.ClickException:
            raise
        except Exception as error:
            if ctx.invoked_subcommand not in TOOLS:
                raise
            from odradek.cli.common import tool_failure

            failure = tool_failure(error)
            if failure is None:
                raise
            raise failure from None


@click.group(
    PROG,
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="odradek: a Kafka-compatible streaming platform.",
)
@click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s %(version)s")
def cli() -> None:
    pass


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL: eval "$(odradek completion bash)"."""
    click.echo(_completer(shell).source())


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    instruction = os.environ.get(COMPLETE_VAR)
    if instruction:  # the completion script calling back
        return _complete(instruction)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        done = cli.main(args=kafka_action(argv), prog_name=PROG, standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as error:  # `odradek` or `odradek storage`
        show_usage_error(click.UsageError("Missing command.", error.ctx))
        return EXIT_USAGE
    except click.UsageError as error:
        show_usage_error(error)
        return error.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.exceptions.Exit as finished:  # --help, --version, ctx.exit(n)
        return finished.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):  # click makes Ctrl-C an Abort
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `odradek dump-log ... | head`
        _discard_stdout()
        return 1
    return done if isinstance(done, int) else 0


def _completer(shell: str) -> ShellComplete:
    """Click's completion for ``shell``, reading the line as ``main`` does: Kafka's
    action flags as subcommands, so ``topics --create --<TAB>`` offers create's flags."""
    base = get_completion_class(shell)
    if base is None:
        raise click.UsageError(f"no completion for shell {shell!r}: {', '.join(SHELLS)}")

    class KafkaSpelling(base):  # type: ignore[valid-type,misc]
        def get_completion_args(self) -> tuple[list[str], str]:
            args, incomplete = super().get_completion_args()
            return kafka_action(list(args)), incomplete

    completer: ShellComplete = KafkaSpelling(cli, {}, PROG, COMPLETE_VAR)
    return completer


def _complete(instruction: str) -> int:
    """Click's completion protocol: ``{shell}_source`` prints the script,
    ``{shell}_complete`` the completions of the line in COMP_WORDS/COMP_CWORD."""
    shell, _, action = instruction.partition("_")
    try:
        completer = _completer(shell)
    except click.UsageError as error:
        show_usage_error(error)
        return EXIT_USAGE
    if action == "source":
        click.echo(completer.source())
    elif action == "complete":
        click.echo(completer.complete())
    else:
        return EXIT_USAGE
    return 0


def _discard_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
