"""``odradek reassign-partitions``: move partition replicas, as ``kafka-reassign-partitions.sh``.

How this works and why: a reassignment (KIP-455) is started by one
AlterPartitionReassignments request (API 45) to any broker, which forwards it to the
active controller; the brokers then copy the data with their ordinary replica fetchers
and the controller finishes the move once the new replicas are in sync
(metadata/reassignment.py). This tool speaks Kafka's JSON plan, so plans written for
``kafka-reassign-partitions.sh`` work unchanged:

- ``--generate --topics-to-move-json-file F --broker-list 1,2,3``: F is
  ``{"version":1,"topics":[{"topic":"foo"}]}``; prints the current assignment of those
  topics and a proposed one over the listed brokers, each as
  ``{"version":1,"partitions":[{"topic","partition","replicas","log_dirs"}]}``. The
  proposal keeps every partition's replication factor and spreads replicas round-robin
  (partition p's replicas start at the p-th listed broker, so leaders are spread too;
  Kafka starts at a random broker, this is deterministic so a plan can be reviewed and
  regenerated). It changes nothing.
- ``--execute --reassignment-json-file F``: prints the current assignment of F's
  partitions (save it to roll back) and starts the reassignment. Refused while another
  reassignment is in progress, unless ``--additional``; with
  ``--disallow-replication-factor-change`` (KIP-860) a target that changes a
  partition's replica count is refused (INVALID_REPLICATION_FACTOR). With
  ``--throttle N`` (bytes/s) the copy is bounded by replication throttles (KIP-73) set
  before it starts, and ``--replica-alter-log-dirs-throttle M`` bounds copies between
  a broker's log dirs (reassign_throttles.py); with ``--additional`` they change the
  rate of a reassignment already running.
- ``--verify --reassignment-json-file F``: per partition, completed, still in progress
  (ListPartitionReassignments, API 46), or not in progress with a different replica set.
  Once every partition is done it removes the replication throttles (every broker's
  rates, the plan's topics' throttled-replica lists) unless ``--preserve-throttles``.
- ``--cancel --reassignment-json-file F``: reverts F's ongoing reassignments to their
  original replicas, and removes the throttles as ``--verify`` does.

``log_dirs`` name, per replica, ``"any"`` or the absolute path of one of that broker's
log dirs: ``--execute`` then also asks each broker to move its replicas there
(AlterReplicaLogDirs, KIP-113; retried while the broker does not host the replica yet,
up to ``--timeout``) and ``--verify`` reports each such move (cli/log_dirs.py). Every
failure is one line on stderr and status 1; a partition the controller refused is
reported with Kafka's error name and ends the run with status 1.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import click
from kio.schema.errors import ErrorCode

from odradek.cli.addresses import parse_addresses
from odradek.cli.common import client_sasl, client_ssl_context, command_config_option
from odradek.cli.log_dirs import (
    DEFAULT_TIMEOUT_MS,
    LogDirToolError,
    Replica,
    move_replicas,
    verify_replicas,
)
from odradek.cli.reassign_throttles import ThrottleError, clear_throttles, set_throttles
from odradek.cli.subcommand import ArgparseStyleCommand, Args, invoke, one_of
from odradek.client._core.connection import (
    BrokerAddress,
    BrokerConnection,
    KafkaConnectionError,
    UnsupportedVersionError,
    request_entity,
)

NAME: Final = "reassign-partitions"
METADATA_KEY: Final = 3
ALTER_KEY: Final = 45
LIST_KEY: Final = 46
CLIENT_VERSIONS: Final = {
    18: (0, 3),
    METADATA_KEY: (1, 12),
    ALTER_KEY: (0, 1),
    LIST_KEY: (0, 0),
    44: (0, 1),  # IncrementalAlterConfigs: the throttles
}
REQUEST_TIMEOUT_S: Final = 30.0
ANY_DIR: Final = "any"

Assignment = dict[tuple[str, int], tuple[int, ...]]
Addresses = dict[int, tuple[str, int]]  # broker id -> host, port
Result = tuple[str, int, str, str | None]  # topic, partition, error name, message


class ReassignToolError(Exception):
    """A failure to report in one line (exit status 1)."""


def run(args: Args) -> int:
    try:
        addresses = parse_addresses("--bootstrap-server", args.bootstrap_server, ReassignToolError)
        if args.generate:
            lines, failed = asyncio.run(_generate(addresses, args))
        else:
            if not args.reassignment_json_file:
                raise ReassignToolError("--reassignment-json-file is required")
            path = Path(args.reassignment_json_file)
            plan, dirs = read_plan(path), read_log_dirs(path)
            if args.execute:
                lines, failed = asyncio.run(_execute(addresses, plan, args))
                if dirs and not failed:
                    more, failed = asyncio.run(move_replicas(addresses, dirs, args.timeout))
                    lines += more
            elif args.verify:
                # the throttles stay until the log dir moves are done too
                more, moved = asyncio.run(verify_replicas(addresses, dirs)) if dirs else ([], True)
                keep = args.preserve_throttles or not moved
                lines, failed = asyncio.run(_verify(addresses, plan, keep))
                if dirs:
                    lines += ["", "Status of replica log directory movement:", *more]
            else:
                lines, failed = asyncio.run(_cancel(addresses, plan, args.preserve_throttles))
    except (ReassignToolError, ThrottleError, LogDirToolError) as error:
        print(f"{NAME}: {error}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    if failed:
        print(f"{NAME}: {failed} partition(s) failed", file=sys.stderr)
        return 1
    return 0


# -- the JSON files ------------------------------------------------------------------------
def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as error:
        raise ReassignToolError(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise ReassignToolError(f"{path} is not JSON: {error}") from None


def read_plan(path: Path) -> Assignment:
    """A reassignment file: {"version":1,"partitions":[{"topic","partition","replicas"}]}."""
    document = _load(path)
    items = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(items, list) or not items:
        raise ReassignToolError(f'{path}: expected {{"version":1,"partitions":[...]}}')
    plan: Assignment = {}
    for item in items:
        if not isinstance(item, dict):
            raise ReassignToolError(f"{path}: bad entry {item!r}")
        topic, partition, replicas = item.get("topic"), item.get("partition"), item.get("replicas")
        if (
            not isinstance(topic, str)
            or not isinstance(partition, int)
            or partition < 0
            or not isinstance(replicas, list)
            or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas)
        ):
            raise ReassignToolError(f"{path}: bad entry {item!r} (topic, partition, replicas)")
        dirs = item.get("log_dirs")
        if dirs is not None and (
            not isinstance(dirs, list)
            or len(dirs) != len(replicas)
            or not all(isinstance(d, str) and (d == ANY_DIR or d.startswith("/")) for d in dirs)
        ):
            raise ReassignToolError(
                f'{path}: {topic}-{partition}: log_dirs must be one "any" or absolute path '
                "per replica"
            )
        if (topic, partition) in plan:
            raise ReassignToolError(f"{path}: partition {topic}-{partition} listed twice")
        plan[(topic, partition)] = tuple(replicas)
    return plan


def read_log_dirs(path: Path) -> dict[Replica, str]:
    """The replicas a plan places in given log dirs (read_plan has checked the file)."""
    moves: dict[Replica, str] = {}
    for item in _load(path)["partitions"]:
        for broker, log_dir in zip(item["replicas"], item.get("log_dirs") or (), strict=False):
            if log_dir != ANY_DIR:
                moves[(item["topic"], item["partition"], broker)] = log_dir
    return moves


def read_topics(path: Path) -> list[str]:
    """A topics-to-move file: {"version":1,"topics":[{"topic":"foo"}]}."""
    document = _load(path)
    items = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(items, list) or not items:
        raise ReassignToolError(f'{path}: expected {{"version":1,"topics":[{{"topic":...}}]}}')
    names = []
    for item in items:
        name = item.get("topic") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise ReassignToolError(f"{path}: bad entry {item!r}")
        if name not in names:
            names.append(name)
    return names


def plan_json(assignment: Mapping[tuple[str, int], Sequence[int]]) -> str:
    """Kafka's plan format, partitions in (topic, partition) order."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {
                    "topic": topic,
                    "partition": index,
                    "replicas": list(replicas),
                    "log_dirs": [ANY_DIR] * len(replicas),
                }
                for (topic, index), replicas in sorted(assignment.items())
            ],
        },
        separators=(",", ":"),
    )


def propose(current: Mapping[tuple[str, int], Sequence[int]], brokers: Sequence[int]) -> Assignment:
    """Each partition's replication factor over ``brokers``, round-robin (module doc)."""
    proposed: Assignment = {}
    for (topic, index), replicas in sorted(current.items()):
        if len(replicas) > len(brokers):
            raise ReassignToolError(
                f"{topic}-{index} has {len(replicas)} replicas but --broker-list names "
                f"only {len(brokers)} broker(s)"
            )
        proposed[(topic, index)] = tuple(
            brokers[(index + i) % len(brokers)] for i in range(len(replicas))
        )
    return proposed


def _name(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


# -- the actions ---------------------------------------------------------------------------
async def _generate(addresses: Sequence[tuple[str, int]], args: Any) -> tuple[list[str], int]:
    if not args.topics_to_move_json_file or not args.broker_list:
        raise ReassignToolError("--generate needs --topics-to-move-json-file and --broker-list")
    brokers = _broker_list(args.broker_list)
    names = read_topics(Path(args.topics_to_move_json_file))
    async with _connected(addresses) as connection:
        current, known = await _assignment(connection)
    missing = [n for n in names if n not in {t for t, _ in current}]
    if missing:
        raise ReassignToolError(f"unknown topic(s): {', '.join(missing)}")
    unknown = [b for b in brokers if b not in known]
    if unknown:
        raise ReassignToolError(f"--broker-list names unknown broker(s) {unknown}")
    moving = {tp: r for tp, r in current.items() if tp[0] in names}
    return [
        "Current partition replica assignment",
        plan_json(moving),
        "",
        "Proposed partition reassignment configuration",
        plan_json(propose(moving, brokers)),
    ], 0


async def _execute(
    addresses: Sequence[tuple[str, int]], plan: Assignment, args: Any
) -> tuple[list[str], int]:
    allow_rf = not args.disallow_replication_factor_change
    async with _connected(addresses) as connection:
        current, brokers = await _assignment(connection)
        missing = [_name(tp) for tp in plan if tp not in current]
        if missing:
            raise ReassignToolError(f"unknown partition(s): {', '.join(missing)}")
        ongoing = await _ongoing(connection, None)
        if not args.additional and ongoing:
            raise ReassignToolError(
                "cannot execute because there is an existing partition reassignment; use "
                "--additional to start this one in addition to it"
            )
        # The throttles first, so the copy never runs unbounded (KIP-73). A partition
        # already moving is throttled from where it started: its replicas without the
        # ones being added (Metadata shows the union while it moves).
        started = {
            tp: tuple(r for r in reps if r not in adding) for tp, (reps, adding) in ongoing.items()
        }
        throttled = await set_throttles(
            _connected,
            connection,
            brokers,
            {**current, **started},
            plan,
            args.throttle,
            args.replica_alter_log_dirs_throttle,
        )
        results = await _alter(connection, {tp: plan[tp] for tp in plan}, allow_rf)
    lines = [
        "Current partition replica assignment",
        "",
        plan_json({tp: current[tp] for tp in plan}),
        "",
        "Save this to use as the --reassignment-json-file option during rollback",
        *throttled,
    ]
    outcome, failed = _outcome("started partition reassignment", results)
    return lines + outcome, failed


async def _cancel(
    addresses: Sequence[tuple[str, int]], plan: Assignment, preserve_throttles: bool
) -> tuple[list[str], int]:
    async with _connected(addresses) as connection:
        results = await _alter(connection, dict.fromkeys(plan))
        lines, failed = _outcome("cancelled partition reassignment", results)
        if not preserve_throttles:
            _, brokers = await _assignment(connection)
            topics = sorted({topic for topic, _ in plan})
            lines += await clear_throttles(_connected, connection, brokers, topics)
    return lines, failed


async def _verify(
    addresses: Sequence[tuple[str, int]], plan: Assignment, preserve_throttles: bool
) -> tuple[list[str], int]:
    async with _connected(addresses) as connection:
        current, brokers = await _assignment(connection)
        ongoing = await _ongoing(connection, list(plan))
        done = not ongoing and all(current.get(tp) == target for tp, target in plan.items())
        cleared: list[str] = []
        if done and not preserve_throttles:
            topics = sorted({topic for topic, _ in plan})
            cleared = await clear_throttles(_connected, connection, brokers, topics)
    lines = ["Status of partition reassignment:"]
    for tp, target in plan.items():
        if tp in ongoing:
            lines.append(f"Reassignment of partition {_name(tp)} is still in progress.")
        elif current.get(tp) == target:
            lines.append(f"Reassignment of partition {_name(tp)} is completed.")
        else:
            have = ",".join(str(r) for r in current.get(tp, ()))
            want = ",".join(str(r) for r in target)
            lines.append(
                f"There is no active reassignment of partition {_name(tp)}, but replica set "
                f"is {have} rather than {want}."
            )
    if cleared:
        lines += ["", *cleared]
    return lines, 0


def _outcome(
    what: str, results: Sequence[tuple[str, int, str, str | None]]
) -> tuple[list[str], int]:
    good = [f"{t}-{p}" for t, p, e, _ in results if e == "NONE"]
    bad = [(t, p, e, m) for t, p, e, m in results if e != "NONE"]
    lines = []
    if good:
        plural = "s" if len(good) != 1 else ""
        lines.append(f"Successfully {what}{plural} for {','.join(good)}")
    if bad:
        lines.append("Error reassigning partition(s):")
        lines += [f"{t}-{p}: {e}" + (f": {m}" if m else "") for t, p, e, m in bad]
    return lines, len(bad)


# -- the wire ------------------------------------------------------------------------------
class _connected:
    """The first reachable broker of ``addresses``, closed on exit."""

    def __init__(self, addresses: Sequence[tuple[str, int]]) -> None:
        self.addresses = addresses
        self.connection: BrokerConnection | None = None

    async def __aenter__(self) -> BrokerConnection:
        failures = []
        for host, port in self.addresses:
            connection = BrokerConnection(
                BrokerAddress(-1, host, port),
                client_id="odradek-reassign-partitions",
                request_timeout_s=REQUEST_TIMEOUT_S + 5,
                client_versions=CLIENT_VERSIONS,
                ssl_context=client_ssl_context(),
                sasl=client_sasl(),
            )
            try:
                await connection.connect()
            except (KafkaConnectionError, OSError) as error:
                failures.append(f"cannot reach {host}:{port}: {error}")
                await connection.close()
                continue
            self.connection = connection
            return connection
        raise ReassignToolError("; ".join(failures))

    async def __aexit__(self, *exc: object) -> None:
        if self.connection is not None:
            await self.connection.close()


def _version(connection: BrokerConnection, key: int, api: str) -> int:
    try:
        return connection.version_for(key)
    except UnsupportedVersionError:
        raise ReassignToolError(f"the broker does not serve {api}") from None


async def _send(connection: BrokerConnection, request: Any) -> Any:
    try:
        return await connection.send(request)
    except (KafkaConnectionError, OSError) as error:
        raise ReassignToolError(f"the broker connection failed: {error}") from None


async def _assignment(connection: BrokerConnection) -> tuple[Assignment, Addresses]:
    """Every partition's replicas (Metadata of all topics) and the brokers' addresses."""
    version = _version(connection, METADATA_KEY, "Metadata")
    response = await _send(
        connection,
        request_entity(
            METADATA_KEY,
            version,
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )
    current: Assignment = {}
    for topic in response.topics:
        if topic.error_code != ErrorCode.none or topic.name is None:
            continue
        for p in topic.partitions:
            current[(topic.name, int(p.partition_index))] = tuple(int(r) for r in p.replica_nodes)
    return current, {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}


async def _ongoing(
    connection: BrokerConnection, partitions: Sequence[tuple[str, int]] | None
) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]]:
    """The ongoing reassignments (ListPartitionReassignments): partition → (replicas,
    adding replicas)."""
    version = _version(connection, LIST_KEY, "ListPartitionReassignments")
    topics: Any = None
    if partitions is not None:
        grouped: dict[str, list[int]] = {}
        for topic, index in partitions:
            grouped.setdefault(topic, []).append(index)
        topics = tuple(
            request_entity(
                LIST_KEY,
                version,
                "ListPartitionReassignmentsTopics",
                name=name,
                partition_indexes=tuple(indexes),
            )
            for name, indexes in grouped.items()
        )
    response = await _send(
        connection,
        request_entity(
            LIST_KEY, version, timeout=datetime.timedelta(seconds=REQUEST_TIMEOUT_S), topics=topics
        ),
    )
    if response.error_code != ErrorCode.none:
        raise ReassignToolError(f"listing reassignments failed: {response.error_code.name.upper()}")
    return {
        (topic.name, int(p.partition_index)): (
            tuple(int(r) for r in p.replicas),
            tuple(int(r) for r in p.adding_replicas),
        )
        for topic in response.topics
        for p in topic.partitions
    }


async def _alter(
    connection: BrokerConnection,
    plan: dict[tuple[str, int], tuple[int, ...] | None],
    allow_rf: bool = True,
) -> list[Result]:
    """AlterPartitionReassignments (None: cancel); (topic, partition, error, message)."""
    version = _version(connection, ALTER_KEY, "AlterPartitionReassignments")
    if version < 1 and not allow_rf:
        raise ReassignToolError(
            "the broker cannot refuse a replication factor change (AlterPartitionReassignments v0)"
        )
    grouped: dict[str, list[tuple[int, tuple[int, ...] | None]]] = {}
    for (topic, index), replicas in plan.items():
        grouped.setdefault(topic, []).append((index, replicas))
    response = await _send(
        connection,
        request_entity(
            ALTER_KEY,
            version,
            timeout=datetime.timedelta(seconds=REQUEST_TIMEOUT_S),
            allow_replication_factor_change=allow_rf,
            topics=tuple(
                request_entity(
                    ALTER_KEY,
                    version,
                    "ReassignableTopic",
                    name=name,
                    partitions=tuple(
                        request_entity(
                            ALTER_KEY,
                            version,
                            "ReassignablePartition",
                            partition_index=index,
                            replicas=replicas,
                        )
                        for index, replicas in entries
                    ),
                )
                for name, entries in grouped.items()
            ),
        ),
    )
    if response.error_code != ErrorCode.none:
        name = response.error_code.name.upper()
        raise ReassignToolError(f"reassignment failed: {name}: {response.error_message or ''}")
    return [
        (
            topic.name,
            int(p.partition_index),
            p.error_code.name.upper(),
            p.error_message,
        )
        for topic in response.responses
        for p in topic.partitions
    ]


def _broker_list(text: str) -> list[int]:
    brokers = []
    for item in text.split(","):
        item = item.strip()
        if not item.lstrip("-").isdigit() or int(item) < 0:
            raise ReassignToolError(f"--broker-list: {item!r} is not a broker id")
        if int(item) in brokers:
            raise ReassignToolError(f"--broker-list: broker {item} listed twice")
        brokers.append(int(item))
    return brokers


@click.command(
    NAME,
    cls=ArgparseStyleCommand,
    short_help="move partition replicas between brokers (kafka-reassign-partitions.sh)",
    help="Generate, execute, verify or cancel a partition reassignment with "
    "Kafka's JSON plan, like kafka-reassign-partitions.sh.",
)
@click.option("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]", help="brokers")
@command_config_option
@click.option(
    "--generate", is_flag=True, help="propose an assignment of --topics-to-move-json-file's topics"
)
@click.option("--execute", is_flag=True, help="start the reassignment in --reassignment-json-file")
@click.option(
    "--verify", is_flag=True, help="report whether --reassignment-json-file's reassignment is done"
)
@click.option(
    "--cancel", is_flag=True, help="revert --reassignment-json-file's ongoing reassignments"
)
@click.option("--topics-to-move-json-file", metavar="FILE")
@click.option("--broker-list", metavar="ID[,ID]", help="brokers for --generate")
@click.option("--reassignment-json-file", metavar="FILE")
@click.option(
    "--additional",
    is_flag=True,
    help="--execute even though other reassignments are in progress",
)
@click.option(
    "--disallow-replication-factor-change",
    is_flag=True,
    help="--execute refuses a partition whose replica count would change (KIP-860)",
)
@click.option(
    "--timeout",
    type=int,
    default=DEFAULT_TIMEOUT_MS,
    metavar="MS",
    help="how long --execute retries moving replicas between log dirs that the "
    "brokers do not host yet (default 10000)",
)
@click.option(
    "--throttle",
    type=int,
    default=-1,
    metavar="BYTES/S",
    help="--execute: bound the movement of partitions between brokers to this rate "
    "(leader and follower replication throttles, KIP-73); with --additional, change "
    "the rate of a running reassignment",
)
@click.option(
    "--replica-alter-log-dirs-throttle",
    type=int,
    default=-1,
    metavar="BYTES/S",
    help="--execute: bound copies between the log dirs of one broker to this rate",
)
@click.option(
    "--preserve-throttles",
    is_flag=True,
    help="--verify and --cancel leave the replication throttles in place",
)
def command(**params: Any) -> int:
    one_of(params, ["--generate", "--execute", "--verify", "--cancel"])
    return invoke(run, params)
