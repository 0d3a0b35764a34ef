"""AlterReplicaLogDirs (key 34, KIP-113): move replicas between this broker's log dirs.

How this works and why: a client (``kafka-reassign-partitions.sh`` with ``log_dirs``,
``odradek reassign-partitions``, AdminClient.alterReplicaLogDirs) sends each broker
the dir, an absolute path, it wants each of its replicas in. The broker starts a
copy of the replica there (a future log, replica/log_dir_mover.py) and answers at
once; the move finishes in the background and DescribeLogDirs shows it
(``is_future_key``). Per partition, as Kafka answers: NONE (moving, or already
there), LOG_DIR_NOT_FOUND (not one of this broker's ``log.dirs``),
KAFKA_STORAGE_ERROR (the replica is offline, or the copy could not be created),
REPLICA_NOT_AVAILABLE (not hosted here yet — the dir is remembered and the replica is
created in it when the metadata assigns it here), INVALID_TOPIC_EXCEPTION (the future
directory's name would be too long). v0 is gone from kio; v1 and v2 (flexible) are
served.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.build import error_code, make, response_module
from odradek.protocol.messages import Request
from odradek.server.authorized_operations import AclOperation, ResourceType
from odradek.server.handlers import handles

if TYPE_CHECKING:
    from odradek.server.services import BrokerServices

ALTER_REPLICA_LOG_DIRS_KEY: Final = 34


@handles(ALTER_REPLICA_LOG_DIRS_KEY, 1, 2)
async def alter_replica_log_dirs(services: BrokerServices, request: Request) -> Any:
    module = response_module(ALTER_REPLICA_LOG_DIRS_KEY, request.header.api_version)
    moves = services.log_dir_moves
    # ALTER on the cluster, as Kafka asks; denied, every partition says so
    denial = services.authorizer.denial(request.session, AclOperation.ALTER, ResourceType.CLUSTER)
    answers: dict[str, dict[int, str]] = {}
    for wanted in request.body.dirs:
        for topic in wanted.topics:
            for index in topic.partitions:
                if denial is not None:
                    code = denial
                elif moves is None:
                    code = "KAFKA_STORAGE_ERROR"  # a node without partitions
                else:
                    code = moves.alter(topic.name, int(index), wanted.path)
                answers.setdefault(topic.name, {})[int(index)] = code
    return make(
        module.AlterReplicaLogDirsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(
            make(
                module.AlterReplicaLogDirTopicResult,
                topic_name=name,
                partitions=tuple(
                    make(
                        module.AlterReplicaLogDirPartitionResult,
                        partition_index=index,
                        error_code=error_code(code),
                    )
                    for index, code in partitions.items()
                ),
            )
            for name, partitions in answers.items()
        ),
    )
