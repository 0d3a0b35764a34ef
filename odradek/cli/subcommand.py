"""The argparse plumbing every ``odradek`` subcommand module shares.

How this works and why: ``main.py`` lists the subcommand modules and each module
types its ``add_parser`` with ``Subparsers``; keeping both names here (imported by
nobody's implementation) means a subcommand never imports ``main.py``, which imports
it, so there is no import cycle. The click tools have their own helper module
(``common.py``), which imports the client; this one imports nothing but argparse.
"""

from __future__ import annotations

import argparse
from typing import Protocol, TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class Subcommand(Protocol):
    """What a subcommand module provides (a module satisfies this protocol)."""

    def add_parser(self, subparsers: Subparsers) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...
