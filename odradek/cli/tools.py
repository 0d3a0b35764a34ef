"""The click half of the ``odradek`` command: the client tools.

How this works and why: ``main`` (argparse, for ``serve`` and ``dump-log``) hands the
command line to ``run_tools`` when its first word is in ``TOOL_COMMANDS``. Each tool
group lives in its own module and is added here; ``run_tools`` runs click in
standalone mode and returns the exit status instead of exiting.
"""

from __future__ import annotations

import click

from odradek.cli import configs, consume, delete_records, get_offsets, groups, perf, produce, topics
from odradek.cli.common import ToolGroup


@click.group(cls=ToolGroup, context_settings={"help_option_names": ["-h", "--help"]})
def tools() -> None:
    """odradek client tools."""


for _command in (
    topics.topics,
    produce.produce,
    consume.consume,
    groups.groups,
    configs.configs,
    perf.perf,
    get_offsets.get_offsets,
    delete_records.delete_records,
):
    tools.add_command(_command)

TOOL_HELP: dict[str, str] = {
    name: command.get_short_help_str(70) or name for name, command in tools.commands.items()
}


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C

# Kafka's tools name the action as a flag (kafka-topics.sh --create ...): the flag
# stands for the subcommand when no subcommand is named.
KAFKA_ACTIONS: dict[str, dict[str, str]] = {
    "topics": {
        "--create": "create",
        "--list": "list",
        "--describe": "describe",
        "--delete": "delete",
        "--alter": "alter",
    },
    "groups": {
        "--list": "list",
        "--describe": "describe",
        "--delete": "delete",
        "--reset-offsets": "reset-offsets",
    },
    "configs": {"--describe": "describe", "--alter": "alter"},
}


def kafka_action(argv: list[str]) -> list[str]:
    """``topics --list -b B`` as ``topics list -b B`` (the first action flag only)."""
    actions = KAFKA_ACTIONS.get(argv[0]) if argv else None
    if not actions or len(argv) < 2:
        return argv
    command = tools.commands[argv[0]]
    if isinstance(command, click.Group) and argv[1] in command.commands:
        return argv
    for index, word in enumerate(argv[1:], start=1):
        if word in actions:
            return [argv[0], actions[word], *argv[1:index], *argv[index + 1 :]]
    return argv


def run_tools(argv: list[str]) -> int:
    """Run one client tool; its exit status. Ctrl-C exits 130 without a word (click
    would print "Aborted!" and exit 1)."""
    try:
        done = tools.main(args=kafka_action(argv), prog_name="odradek", standalone_mode=False)
    except click.exceptions.Abort:
        return EXIT_INTERRUPTED
    except click.exceptions.Exit as finished:
        return finished.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
    return done if isinstance(done, int) else 0
