"""``odradek leader-election``: elect partition leaders, as ``kafka-leader-election.sh``.

How this works and why: after a broker comes back, the partitions it used to lead are
led by other replicas, so the load is lopsided until leadership moves back to each
partition's preferred replica (the first of its replica list; seeds/000 "Leader 均衡").
This tool asks for that — or, with ``--election-type UNCLEAN``, for an offline
partition to be led by an out-of-sync replica, losing what it lacks — with one
ElectLeaders request (API 43) to a broker, which forwards it to the active
controller, as Kafka's admin client does. Which partitions: ``--topic`` with
``--partition``, a JSON file (``{"partitions": [{"topic": "t", "partition": 0}]}``,
the tool's own format), or ``--all-topic-partitions`` (the request's null list: the
controller answers only the partitions it had to elect).

Output is the Kafka tool's: "Successfully completed leader election (PREFERRED) for
partitions t-0, t-1", "Valid replica already elected for partitions ..." (the
ELECTION_NOT_NEEDED ones), and one "Error completing leader election" line per
failure, which end the run with status 1; nothing when no partition needed an
election. Every failure is one line on stderr (bad arguments: status 2).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import click
from kio.schema.errors import ErrorCode

from odradek.cli.addresses import parse_addresses
from odradek.cli.common import client_sasl, client_ssl_context, command_config_option
from odradek.cli.subcommand import ArgparseStyleCommand, Args, invoke, one_of
from odradek.client._core.connection import (
    BrokerAddress,
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
    request_entity,
)

NAME: Final = "leader-election"
ELECT_LEADERS_KEY: Final = 43
ELECTION_TYPES: Final = {"PREFERRED": 0, "UNCLEAN": 1}
CLIENT_VERSIONS: Final = {18: (0, 3), ELECT_LEADERS_KEY: (0, 2)}
REQUEST_TIMEOUT_S: Final = 30.0


class ElectionToolError(Exception):
    """A failure to report in one line (exit status 1)."""


def run(args: Args) -> int:
    try:
        partitions = _partitions(args)
        addresses = parse_addresses("--bootstrap-server", args.bootstrap_server, ElectionToolError)
        kind = args.election_type
        results = asyncio.run(elect(addresses, ELECTION_TYPES[kind], partitions))
    except ElectionToolError as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return 1
    lines, failed = report(kind, results)
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    if failed:
        print(f"{NAME}: {failed} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


def report(kind: str, results: Sequence[tuple[str, int, str]]) -> tuple[list[str], int]:
    """The tool's lines for (topic, partition, error name) results; the failure count."""
    done = [f"{t}-{p}" for t, p, e in results if e == "NONE"]
    noop = [f"{t}-{p}" for t, p, e in results if e == "ELECTION_NOT_NEEDED"]
    failures = [(t, p, e) for t, p, e in results if e not in ("NONE", "ELECTION_NOT_NEEDED")]
    lines = []
    if done:
        lines.append(
            f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}"
        )
    if noop:
        lines.append(f"Valid replica already elected for partitions {', '.join(noop)}")
    for topic, partition, error in failures:
        lines.append(
            f"Error completing leader election ({kind}) for partition: {topic}-{partition}: {error}"
        )
    return lines, len(failures)


def _partitions(args: Args) -> list[tuple[str, int]] | None:
    if args.all_topic_partitions:
        if args.partition is not None:
            raise ElectionToolError("--partition goes with --topic only")
        return None
    if args.topic is not None:
        if args.partition is None:
            raise ElectionToolError("--partition is required with --topic")
        return [(args.topic, args.partition)]
    if args.partition is not None:
        raise ElectionToolError("--partition goes with --topic only")
    return read_json_file(Path(args.path_to_json_file))


def read_json_file(path: Path) -> list[tuple[str, int]]:
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise ElectionToolError(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise ElectionToolError(f"{path} is not JSON: {error}") from None
    items = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise ElectionToolError(f'{path}: expected {{"partitions": [...]}}')
    wanted = []
    for item in items:
        topic = item.get("topic") if isinstance(item, dict) else None
        partition = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
            raise ElectionToolError(f"{path}: bad entry {item!r} (topic and partition)")
        if (topic, partition) in wanted:
            raise ElectionToolError(f"{path}: partition {topic}-{partition} listed twice")
        wanted.append((topic, partition))
    if not wanted:
        raise ElectionToolError(f"{path}: no partitions listed")
    return wanted


async def elect(
    addresses: Sequence[tuple[str, int]],
    election_type: int,
    partitions: Sequence[tuple[str, int]] | None,
) -> list[tuple[str, int, str]]:
    """ElectLeaders through the first reachable broker: (topic, partition, error name)."""
    failures = []
    for host, port in addresses:
        connection = BrokerConnection(
            BrokerAddress(-1, host, port),
            client_id="odradek-leader-election",
            request_timeout_s=REQUEST_TIMEOUT_S + 5,
            client_versions=CLIENT_VERSIONS,
            ssl_context=client_ssl_context(),
            sasl=client_sasl(),
        )
        try:
            await connection.connect()
            return await _send(connection, election_type, partitions)
        except (KafkaConnectionError, OSError) as error:
            failures.append(f"cannot reach {host}:{port}: {error}")
        finally:
            await connection.close()
    raise ElectionToolError("; ".join(failures))


async def _send(
    connection: BrokerConnection,
    election_type: int,
    partitions: Sequence[tuple[str, int]] | None,
) -> list[tuple[str, int, str]]:
    try:
        version = connection.version_for(ELECT_LEADERS_KEY)
    except UnsupportedVersionError:
        raise ElectionToolError("the broker does not serve ElectLeaders") from None
    if version == 0 and election_type != ELECTION_TYPES["PREFERRED"]:
        raise ElectionToolError("the broker knows only preferred elections (ElectLeaders v0)")
    grouped: dict[str, list[int]] = {}
    for topic, index in partitions or ():
        grouped.setdefault(topic, []).append(index)
    wanted: Any = None
    if partitions is not None:
        wanted = tuple(
            request_entity(
                ELECT_LEADERS_KEY, version, "TopicPartitions", topic=t, partitions=tuple(ps)
            )
            for t, ps in grouped.items()
        )
    response = await connection.send(
        request_entity(
            ELECT_LEADERS_KEY,
            version,
            election_type=election_type,
            topic_partitions=wanted,
            timeout=datetime.timedelta(seconds=REQUEST_TIMEOUT_S),
        )
    )
    top = getattr(response, "error_code", ErrorCode.none)
    if top != ErrorCode.none:
        raise ElectionToolError(f"leader election failed: {top.name.upper()}")
    return [
        (result.topic, int(p.partition_id), p.error_code.name.upper())
        for result in response.replica_election_results
        for p in result.partition_result
    ]


@click.command(
    NAME,
    cls=ArgparseStyleCommand,
    short_help="elect preferred or unclean partition leaders (kafka-leader-election.sh)",
    help="Move partition leadership to the preferred replica (PREFERRED) or let "
    "an out-of-sync replica lead an offline partition (UNCLEAN), like Kafka's "
    "kafka-leader-election.sh.",
)
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]", help="brokers")
@command_config_option
@click.option(
    "--election-type",
    required=True,
    type=click.Choice(sorted(ELECTION_TYPES), case_sensitive=False),
    help="PREFERRED or UNCLEAN",
)
@click.option("--topic", help="the topic of the partition to elect a leader for")
@click.option("--all-topic-partitions", is_flag=True, help="every partition of every topic")
@click.option(
    "--path-to-json-file",
    metavar="FILE",
    help='a JSON file: {"partitions": [{"topic": "t", "partition": 0}, ...]}',
)
@click.option("--partition", type=int, help="partition id (required with --topic)")
def command(**params: Any) -> int:
    one_of(params, ["--topic", "--all-topic-partitions", "--path-to-json-file"])
    return invoke(run, params)
