"""``odradek transactions``: look into transactions and abort a hanging one (KIP-664).

How this works and why: a transaction whose producer vanished without its coordinator
ever learning of it (or a coordinator that lost track of it) leaves its records open in
the partition: the last stable offset stops there and every read_committed consumer
waits forever. Kafka's answer is ``kafka-transactions.sh``, and this is the same tool
speaking the same requests, so it works against odradek and Kafka alike:

- ``list [--duration-filter MS]``: ListTransactions (key 66) to every broker of the
  cluster (each coordinator knows only the transactional ids of the
  ``__transaction_state`` partitions it leads); columns TransactionalId, Coordinator,
  ProducerId, TransactionState. The filter (KIP-994, ListTransactions v1) keeps only
  transactions open longer than MS.
- ``describe --transactional-id X``: FindCoordinator (key type 1, a transaction) and
  DescribeTransactions (key 65) at that coordinator; one row with the producer id and
  epoch, the state, the timeout, when the current transaction started, how long it has
  run and the partitions it holds.
- ``describe-producers --topic T --partition P [--broker-id B]``: DescribeProducers
  (key 61) at the partition's leader (or broker B, e.g. a follower): the partition's
  view of each active producer, including the first offset of its open transaction.
- ``abort --topic T --partition P --start-offset O``: the producer whose open
  transaction starts at O (from DescribeProducers) is aborted by sending the leader
  WriteTxnMarkers (key 27) with an ABORT marker for that producer id, epoch and the
  coordinator epoch the partition last saw — what a coordinator would have sent. With
  ``--producer-id/--producer-epoch/--coordinator-epoch`` the marker is sent as given.

Every option is checked here rather than by the parser, so every failure — a missing
option, a bad address, an unreachable broker, a Kafka error code — is one line on
stderr and exit status 1, never a usage dump or a traceback.

A coordinator still loading or moving, or a partition without a leader, is asked again
from fresh metadata for up to ``RETRY_TIMEOUT_S`` (the marker write itself is never
retried). Tables are printed as Kafka's tool prints them (transactions_output.py);
DescribeTransactions responses are read by txn_describe_codec.py, because kio cannot
decode the -1 start time of an id with no transaction under way.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import click
from kio.schema.errors import ErrorCode

from odradek.cli import txn_describe_codec
from odradek.cli.addresses import parse_addresses
from odradek.cli.common import client_sasl, client_ssl_context, command_config_option
from odradek.cli.subcommand import ArgparseStyleGroup, Args, invoke
from odradek.cli.transactions_output import (
    ActiveProducer,
    DescribedTransaction,
    ListedTransaction,
    describe_lines,
    list_lines,
    producer_lines,
)
from odradek.client._core.connection import (
    BrokerAddress,
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
    request_entity,
)

NAME: Final = "transactions"
API_VERSIONS_KEY: Final = 18
METADATA_KEY: Final = 3
FIND_COORDINATOR_KEY: Final = 10
WRITE_TXN_MARKERS_KEY: Final = 27
DESCRIBE_PRODUCERS_KEY: Final = 61
DESCRIBE_TRANSACTIONS_KEY: Final = 65
LIST_TRANSACTIONS_KEY: Final = 66
CLIENT_VERSIONS: Final = {
    API_VERSIONS_KEY: (0, 3),
    METADATA_KEY: (1, 12),
    FIND_COORDINATOR_KEY: (4, 6),  # v4+: a batch of keys
    WRITE_TXN_MARKERS_KEY: (1, 1),
    DESCRIBE_PRODUCERS_KEY: (0, 0),
    DESCRIBE_TRANSACTIONS_KEY: (0, 0),
    LIST_TRANSACTIONS_KEY: (0, 2),
}
TRANSACTION_KEY_TYPE: Final = 1
REQUEST_TIMEOUT_S: Final = 30.0
RETRY_TIMEOUT_S: Final = 15.0
RETRY_BACKOFF_S: Final = 0.2
RETRIABLE: Final = frozenset(
    {
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "NOT_COORDINATOR",
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
    }
)


class TransactionsToolError(Exception):
    """A failure to report in one line (exit status 1)."""


class RetriableError(TransactionsToolError):
    """A coordinator or leader that is moving or loading: asked again until
    ``RETRY_TIMEOUT_S``, then reported like any other failure."""


def _failure(text: str, code: ErrorCode | int) -> TransactionsToolError:
    name = _error_name(code)
    error = RetriableError if name in RETRIABLE else TransactionsToolError
    return error(f"{text}: {name}")


def _error_name(code: ErrorCode | int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {int(code)}"


# -- the wire ------------------------------------------------------------------------------
class Cluster:
    """Connections to the brokers of one cluster, opened on demand, closed together."""

    def __init__(self, addresses: Sequence[tuple[str, int]]) -> None:
        self.addresses = list(addresses)
        self.brokers: dict[int, BrokerAddress] = {}
        self.topics: dict[str, dict[int, int]] = {}  # topic -> partition -> leader id
        self._connections: dict[int, BrokerConnection] = {}

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()

    async def _open(self, address: BrokerAddress) -> BrokerConnection:
        connection = BrokerConnection(
            address,
            client_id="odradek-transactions",
            request_timeout_s=REQUEST_TIMEOUT_S,
            client_versions=CLIENT_VERSIONS,
            ssl_context=client_ssl_context(),
            sasl=client_sasl(),
        )
        try:
            await connection.connect()
        except (KafkaConnectionError, OSError) as error:
            await connection.close()
            raise TransactionsToolError(str(error)) from None
        return connection

    async def connection(self, broker: int) -> BrokerConnection:
        if broker not in self._connections:
            if broker not in self.brokers:
                raise TransactionsToolError(f"broker {broker} is not in the cluster")
            self._connections[broker] = await self._open(self.brokers[broker])
        return self._connections[broker]

    async def send(self, broker: int, key: int, api: str, **fields: Any) -> Any:
        connection = await self.connection(broker)
        return await _send(connection, key, api, **fields)

    async def load_metadata(self) -> None:
        """Brokers and partition leaders, from the first bootstrap address that answers."""
        failures = []
        for host, port in self.addresses:
            try:
                connection = await self._open(BrokerAddress(-1, host, port))
            except TransactionsToolError as error:
                failures.append(str(error))
                continue
            try:
                response = await _send(
                    connection,
                    METADATA_KEY,
                    "Metadata",
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False,
                )
            finally:
                await connection.close()
            self.brokers = {
                int(b.node_id): BrokerAddress(int(b.node_id), b.host, int(b.port))
                for b in response.brokers
            }
            self.topics = {
                t.name: {int(p.partition_index): int(p.leader_id) for p in t.partitions}
                for t in response.topics
                if t.error_code == ErrorCode.none and t.name is not None
            }
            return
        raise TransactionsToolError("; ".join(failures))

    def leader(self, topic: str, partition: int) -> int:
        partitions = self.topics.get(topic)
        if partitions is None:
            raise TransactionsToolError(f"topic {topic!r} does not exist")
        if partition not in partitions:
            raise TransactionsToolError(f"topic {topic!r} has no partition {partition}")
        leader = partitions[partition]
        if leader < 0:
            raise RetriableError(f"{topic}-{partition} has no leader: LEADER_NOT_AVAILABLE")
        return leader


async def _send(
    connection: BrokerConnection, key: int, api: str, *, raw: bool = False, **fields: Any
) -> Any:
    try:
        version = connection.version_for(key)
    except UnsupportedVersionError:
        raise TransactionsToolError(
            f"broker {connection.address.host}:{connection.address.port} does not serve {api}"
        ) from None
    try:
        return await connection.send(request_entity(key, version, **fields), raw=raw)
    except (KafkaConnectionError, OSError) as error:
        raise TransactionsToolError(f"{api} failed: {error}") from None


def _entity(connection: BrokerConnection, key: int, class_name: str, **fields: Any) -> Any:
    return request_entity(key, connection.version_for(key), class_name, **fields)


async def list_transactions(
    cluster: Cluster, duration_ms: int | None = None
) -> list[ListedTransaction]:
    await cluster.load_metadata()
    found = []
    for broker in sorted(cluster.brokers):
        fields: dict[str, Any] = {}
        if duration_ms is not None:
            connection = await cluster.connection(broker)
            if connection.supports(LIST_TRANSACTIONS_KEY) and (
                connection.version_for(LIST_TRANSACTIONS_KEY) < 1
            ):
                raise TransactionsToolError(f"broker {broker} does not support --duration-filter")
            fields["duration_filter"] = duration_ms
        response = await cluster.send(broker, LIST_TRANSACTIONS_KEY, "ListTransactions", **fields)
        if response.error_code != ErrorCode.none:
            raise _failure(f"ListTransactions to broker {broker} failed", response.error_code)
        found += [
            ListedTransaction(t.transactional_id, broker, int(t.producer_id), t.transaction_state)
            for t in response.transaction_states
        ]
    return found


async def find_coordinator(cluster: Cluster, transactional_id: str) -> int:
    """The id of the broker coordinating ``transactional_id``."""
    await cluster.load_metadata()
    bootstrap = min(cluster.brokers) if cluster.brokers else None
    if bootstrap is None:
        raise TransactionsToolError("the cluster has no brokers")
    response = await cluster.send(
        bootstrap,
        FIND_COORDINATOR_KEY,
        "FindCoordinator",
        key_type=TRANSACTION_KEY_TYPE,
        coordinator_keys=(transactional_id,),
    )
    coordinator = next((c for c in response.coordinators if c.key == transactional_id), None)
    if coordinator is None:
        raise TransactionsToolError(f"FindCoordinator did not answer for {transactional_id!r}")
    if coordinator.error_code != ErrorCode.none:
        raise _failure(
            f"cannot find the coordinator of {transactional_id!r}", coordinator.error_code
        )
    node = int(coordinator.node_id)
    cluster.brokers.setdefault(node, BrokerAddress(node, coordinator.host, int(coordinator.port)))
    return node


async def describe_transaction(cluster: Cluster, transactional_id: str) -> DescribedTransaction:
    coordinator = await find_coordinator(cluster, transactional_id)
    connection = await cluster.connection(coordinator)
    frame = await _send(
        connection,
        DESCRIBE_TRANSACTIONS_KEY,
        "DescribeTransactions",
        raw=True,  # kio cannot read the -1 start time of an idle id: txn_describe_codec.py
        transactional_ids=(transactional_id,),
    )
    try:
        states = txn_describe_codec.decode_response(frame)
    except txn_describe_codec.ResponseFormatError as error:
        raise TransactionsToolError(
            f"cannot read the DescribeTransactions response: {error}"
        ) from None
    state = next((s for s in states if s.transactional_id == transactional_id), None)
    if state is None:
        raise TransactionsToolError(f"the coordinator did not describe {transactional_id!r}")
    if state.error_code != 0:
        raise _failure(f"cannot describe {transactional_id!r}", state.error_code)
    return DescribedTransaction(
        coordinator,
        transactional_id,
        state.producer_id,
        state.producer_epoch,
        state.state,
        state.timeout_ms,
        state.start_ms,
        state.partitions,
    )


async def describe_producers(
    cluster: Cluster, topic: str, partition: int, broker: int | None = None
) -> tuple[int, list[ActiveProducer]]:
    """(the broker asked, the producers it reports for ``topic``-``partition``)."""
    await cluster.load_metadata()
    target = cluster.leader(topic, partition) if broker is None else broker
    connection = await cluster.connection(target)
    key = DESCRIBE_PRODUCERS_KEY
    response = await _send(
        connection,
        key,
        "DescribeProducers",
        topics=(
            _entity(connection, key, "TopicRequest", name=topic, partition_indexes=(partition,)),
        ),
    )
    for t in response.topics:
        for p in t.partitions:
            if t.name != topic or int(p.partition_index) != partition:
                continue
            if p.error_code != ErrorCode.none:
                raise _failure(
                    f"DescribeProducers of {topic}-{partition} at broker {target} failed",
                    p.error_code,
                )
            return target, [
                ActiveProducer(
                    int(s.producer_id),
                    int(s.producer_epoch),
                    int(s.coordinator_epoch),
                    int(s.last_sequence),
                    int(s.last_timestamp),
                    int(s.current_txn_start_offset),
                )
                for s in p.active_producers
            ]
    raise TransactionsToolError(f"broker {target} did not answer for {topic}-{partition}")


async def abort_transaction(
    cluster: Cluster,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> None:
    """Write an ABORT marker for the producer into ``topic``-``partition`` at its leader."""
    if not cluster.topics:
        await cluster.load_metadata()
    leader = cluster.leader(topic, partition)
    connection = await cluster.connection(leader)
    key = WRITE_TXN_MARKERS_KEY
    response = await _send(
        connection,
        key,
        "WriteTxnMarkers",
        markers=(
            _entity(
                connection,
                key,
                "WritableTxnMarker",
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transaction_result=False,
                coordinator_epoch=coordinator_epoch,
                topics=(
                    _entity(
                        connection,
                        key,
                        "WritableTxnMarkerTopic",
                        name=topic,
                        partition_indexes=(partition,),
                    ),
                ),
            ),
        ),
    )
    codes = [
        p.error_code
        for marker in response.markers
        for t in marker.topics
        if t.name == topic
        for p in t.partitions
        if int(p.partition_index) == partition
    ]
    if not codes:
        raise TransactionsToolError(f"broker {leader} did not answer for {topic}-{partition}")
    if codes[0] != ErrorCode.none:
        raise TransactionsToolError(
            f"aborting the transaction of producer {producer_id} on {topic}-{partition} "
            f"failed: {_error_name(codes[0])}"
        )


async def abort_at_offset(cluster: Cluster, topic: str, partition: int, start_offset: int) -> None:
    """Abort the open transaction that starts at ``start_offset`` of the partition."""
    _, producers = await describe_producers(cluster, topic, partition)
    matches = [p for p in producers if p.txn_start_offset == start_offset]
    if not matches:
        raise TransactionsToolError(
            f"no open transaction starts at offset {start_offset} of {topic}-{partition}"
        )
    producer = matches[0]
    # A partition that never saw a marker for this producer knows no coordinator epoch;
    # 0 is not older than anything it could compare with.
    await abort_transaction(
        cluster,
        topic,
        partition,
        producer.producer_id,
        producer.producer_epoch,
        max(producer.coordinator_epoch, 0),
    )


# -- command line --------------------------------------------------------------------------
def _integer(option: str, text: str | None, low: int, high: int) -> int:
    if text is None:
        raise TransactionsToolError(f"{option} is required")
    try:
        value = int(text)
    except ValueError:
        raise TransactionsToolError(f"{option}: {text!r} is not an integer") from None
    if not low <= value <= high:
        raise TransactionsToolError(f"{option}: {value} is not in {low}..{high}")
    return value


_INT16: Final = 2**15 - 1
_INT32: Final = 2**31 - 1
_INT64: Final = 2**63 - 1


def run(args: Args) -> int:
    try:
        lines = _run(args)
    except TransactionsToolError as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


def _run(args: Args) -> list[str]:
    """Check every option, then run the action; the printed lines."""
    action = getattr(args, "action", None)
    if action is None:
        raise TransactionsToolError("name an action: list, describe, describe-producers or abort")
    bootstrap = getattr(args, "sub_bootstrap", None) or args.bootstrap_server
    if not bootstrap:
        raise TransactionsToolError("--bootstrap-server is required")
    addresses = parse_addresses("--bootstrap-server", bootstrap, TransactionsToolError)
    params: tuple[Any, ...]
    if action == "list":
        duration = args.duration_filter
        params = (None if duration is None else _integer("--duration-filter", duration, 0, _INT64),)
    elif action == "describe":
        if not args.transactional_id:
            raise TransactionsToolError("--transactional-id is required")
        params = (args.transactional_id,)
    else:
        if not args.topic:
            raise TransactionsToolError("--topic is required")
        params = (args.topic, _integer("--partition", args.partition, 0, _INT32))
        if action == "describe-producers":
            broker = args.broker_id
            params += (None if broker is None else _integer("--broker-id", broker, 0, _INT32),)
        else:
            params += _abort_params(args)
            action = "abort-offset" if len(params) == 3 else "abort-producer"
    return asyncio.run(_execute(addresses, action, params))


def _abort_params(args: Args) -> tuple[int, ...]:
    """(start offset,) or (producer id, producer epoch, coordinator epoch)."""
    by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if (args.start_offset is None) == all(v is None for v in by_producer):
        raise TransactionsToolError(
            "abort needs either --start-offset or all of --producer-id, --producer-epoch "
            "and --coordinator-epoch"
        )
    if args.start_offset is not None:
        return (_integer("--start-offset", args.start_offset, 0, _INT64),)
    return (
        _integer("--producer-id", args.producer_id, 0, _INT64),
        _integer("--producer-epoch", args.producer_epoch, 0, _INT16),
        _integer("--coordinator-epoch", args.coordinator_epoch, 0, _INT32),
    )


async def _execute(
    addresses: list[tuple[str, int]], action: str, params: tuple[Any, ...]
) -> list[str]:
    """Run the action; a retriable error (a coordinator still loading, a leader moving)
    starts it over from fresh metadata until ``RETRY_TIMEOUT_S``. The marker write itself
    is never retried."""
    deadline = time.monotonic() + RETRY_TIMEOUT_S
    while True:
        cluster = Cluster(addresses)
        try:
            return await _act(cluster, action, params)
        except RetriableError:
            if time.monotonic() >= deadline:
                raise
        finally:
            await cluster.close()
        await asyncio.sleep(RETRY_BACKOFF_S)


async def _act(cluster: Cluster, action: str, params: tuple[Any, ...]) -> list[str]:
    if action == "list":
        return list_lines(await list_transactions(cluster, *params))
    if action == "describe":
        described = await describe_transaction(cluster, *params)
        return describe_lines(described, int(time.time() * 1000))
    if action == "describe-producers":
        _, producers = await describe_producers(cluster, *params)
        return producer_lines(producers)
    if action == "abort-offset":
        await abort_at_offset(cluster, *params)
    else:
        await abort_transaction(cluster, *params)
    return []  # as kafka-transactions.sh, a successful abort prints nothing


@click.group(
    NAME,
    cls=ArgparseStyleGroup,
    invoke_without_command=True,
    short_help="list, describe and abort transactions (kafka-transactions.sh)",
    help="Inspect transactions and the producers of a partition, and abort a "
    "hanging transaction, as kafka-transactions.sh. Errors are one line on stderr "
    "with exit status 1.",
)
@click.option("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]", help="brokers")
@command_config_option
def command(**params: Any) -> int | None:
    if click.get_current_context().invoked_subcommand is None:
        return invoke(run, params, action=None)  # run says which actions there are
    return None


def _action_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--bootstrap-server`` may come after the action too."""
    return click.option("--bootstrap-server", "sub_bootstrap", hidden=True)(function)


def _partition_options(function: Callable[..., Any]) -> Callable[..., Any]:
    function = click.option("--partition", metavar="PARTITION")(function)
    return click.option("--topic", metavar="TOPIC")(function)


@command.command("list", help="list the transactions of every coordinator")
@click.option("--duration-filter", metavar="MS", help="only transactions open longer than MS")
@_action_options
def _list_command(**params: Any) -> int:
    return invoke(run, params, action="list")


@command.command("describe", help="describe one transactional id")
@click.option("--transactional-id", metavar="ID")
@_action_options
def _describe_command(**params: Any) -> int:
    return invoke(run, params, action="describe")


@command.command("describe-producers", help="the active producers of a partition")
@_partition_options
@click.option("--broker-id", metavar="ID", help="ask this broker, not the leader")
@_action_options
def _producers_command(**params: Any) -> int:
    return invoke(run, params, action="describe-producers")


@command.command("abort", help="abort a hanging transaction")
@_partition_options
@click.option("--start-offset", metavar="OFFSET", help="first offset of the transaction")
@click.option("--producer-id", metavar="ID")
@click.option("--producer-epoch", metavar="EPOCH")
@click.option("--coordinator-epoch", metavar="EPOCH")
@_action_options
def _abort_command(**params: Any) -> int:
    return invoke(run, params, action="abort")
