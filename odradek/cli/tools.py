"""The click half of the ``odradek`` command: the client tools.

How this works and why: ``main`` (argparse, for ``serve`` and ``dump-log``) hands the
command line to ``run_tools`` when its first word is in ``TOOL_COMMANDS``. Each tool
group lives in its own module and is added here; ``run_tools`` runs click in
standalone mode and returns the exit status instead of exiting.
"""

from __future__ import annotations

import click

from odradek.cli import configs, consume, groups, perf, produce, topics
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
):
    tools.add_command(_command)

TOOL_HELP: dict[str, str] = {
    name: command.get_short_help_str(70) or name for name, command in tools.commands.items()
}


def run_tools(argv: list[str]) -> int:
    try:
        tools.main(args=argv, prog_name="odradek", standalone_mode=True)
    except SystemExit as done:
        code = done.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0
