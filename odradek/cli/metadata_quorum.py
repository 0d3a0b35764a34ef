"""``odradek metadata-quorum``: the KRaft quorum's state, as ``kafka-metadata-quorum.sh``.

How this works and why: ``describe --status`` and ``describe --replication`` print what
Kafka's tool prints, from the same two requests Kafka's admin client sends to a
controller listener (``--bootstrap-controller``, KIP-919): DescribeCluster with
endpoint type 2 names the cluster id, the active controller and every voter's address,
and DescribeQuorum, sent to the active controller, gives the leader epoch, the high
watermark and each voter's and observer's log end offset and fetch times. Lag is the
leader's log end offset minus the replica's; ``MaxFollowerLagTimeMs`` is how long
before the leader the most lagging voter was last caught up (0 when the leader is the
most lagging, -1 when a time is unknown), as Kafka computes them.

``--bootstrap-server`` names a broker listener instead: DescribeCluster (broker
endpoints) gives the cluster id, and DescribeQuorum sent to that broker is forwarded
by it to the active controller, as Kafka's brokers do; the voters' controller
addresses come from the response's ``nodes`` (v2). Observers — broker-only nodes
replicating the metadata log — are listed with Status Observer.
Every failure is one line on stderr with exit status 1 (bad arguments: 2).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import click
from kio.schema.errors import ErrorCode

from odradek.cli.addresses import parse_addresses
from odradek.cli.common import client_sasl, client_ssl_context, command_config_option
from odradek.cli.subcommand import ArgparseStyleGroup, Args, invoke, one_of
from odradek.client._core.connection import (
    BrokerAddress,
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
    request_entity,
)

NAME: Final = "metadata-quorum"
DESCRIBE_QUORUM_KEY: Final = 55
DESCRIBE_CLUSTER_KEY: Final = 60
CONTROLLERS_ENDPOINT: Final = 2  # DescribeCluster endpoint type (KIP-919)
BROKERS_ENDPOINT: Final = 1
CLIENT_VERSIONS: Final = {18: (0, 3), DESCRIBE_QUORUM_KEY: (0, 2), DESCRIBE_CLUSTER_KEY: (1, 1)}
REQUEST_TIMEOUT_S: Final = 10.0
LABEL_WIDTH: Final = 24  # Kafka's tool aligns "ClusterId:" .. "CurrentObservers:" values


class QuorumToolError(Exception):
    """A failure to report in one line (exit status 1)."""


@dataclass(frozen=True, slots=True)
class Replica:
    node_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int
    status: str  # Leader, Follower or Observer


@dataclass(frozen=True, slots=True)
class Quorum:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[Replica, ...]
    observers: tuple[Replica, ...]
    endpoints: dict[int, str]  # voter id -> "CONTROLLER://host:port"


# -- command line ----------------------------------------------------------------------------


def run(args: Args) -> int:
    try:
        if args.bootstrap_server is not None:
            addresses = parse_addresses(
                "--bootstrap-server", args.bootstrap_server, QuorumToolError
            )
            quorum = asyncio.run(describe_through_brokers(addresses))
        else:
            addresses = parse_addresses(
                "--bootstrap-controller", args.bootstrap_controller, QuorumToolError
            )
            quorum = asyncio.run(describe(addresses))
    except QuorumToolError as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return 1
    lines = status_lines(quorum) if args.status else replication_lines(quorum)
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


# -- requests ----------------------------------------------------------------------------------


async def _connect(host: str, port: int) -> BrokerConnection:
    connection = BrokerConnection(
        BrokerAddress(-1, host, port),
        client_id="odradek-metadata-quorum",
        request_timeout_s=REQUEST_TIMEOUT_S,
        client_versions=CLIENT_VERSIONS,
        ssl_context=client_ssl_context(),
        sasl=client_sasl(),
    )
    try:
        await connection.connect()
    except (KafkaConnectionError, OSError) as error:
        raise QuorumToolError(f"cannot reach {host}:{port}: {error}") from None
    return connection


async def _ask(connection: BrokerConnection, api_key: int, **fields: Any) -> Any:
    address = f"{connection.address.host}:{connection.address.port}"
    try:
        version = connection.version_for(api_key)
    except UnsupportedVersionError:
        raise QuorumToolError(f"{address} does not serve API {api_key}") from None
    try:
        return await connection.send(request_entity(api_key, version, **fields))
    except (KafkaConnectionError, OSError) as error:
        raise QuorumToolError(f"{address}: {error}") from None


async def describe(addresses: Sequence[tuple[str, int]]) -> Quorum:
    """Ask the first reachable controller who leads, then ask the leader."""
    return await _first_reachable(addresses, _describe_through)


async def describe_through_brokers(addresses: Sequence[tuple[str, int]]) -> Quorum:
    """Ask the first reachable broker; it forwards DescribeQuorum to the active controller."""
    return await _first_reachable(addresses, _describe_through_broker)


async def _first_reachable(
    addresses: Sequence[tuple[str, int]], ask: Callable[[str, int], Awaitable[Quorum]]
) -> Quorum:
    failures = []
    for host, port in addresses:
        try:
            return await ask(host, port)
        except QuorumToolError as error:
            failures.append(str(error))
    raise QuorumToolError("; ".join(failures))


async def _describe_through_broker(host: str, port: int) -> Quorum:
    connection = await _connect(host, port)
    try:
        cluster = await _ask(
            connection,
            DESCRIBE_CLUSTER_KEY,
            include_cluster_authorized_operations=False,
            endpoint_type=BROKERS_ENDPOINT,
        )
        if cluster.error_code != ErrorCode.none:
            raise QuorumToolError(
                f"{host}:{port}: {cluster.error_code.name}: {cluster.error_message or ''}".rstrip()
            )
        response = await _ask_quorum(connection)
    finally:
        await connection.close()
    voters = {
        node.node_id: (node.listeners[0].host, node.listeners[0].port)
        for node in getattr(response, "nodes", ())
        if node.listeners
    }
    return _quorum(cluster.cluster_id, response, voters, f"{host}:{port}")


async def _ask_quorum(connection: BrokerConnection) -> Any:
    try:
        version = connection.version_for(DESCRIBE_QUORUM_KEY)
    except UnsupportedVersionError:
        address = f"{connection.address.host}:{connection.address.port}"
        raise QuorumToolError(f"{address} does not serve DescribeQuorum") from None
    partition = request_entity(DESCRIBE_QUORUM_KEY, version, "PartitionData", partition_index=0)
    topic = request_entity(
        DESCRIBE_QUORUM_KEY,
        version,
        "TopicData",
        topic_name="__cluster_metadata",
        partitions=(partition,),
    )
    return await _ask(connection, DESCRIBE_QUORUM_KEY, topics=(topic,))


async def _describe_through(host: str, port: int) -> Quorum:
    connection = await _connect(host, port)
    try:
        cluster = await _ask(
            connection,
            DESCRIBE_CLUSTER_KEY,
            include_cluster_authorized_operations=False,
            endpoint_type=CONTROLLERS_ENDPOINT,
        )
    finally:
        await connection.close()
    if cluster.error_code != ErrorCode.none:
        raise QuorumToolError(
            f"{host}:{port}: {cluster.error_code.name}: {cluster.error_message or ''}".rstrip()
        )
    voters = {b.broker_id: (b.host, b.port) for b in cluster.brokers}
    leader = cluster.controller_id
    if leader < 0 or leader not in voters:
        raise QuorumToolError(f"{host}:{port}: the quorum has no leader now (an election?)")
    leader_host, leader_port = voters[leader]
    connection = await _connect(leader_host, leader_port)
    try:
        response = await _ask_quorum(connection)
    finally:
        await connection.close()
    return _quorum(cluster.cluster_id, response, voters, f"{leader_host}:{leader_port}")


def _quorum(
    cluster_id: str, response: Any, voters: dict[int, tuple[str, int]], asked: str
) -> Quorum:
    if response.error_code != ErrorCode.none:
        raise QuorumToolError(f"{asked}: {response.error_code.name}")
    partition = response.topics[0].partitions[0]
    if partition.error_code != ErrorCode.none:
        raise QuorumToolError(f"{asked}: {partition.error_code.name} (leadership moved; try again)")
    leader = partition.leader_id

    def replica(state: Any, status: str) -> Replica:
        return Replica(
            state.replica_id,
            state.log_end_offset,
            getattr(state, "last_fetch_timestamp", -1),
            getattr(state, "last_caught_up_timestamp", -1),
            status,
        )

    return Quorum(
        cluster_id=cluster_id,
        leader_id=leader,
        leader_epoch=partition.leader_epoch,
        high_watermark=partition.high_watermark,
        voters=tuple(
            replica(v, "Leader" if v.replica_id == leader else "Follower")
            for v in partition.current_voters
        ),
        observers=tuple(replica(o, "Observer") for o in partition.observers),
        endpoints={node: f"CONTROLLER://{h}:{p}" for node, (h, p) in voters.items()},
    )


# -- output ------------------------------------------------------------------------------------


def _leader(quorum: Quorum) -> Replica:
    for voter in quorum.voters:
        if voter.node_id == quorum.leader_id:
            return voter
    raise QuorumToolError(f"the leader {quorum.leader_id} is not among the voters it reported")


def status_lines(quorum: Quorum) -> list[str]:
    leader = _leader(quorum)
    most_lagging = min(quorum.voters, key=lambda v: (v.log_end_offset, v.node_id))
    lag = leader.log_end_offset - most_lagging.log_end_offset
    if most_lagging.node_id == leader.node_id or lag == 0:
        lag_time_ms = 0
    elif leader.last_caught_up_timestamp < 0 or most_lagging.last_caught_up_timestamp < 0:
        lag_time_ms = -1
    else:
        lag_time_ms = leader.last_caught_up_timestamp - most_lagging.last_caught_up_timestamp
    voters = [
        {"id": v.node_id, "endpoints": [quorum.endpoints[v.node_id]]}
        if v.node_id in quorum.endpoints
        else {"id": v.node_id}
        for v in quorum.voters
    ]
    observers = [{"id": o.node_id} for o in quorum.observers]
    rows = [
        ("ClusterId", quorum.cluster_id),
        ("LeaderId", quorum.leader_id),
        ("LeaderEpoch", quorum.leader_epoch),
        ("HighWatermark", quorum.high_watermark),
        ("MaxFollowerLag", lag),
        ("MaxFollowerLagTimeMs", lag_time_ms),
        ("CurrentVoters", json.dumps(voters)),
        ("CurrentObservers", json.dumps(observers)),
    ]
    return [f"{label + ':':<{LABEL_WIDTH}}{value}" for label, value in rows]


def replication_lines(quorum: Quorum) -> list[str]:
    """One row per replica, leader first, then voters, then observers (Kafka's order)."""
    leader = _leader(quorum)
    rows = [
        ("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")
    ]
    ordered = [leader, *(v for v in quorum.voters if v is not leader), *quorum.observers]
    for replica in ordered:
        rows.append(
            (
                str(replica.node_id),
                str(replica.log_end_offset),
                str(max(leader.log_end_offset - replica.log_end_offset, 0)),
                str(replica.last_fetch_timestamp),
                str(replica.last_caught_up_timestamp),
                replica.status,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


@click.group(
    NAME,
    cls=ArgparseStyleGroup,
    short_help="describe the KRaft controller quorum (kafka-metadata-quorum.sh)",
    help="Describe the controller quorum: its leader, epoch and high watermark "
    "(--status) or each replica's log end offset and lag (--replication), like "
    "Kafka's kafka-metadata-quorum.sh.",
)
@click.option(
    "--bootstrap-controller",
    metavar="HOST:PORT[,HOST:PORT]",
    help="controller listener(s) to ask",
)
@click.option(
    "--bootstrap-server",
    metavar="HOST:PORT[,HOST:PORT]",
    help="broker listener(s) to ask (they forward to the active controller)",
)
@command_config_option
def command(**params: Any) -> None:
    one_of(params, ["--bootstrap-controller", "--bootstrap-server"])


@command.command("describe", help="describe the quorum")
@click.option("--status", is_flag=True, help="leader, epoch, high watermark")
@click.option("--replication", is_flag=True, help="log end offset and lag of every replica")
def _describe_command(**params: Any) -> int:
    one_of(params, ["--status", "--replication"])
    return invoke(run, params)
