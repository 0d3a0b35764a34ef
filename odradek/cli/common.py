"""Shared pieces of the client tools (``topics``, ``produce``, ``consume``, ...).

How this works and why: the client tools are click commands (the older ``serve`` and
``dump-log`` stay argparse; ``main`` routes by the first word). ``ToolGroup`` turns
every client-side failure (a broker error, an unreachable bootstrap, a bad value)
into click's one-line ``Error: ...`` with exit status 1, so no tool ever prints a
traceback; bad arguments stay click's usage errors (status 2). ``Session`` is a small
synchronous wrapper over the client's asyncio ``Cluster`` for the requests the
``AdminClient`` does not offer yet (groups, offsets, configs): it runs a private event
loop and builds each request at a pinned version the broker supports.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

import click
from kio.schema.errors import ErrorCode
from rich.console import Console
from rich.table import Table

from odradek.client.cluster import Cluster, KafkaError
from odradek.client.config import ConfigError
from odradek.client.connection import (
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
    request_entity,
)
from odradek.client.types import KafkaException

T = TypeVar("T")
DEFAULT_BOOTSTRAP = "localhost:9092"

LIST_OFFSETS = 2
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
LIST_GROUPS = 16
DESCRIBE_GROUPS = 15
DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
DELETE_GROUPS = 42
# One pinned version per API: the request shapes below are written for these.
VERSIONS: dict[int, tuple[int, int]] = {
    LIST_OFFSETS: (7, 7),
    OFFSET_COMMIT: (7, 7),
    OFFSET_FETCH: (7, 7),
    FIND_COORDINATOR: (3, 3),
    LIST_GROUPS: (4, 4),
    DESCRIBE_GROUPS: (5, 5),
    DESCRIBE_CONFIGS: (4, 4),
    INCREMENTAL_ALTER_CONFIGS: (1, 1),
    DELETE_GROUPS: (2, 2),
}
EARLIEST = -2
LATEST = -1


class CliError(Exception):
    """A failure to report as one line with exit status 1."""


FAILURES = (
    CliError,
    KafkaException,
    KafkaError,
    KafkaConnectionError,
    UnsupportedVersionError,
    ConfigError,
    ConnectionError,
    OSError,
    TimeoutError,
)


def describe_failure(error: BaseException) -> str:
    inner = getattr(error, "error", None)
    if isinstance(error, KafkaException) and inner is not None and inner is not error:
        error = inner
    text = str(error).strip() or type(error).__name__
    return " ".join(text.split())


class ToolGroup(click.Group):
    """A click group whose commands report client failures as one line, exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FAILURES as error:
            raise click.ClickException(describe_failure(error)) from None
        except BrokenPipeError:
            raise
        except (ValueError, KeyError) as error:
            raise click.ClickException(f"{type(error).__name__}: {error}") from None


def bootstrap_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--bootstrap-server",
        "-b",
        "bootstrap",
        default=DEFAULT_BOOTSTRAP,
        show_default=True,
        help="host:port of a broker to start from",
    )(function)


def output_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--output",
        "-o",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="table for people, json for scripts",
    )(function)


def parse_pairs(items: Iterable[str], what: str = "config") -> dict[str, str]:
    """``k=v`` strings (each may hold several, comma-separated) to a dict."""
    pairs: dict[str, str] = {}
    for item in items:
        for part in item.split(","):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise click.BadParameter(f"{part!r} is not KEY=VALUE", param_hint=what)
            pairs[key] = value
    return pairs


def emit(
    output: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], title: str | None = None
) -> None:
    """Print rows as a rich table (``table``) or a JSON list (``json``)."""
    if output == "json":
        click.echo(json.dumps(list(rows), default=str))
        return
    table = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.upper().replace("_", "-"), overflow="fold")
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    Console(width=max(Console().width, 120) if not sys.stdout.isatty() else None).print(table)


def check(code: ErrorCode, what: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        raise CliError(f"{what}: {code.name.upper()}{': ' + message if message else ''}")


class Session:
    """Synchronous raw requests through a ``Cluster`` on a private event loop."""

    def __init__(self, bootstrap: str, timeout_s: float = 30.0) -> None:
        self.loop = asyncio.new_event_loop()
        self.timeout_s = timeout_s

        async def build() -> Cluster:
            return Cluster(
                bootstrap,
                client_id="odradek-cli",
                request_timeout_ms=int(timeout_s * 1000),
                client_versions=VERSIONS,
            )

        self.cluster: Cluster = self.loop.run_until_complete(build())

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.cluster.close())
        finally:
            self.loop.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------
    def send(self, api_key: int, node: int | None = None, **fields: Any) -> Any:
        async def go() -> Any:
            connection: BrokerConnection
            if node is None:
                connection = await self.cluster.any_connection()
            else:
                connection = await self.cluster.connection(node)
            version = connection.version_for(api_key)
            return await connection.send(request_entity(api_key, version, **fields))

        return self.run(go())

    def entity(self, api_key: int, class_name: str, **fields: Any) -> Any:
        return request_entity(api_key, VERSIONS[api_key][1], class_name, **fields)

    def metadata(self, topics: list[str] | None = None) -> Any:
        return self.run(self.cluster.refresh(topics))

    def coordinator(self, group: str) -> int:
        response = self.send(FIND_COORDINATOR, key=group, key_type=0)
        check(response.error_code, f"group {group}", response.error_message)
        return int(response.node_id)

    # -- offsets ---------------------------------------------------------------------
    def list_offsets(self, wanted: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Offsets for ``{(topic, partition): timestamp}`` (-2 earliest, -1 latest)."""
        if not wanted:
            return {}
        metadata = self.metadata(sorted({t for t, _ in wanted}))
        by_leader: dict[int, dict[tuple[str, int], int]] = {}
        for (topic, partition), ts in wanted.items():
            info = metadata.topics.get(topic)
            if info is None or partition not in info.partitions:
                raise CliError(f"unknown partition {topic}-{partition}")
            by_leader.setdefault(info.partitions[partition].leader, {})[(topic, partition)] = ts
        found: dict[tuple[str, int], int] = {}
        for leader, part in by_leader.items():
            topics: dict[str, list[Any]] = {}
            for (topic, partition), ts in part.items():
                topics.setdefault(topic, []).append(
                    self.entity(
                        LIST_OFFSETS,
                        "ListOffsetsPartition",
                        partition_index=partition,
                        current_leader_epoch=-1,
                        timestamp=ts,
                    )
                )
            response = self.send(
                LIST_OFFSETS,
                node=leader,
                replica_id=-1,
                isolation_level=0,
                topics=tuple(
                    self.entity(LIST_OFFSETS, "ListOffsetsTopic", name=t, partitions=tuple(ps))
                    for t, ps in topics.items()
                ),
            )
            for topic in response.topics:
                for p in topic.partitions:
                    check(p.error_code, f"{topic.name}-{p.partition_index}")
                    found[(topic.name, p.partition_index)] = int(p.offset)
        return found

    def committed(self, group: str, node: int | None = None) -> dict[tuple[str, int], int]:
        """All offsets ``group`` committed."""
        node = self.coordinator(group) if node is None else node
        response = self.send(
            OFFSET_FETCH, node=node, group_id=group, topics=None, require_stable=False
        )
        check(response.error_code, f"group {group}")
        offsets: dict[tuple[str, int], int] = {}
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.none and p.committed_offset >= 0:
                    offsets[(topic.name, p.partition_index)] = int(p.committed_offset)
        return offsets

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        node = self.coordinator(group)
        topics: dict[str, list[Any]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append(
                self.entity(
                    OFFSET_COMMIT,
                    "OffsetCommitRequestPartition",
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata="",
                )
            )
        response = self.send(
            OFFSET_COMMIT,
            node=node,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=tuple(
                self.entity(OFFSET_COMMIT, "OffsetCommitRequestTopic", name=t, partitions=tuple(ps))
                for t, ps in topics.items()
            ),
        )
        for topic in response.topics:
            for p in topic.partitions:
                check(p.error_code, f"commit {topic.name}-{p.partition_index}")
