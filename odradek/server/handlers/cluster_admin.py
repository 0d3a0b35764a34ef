"""DescribeCluster (key 60) and DescribeLogDirs (key 35).

DescribeCluster answers with the unfenced brokers' endpoints on the listener the
request came in on (as Metadata does) and the active controller; v2 (KIP-1073) adds
the fenced ones too, marked ``is_fenced``, when the request sets
``include_fenced_brokers``; a node serving clients
describes brokers only, so endpoint_type 2 (controllers) is UNSUPPORTED_ENDPOINT_TYPE,
as on a Kafka broker. DescribeLogDirs lists every log dir with the size of each
partition in it, and the future replica of a partition being moved to another dir
(AlterReplicaLogDirs) in its target dir with ``is_future_key`` true and
``offset_lag`` the offsets it still lacks (Kafka's: the current log end offset minus
the future's); a current replica's lag is 0.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import NOT_REQUESTED, AclOperation, ResourceType
from odradek.server.handlers import handles
from odradek.server.handlers.metadata import request_listener

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices
    from odradek.storage.log import Log

DESCRIBE_LOG_DIRS_KEY = 35
DESCRIBE_CLUSTER_KEY = 60
BROKERS_ENDPOINT: Final = 1
DESCRIBE: Final = AclOperation.DESCRIBE


@handles(DESCRIBE_CLUSTER_KEY, 0, 2)
async def describe_cluster(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_CLUSTER_KEY, request.header.api_version)
    body = request.body
    endpoint_type = getattr(body, "endpoint_type", BROKERS_ENDPOINT)
    common = {
        "throttle_time": datetime.timedelta(0),
        "endpoint_type": endpoint_type,
        "cluster_id": services.metadata.cluster_id,
    }
    denial = services.authorizer.denial(request.session, DESCRIBE, ResourceType.CLUSTER)
    if endpoint_type != BROKERS_ENDPOINT or denial is not None:
        return make(
            module.DescribeClusterResponse,
            **common,
            error_code=error_code(denial or "UNSUPPORTED_ENDPOINT_TYPE"),
            error_message=(
                "not authorized to describe the cluster"
                if denial
                else f"endpoint type {endpoint_type} is not served by brokers"
            ),
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=NOT_REQUESTED,
        )
    brokers = tuple(
        make(
            module.DescribeClusterBroker,
            broker_id=e.node_id,
            host=e.host,
            port=e.port,
            rack=e.rack,
            is_fenced=e.fenced,
        )
        for e in services.metadata.endpoints(
            services.metadata.image,
            request_listener(services, request),
            include_fenced=bool(getattr(body, "include_fenced_brokers", False)),
        )
    )
    return make(
        module.DescribeClusterResponse,
        **common,
        error_code=error_code("NONE"),
        error_message=None,
        controller_id=services.metadata.controller_id,
        brokers=brokers,
        cluster_authorized_operations=services.authorizer.operations(
            body.include_cluster_authorized_operations, request.session, ResourceType.CLUSTER
        ),
    )


@handles(DESCRIBE_LOG_DIRS_KEY, 1, 4)
async def describe_log_dirs(services: BrokerServices, request: Request) -> Any:
    module = response_module(DESCRIBE_LOG_DIRS_KEY, request.header.api_version)
    denial = services.authorizer.denial(request.session, DESCRIBE, ResourceType.CLUSTER)
    if denial is not None:  # v3+ say it at the top; below, no result is what Kafka sends
        return make(
            module.DescribeLogDirsResponse,
            throttle_time=datetime.timedelta(0),
            error_code=error_code(denial),
            results=(),
        )
    wanted = _wanted(request.body.topics)
    by_dir: dict[Path, dict[str, list[tuple[int, Log, int, bool]]]] = {}
    logs = services.log_dirs.logs
    entries = [(tp, log, 0, False) for tp, log in logs.items()]
    for tp, future in services.log_dirs.future_logs.items():
        current = logs.get(tp)
        lag = 0 if current is None else max(current.log_end_offset - future.log_end_offset, 0)
        entries.append((tp, future, lag, True))
    for (topic, index), log, lag, future_key in sorted(entries, key=lambda e: (e[0], e[3])):
        if wanted is None or index in wanted.get(topic, ()):
            by_dir.setdefault(log.directory.parent.resolve(), {}).setdefault(topic, []).append(
                (index, log, lag, future_key)
            )
    results = []
    for log_dir in services.log_dirs.log_dirs:
        path = log_dir.resolve()
        total, usable = _disk_space(path)
        topics = tuple(
            make(
                module.DescribeLogDirsTopic,
                name=topic,
                partitions=tuple(
                    make(
                        module.DescribeLogDirsPartition,
                        partition_index=index,
                        partition_size=log.size,
                        offset_lag=lag,
                        is_future_key=future_key,
                    )
                    for index, log, lag, future_key in partitions
                ),
            )
            for topic, partitions in by_dir.get(path, {}).items()
        )
        results.append(
            make(
                module.DescribeLogDirsResult,
                error_code=error_code("NONE"),
                log_dir=str(path),
                topics=topics,
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return make(
        module.DescribeLogDirsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error_code("NONE"),
        results=tuple(results),
    )


def _wanted(topics: Any) -> dict[str, set[int]] | None:
    if topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for topic in topics:
        wanted.setdefault(topic.topic, set()).update(topic.partitions)
    return wanted


def _disk_space(path: Path) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path``."""
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
