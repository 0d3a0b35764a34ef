"""Kafka's spelling of the client tools' actions: ``topics --create`` for ``topics create``.

How this works and why: Kafka's tools name the action as a flag (``kafka-topics.sh
--create ...``) where odradek's name it as a subcommand; ``main`` rewrites the first
action flag to its subcommand before click parses the line, so both spellings reach
the same command and the flag may stand anywhere on the line, as in Kafka.
"""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem

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
    from odradek.cli.main import cli  # main imports this module: resolve at call time

    command = cli.get_command(click.Context(cli), argv[0])
    if isinstance(command, click.Group) and argv[1] in command.commands:
        return argv
    for index, word in enumerate(argv[1:], start=1):
        if word in actions:
            return [argv[0], actions[word], *argv[1:index], *argv[index + 1 :]]
    return argv


class KafkaActionGroup(click.Group):
    """A tool group whose completion offers Kafka's action flags (``topics --cr<TAB>``)
    next to its subcommands; ``main``'s completion rewrites them as ``kafka_action``
    does, so the chosen action's own flags complete after it."""

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        items = super().shell_complete(ctx, incomplete)
        if incomplete.startswith("-"):
            flags = KAFKA_ACTIONS.get(self.name or "", {})
            items += [
                CompletionItem(flag, help=f"as {self.name} {action}")
                for flag, action in flags.items()
                if flag.startswith(incomplete)
            ]
        return items
