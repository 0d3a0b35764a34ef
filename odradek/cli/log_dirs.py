"""``odradek log-dirs`` and the log-dir half of ``reassign-partitions`` (KIP-113).

How this works and why: where a replica lives among a broker's ``log.dirs`` is the
broker's own business, so unlike a reassignment (one request to the controller) both
tools talk to each broker named, at the address its Metadata entry gives:

- ``odradek log-dirs --describe --bootstrap-server H:P [--broker-list 1,2]
  [--topic-list a,b]`` is Kafka's ``kafka-log-dirs.sh``: DescribeLogDirs to each
  broker, printed as Kafka prints it — "Querying brokers for log directories
  information", "Received log directory information from brokers 1,2", then one JSON
  line ``{"brokers":[{"broker":1,"logDirs":[{"logDir":...,"error":null,"partitions":
  [{"partition":"t-0","size":...,"offsetLag":0,"isFuture":false}]}]}],"version":1}``.
- ``reassign-partitions --execute`` with a plan whose ``log_dirs`` name absolute paths
  sends each broker AlterReplicaLogDirs for its replicas (``move_replicas``), again
  every 100 ms for those answered REPLICA_NOT_AVAILABLE (a replica the reassignment
  has not created yet; the broker remembers the dir) until ``--timeout``, as Kafka's
  tool does. ``--verify`` asks DescribeLogDirs where each replica is
  (``verify_replicas``): completed, still in progress (a future replica in the
  target dir), or not being moved.

A replica is named ``topic-partition-broker``, as Kafka's TopicPartitionReplica prints.
Every failure is a ``LogDirToolError`` (one line, status 1).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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

NAME: Final = "log-dirs"
METADATA_KEY: Final = 3
ALTER_REPLICA_LOG_DIRS_KEY: Final = 34
DESCRIBE_LOG_DIRS_KEY: Final = 35
CLIENT_VERSIONS: Final = {
    18: (0, 3),
    METADATA_KEY: (1, 12),
    ALTER_REPLICA_LOG_DIRS_KEY: (1, 2),
    DESCRIBE_LOG_DIRS_KEY: (1, 4),
}
REQUEST_TIMEOUT_S: Final = 30.0
RETRY_S: Final = 0.1
DEFAULT_TIMEOUT_MS: Final = 10_000  # kafka-reassign-partitions.sh --timeout

Replica = tuple[str, int, int]  # topic, partition, broker


class LogDirToolError(Exception):
    """A failure to report in one line (exit status 1)."""


def replica_name(replica: Replica) -> str:
    return f"{replica[0]}-{replica[1]}-{replica[2]}"


@dataclass(frozen=True, slots=True)
class ReplicaDir:
    """Where DescribeLogDirs found one replica on its broker."""

    log_dir: str
    size: int
    offset_lag: int
    future: bool


# -- the wire ------------------------------------------------------------------------------
async def _connect(address: BrokerAddress) -> BrokerConnection:
    connection = BrokerConnection(
        address,
        client_id="odradek-log-dirs",
        request_timeout_s=REQUEST_TIMEOUT_S + 5,
        client_versions=CLIENT_VERSIONS,
        ssl_context=client_ssl_context(),
        sasl=client_sasl(),
    )
    try:
        await connection.connect()
    except (KafkaConnectionError, OSError) as error:
        await connection.close()
        raise LogDirToolError(f"cannot reach {address.host}:{address.port}: {error}") from None
    return connection


async def _send(connection: BrokerConnection, key: int, api: str, **fields: Any) -> Any:
    try:
        version = connection.version_for(key)
    except UnsupportedVersionError:
        raise LogDirToolError(f"broker {connection.address.node_id} does not serve {api}") from None
    try:
        return await connection.send(request_entity(key, version, **fields))
    except (KafkaConnectionError, OSError) as error:
        raise LogDirToolError(f"the broker connection failed: {error}") from None


def _entity(connection: BrokerConnection, key: int, class_name: str, **fields: Any) -> Any:
    return request_entity(key, connection.version_for(key), class_name, **fields)


async def brokers(addresses: Sequence[tuple[str, int]]) -> dict[int, BrokerAddress]:
    """Every broker's id and address, from Metadata of the first reachable bootstrap."""
    failures = []
    for host, port in addresses:
        try:
            connection = await _connect(BrokerAddress(-1, host, port))
        except LogDirToolError as error:
            failures.append(str(error))
            continue
        try:
            response = await _send(
                connection,
                METADATA_KEY,
                "Metadata",
                topics=(),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        finally:
            await connection.close()
        return {
            int(b.node_id): BrokerAddress(int(b.node_id), b.host, int(b.port))
            for b in response.brokers
        }
    raise LogDirToolError("; ".join(failures))


async def describe(
    address: BrokerAddress, topics: Sequence[str] | None
) -> list[tuple[str, str | None, dict[tuple[str, int], list[ReplicaDir]]]]:
    """DescribeLogDirs of one broker: (log dir, error or None, partition → entries)."""
    connection = await _connect(address)
    try:
        # every partition (a request names partitions); topics are filtered here, as
        # kafka-log-dirs.sh filters them
        response = await _send(connection, DESCRIBE_LOG_DIRS_KEY, "DescribeLogDirs", topics=None)
    finally:
        await connection.close()
    results = []
    for result in response.results:
        error = None if result.error_code == ErrorCode.none else result.error_code.name.upper()
        partitions: dict[tuple[str, int], list[ReplicaDir]] = {}
        for topic in result.topics:
            if topics is not None and topic.name not in topics:
                continue
            for p in topic.partitions:
                partitions.setdefault((topic.name, int(p.partition_index)), []).append(
                    ReplicaDir(
                        result.log_dir,
                        int(p.partition_size),
                        int(p.offset_lag),
                        bool(p.is_future_key),
                    )
                )
        results.append((result.log_dir, error, partitions))
    return results


async def alter(address: BrokerAddress, moves: Mapping[tuple[str, int], str]) -> dict[Any, str]:
    """AlterReplicaLogDirs to one broker: (topic, partition) → Kafka error name."""
    connection = await _connect(address)
    try:
        by_dir: dict[str, dict[str, list[int]]] = {}
        for (topic, index), path in moves.items():
            by_dir.setdefault(path, {}).setdefault(topic, []).append(index)
        key = ALTER_REPLICA_LOG_DIRS_KEY
        response = await _send(
            connection,
            key,
            "AlterReplicaLogDirs",
            dirs=tuple(
                _entity(
                    connection,
                    key,
                    "AlterReplicaLogDir",
                    path=path,
                    topics=tuple(
                        _entity(
                            connection,
                            key,
                            "AlterReplicaLogDirTopic",
                            name=name,
                            partitions=tuple(indexes),
                        )
                        for name, indexes in topics.items()
                    ),
                )
                for path, topics in by_dir.items()
            ),
        )
    finally:
        await connection.close()
    return {
        (topic.topic_name, int(p.partition_index)): p.error_code.name.upper()
        for topic in response.results
        for p in topic.partitions
    }


# -- reassign-partitions' log dirs -------------------------------------------------------------
async def move_replicas(
    addresses: Sequence[tuple[str, int]],
    moves: Mapping[Replica, str],
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> tuple[list[str], int]:
    """Ask each replica's broker to put it in its dir; retry REPLICA_NOT_AVAILABLE
    until ``timeout_ms``. Returns the output lines and the number of failures."""
    known = await brokers(addresses)
    unknown = sorted({b for _, _, b in moves if b not in known})
    if unknown:
        raise LogDirToolError(f"log_dirs name replicas on unknown broker(s) {unknown}")
    pending = dict(moves)
    failed: dict[Replica, str] = {}
    started: list[Replica] = []
    deadline = time.monotonic() + timeout_ms / 1000
    while pending:
        by_broker: dict[int, dict[tuple[str, int], str]] = {}
        for (topic, index, broker), path in pending.items():
            by_broker.setdefault(broker, {})[(topic, index)] = path
        for broker, wanted in by_broker.items():
            answers = await alter(known[broker], wanted)
            for (topic, index), code in answers.items():
                replica = (topic, index, broker)
                if code == "NONE":
                    started.append(replica)
                    pending.pop(replica, None)
                elif code != "REPLICA_NOT_AVAILABLE":
                    failed[replica] = code
                    pending.pop(replica, None)
        if not pending or time.monotonic() >= deadline:
            break
        await asyncio.sleep(RETRY_S)
    for replica in pending:
        failed[replica] = "REPLICA_NOT_AVAILABLE"
    lines = []
    if started:
        plural = "" if len(started) == 1 else "s"
        names = ",".join(replica_name(r) for r in sorted(started))
        lines.append(f"Successfully started log directory move{plural} for: {names}")
    if failed:
        lines.append("Error moving replica(s) between log directories:")
        lines += [f"{replica_name(r)}: {code}" for r, code in sorted(failed.items())]
    return lines, len(failed)


async def verify_replicas(
    addresses: Sequence[tuple[str, int]], moves: Mapping[Replica, str]
) -> tuple[list[str], bool]:
    """Where each replica is: the output lines, and whether every move is done."""
    known = await brokers(addresses)
    found: dict[int, dict[tuple[str, int], list[ReplicaDir]]] = {}
    for broker in sorted({b for _, _, b in moves}):
        if broker not in known:
            found[broker] = {}
            continue
        merged: dict[tuple[str, int], list[ReplicaDir]] = {}
        topics = sorted({t for t, _, b in moves if b == broker})
        for _, _, partitions in await describe(known[broker], topics):
            for tp, entries in partitions.items():
                merged.setdefault(tp, []).extend(entries)
        found[broker] = merged
    lines, done = [], True
    for replica, target in sorted(moves.items()):
        topic, index, broker = replica
        entries = found[broker].get((topic, index), [])
        current = next((e.log_dir for e in entries if not e.future), None)
        future = next((e.log_dir for e in entries if e.future), None)
        if current == target and future is None:
            lines.append(f"Reassignment of replica {replica_name(replica)} completed successfully.")
            continue
        done = False
        if current is None:
            lines.append(
                f"Partition {topic}-{index} is not found in any live log dir on broker "
                f"{broker}. There is likely an offline log directory on the broker."
            )
        elif future == target:
            lines.append(f"Reassignment of replica {replica_name(replica)} is still in progress.")
        elif future is not None:
            lines.append(
                f"Partition {topic}-{index} on broker {broker} is being moved to log dir "
                f"{future} instead of {target}."
            )
        else:
            lines.append(
                f"Partition {topic}-{index} on broker {broker} is not being moved from log "
                f"dir {current} to {target}."
            )
    return lines, done


# -- odradek log-dirs ----------------------------------------------------------------------
def run(args: Args) -> int:
    try:
        addresses = parse_addresses("--bootstrap-server", args.bootstrap_server, LogDirToolError)
        wanted = None if not args.broker_list else parse_broker_list(args.broker_list)
        topics = None if not args.topic_list else [t for t in args.topic_list.split(",") if t]
        lines = asyncio.run(_describe_all(addresses, wanted, topics))
    except LogDirToolError as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


async def _describe_all(
    addresses: Sequence[tuple[str, int]], wanted: list[int] | None, topics: list[str] | None
) -> list[str]:
    known = await brokers(addresses)
    ids = sorted(known) if wanted is None else wanted
    unknown = [b for b in ids if b not in known]
    if unknown:
        raise LogDirToolError(f"--broker-list names unknown broker(s) {unknown}")
    described = []
    for broker in ids:
        dirs = await describe(known[broker], topics)
        described.append(
            {
                "broker": broker,
                "logDirs": [
                    {
                        "logDir": log_dir,
                        "error": error,
                        "partitions": [
                            {
                                "partition": f"{topic}-{index}",
                                "size": entry.size,
                                "offsetLag": entry.offset_lag,
                                "isFuture": entry.future,
                            }
                            for (topic, index), entries in sorted(partitions.items())
                            for entry in entries
                        ],
                    }
                    for log_dir, error, partitions in dirs
                ],
            }
        )
    return [
        "Querying brokers for log directories information",
        f"Received log directory information from brokers {','.join(str(b) for b in ids)}",
        json.dumps({"brokers": described, "version": 1}, separators=(",", ":")),
    ]


def parse_broker_list(text: str) -> list[int]:
    ids = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit():
            raise LogDirToolError(f"--broker-list: {item!r} is not a broker id")
        if int(item) not in ids:
            ids.append(int(item))
    return ids


@click.command(
    NAME,
    cls=ArgparseStyleCommand,
    short_help="describe the log dirs of brokers and the replicas in them (kafka-log-dirs.sh)",
    help="Query brokers for their log dirs and the size of every replica in "
    "them, as kafka-log-dirs.sh --describe.",
)
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]", help="brokers")
@command_config_option
@click.option("--describe", is_flag=True, help="describe (required)")
@click.option("--broker-list", metavar="ID[,ID]", help="brokers to ask (default: all)")
@click.option("--topic-list", metavar="TOPIC[,TOPIC]", help="topics (default: all)")
def command(**params: Any) -> int:
    one_of(params, ["--describe"])
    return invoke(run, params)
