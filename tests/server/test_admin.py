"""The admin APIs of a real broker, every claimed version, with kio on the wire.

DeleteTopics, CreatePartitions, DescribeCluster, DescribeLogDirs, DeleteRecords and
OffsetForLeaderEpoch: the happy path and each error code, per version. The config
APIs are in test_admin_configs.py, the same APIs through confluent-kafka's
AdminClient in test_admin_client.py.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.build import make
from odradek.server.handlers import supported_versions
from tests.server.test_protocol import (
    batch,
    create_topic,
    fetch,
    list_offset,
    make_topic,
    metadata,
    nested,
    produce,
    unique,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

DELETE_TOPICS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 20, 21, 23
DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_LOG_DIRS = 32, 33, 35
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 37, 44, 60
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TIMEOUT = datetime.timedelta(seconds=10)


@pytest.fixture(autouse=True)
def _no_tracebacks(request: pytest.FixtureRequest) -> Iterator[None]:
    """A handler that raised would have closed the connection and logged a traceback."""
    yield
    if "shared_broker" in request.fixturenames:
        log = request.getfixturevalue("shared_broker").log()
        assert "Traceback" not in log, log[-4000:]


def test_claimed_admin_versions_are_the_tested_ones() -> None:
    claimed = supported_versions()
    assert claimed[DELETE_TOPICS] == (1, 6)
    assert claimed[DELETE_RECORDS] == (0, 2)
    assert claimed[OFFSET_FOR_LEADER_EPOCH] == (2, 4)
    assert claimed[DESCRIBE_CONFIGS] == (1, 4)
    assert claimed[ALTER_CONFIGS] == (0, 2)
    assert claimed[DESCRIBE_LOG_DIRS] == (1, 4)
    assert claimed[CREATE_PARTITIONS] == (0, 3)
    assert claimed[INCREMENTAL_ALTER_CONFIGS] == (0, 1)
    assert claimed[DESCRIBE_CLUSTER] == (0, 2)


# -- request builders ------------------------------------------------------------------
def delete_topics(client: WireClient, version: int, names: list[str]) -> dict[str, Any]:
    """Delete by name; results keyed by name."""
    module = nested(DELETE_TOPICS, version)
    if version >= 6:
        entries = tuple(make(module.DeleteTopicState, name=n, topic_id=None) for n in names)
        body = make(module.DeleteTopicsRequest, topics=entries, timeout=TIMEOUT)
    else:
        body = make(module.DeleteTopicsRequest, topic_names=tuple(names), timeout=TIMEOUT)
    return {r.name: r for r in client.request(body).responses}


def create_partitions(
    client: WireClient,
    version: int,
    wanted: list[tuple[str, int, list[list[int]] | None]],
    validate_only: bool = False,
) -> list[Any]:
    module = nested(CREATE_PARTITIONS, version)
    topics = tuple(
        make(
            module.CreatePartitionsTopic,
            name=name,
            count=count,
            assignments=None
            if assignments is None
            else tuple(
                make(module.CreatePartitionsAssignment, broker_ids=tuple(a)) for a in assignments
            ),
        )
        for name, count, assignments in wanted
    )
    response = client.request(
        make(
            module.CreatePartitionsRequest,
            topics=topics,
            timeout=TIMEOUT,
            validate_only=validate_only,
        )
    )
    return list(response.results)


def delete_records(
    client: WireClient, version: int, topic: str, offsets: dict[int, int]
) -> dict[int, Any]:
    module = nested(DELETE_RECORDS, version)
    body = make(
        module.DeleteRecordsRequest,
        topics=(
            make(
                module.DeleteRecordsTopic,
                name=topic,
                partitions=tuple(
                    make(module.DeleteRecordsPartition, partition_index=p, offset=o)
                    for p, o in offsets.items()
                ),
            ),
        ),
        timeout=TIMEOUT,
    )
    (result,) = client.request(body).topics
    return {p.partition_index: p for p in result.partitions}


def offset_for_epoch(
    client: WireClient, version: int, topic: str, partition: int, epoch: int, current: int = -1
) -> Any:
    module = nested(OFFSET_FOR_LEADER_EPOCH, version)
    body = make(
        module.OffsetForLeaderEpochRequest,
        replica_id=-1,
        topics=(
            make(
                module.OffsetForLeaderTopic,
                topic=topic,
                partitions=(
                    make(
                        module.OffsetForLeaderPartition,
                        partition=partition,
                        current_leader_epoch=current,
                        leader_epoch=epoch,
                    ),
                ),
            ),
        ),
    )
    ((result,),) = [t.partitions for t in client.request(body).topics]
    return result


def describe_log_dirs(client: WireClient, version: int, wanted: dict[str, list[int]] | None) -> Any:
    module = nested(DESCRIBE_LOG_DIRS, version)
    topics = (
        None
        if wanted is None
        else tuple(
            make(module.DescribableLogDirTopic, topic=t, partitions=tuple(p))
            for t, p in wanted.items()
        )
    )
    return client.request(make(module.DescribeLogDirsRequest, topics=topics))


def partition_count(client: WireClient, topic: str) -> int:
    (described,) = metadata(client, [topic], allow_auto_topic_creation=False).topics
    return len(described.partitions)


def wait_for(probe: Any, what: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# -- DeleteTopics ----------------------------------------------------------------------
@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        doomed = make_topic(client, f"del-v{version}", partitions=2)
        assert produce(client, doomed, 1, batch([b"x"])).error_code == ErrorCode.none
        missing = unique("missing")
        results = delete_topics(client, version, [doomed, missing])
        assert results[doomed].error_code == ErrorCode.none
        assert results[missing].error_code == ErrorCode.unknown_topic_or_partition
        (gone,) = metadata(client, [doomed], allow_auto_topic_creation=False).topics
        assert gone.error_code == ErrorCode.unknown_topic_or_partition
        # The name is free again, and the new topic starts empty.
        assert create_topic(client, doomed, 2).error_code == ErrorCode.none
        assert list_offset(client, doomed, 1, -1).offset == 0
        # Listing a topic twice is an error for both entries; nothing is deleted.
        twice = delete_topics(client, version, [doomed, doomed])
        assert twice[doomed].error_code == ErrorCode.invalid_request
        assert partition_count(client, doomed) == 2


def test_delete_topics_v6_by_topic_id(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, "del-by-id")
        other = make_topic(client, "del-both")
        (described,) = metadata(client, [name]).topics
        topic_id = described.topic_id
        unknown_id = uuid.uuid4()
        module = nested(DELETE_TOPICS, 6)
        entries = (
            make(module.DeleteTopicState, name=None, topic_id=topic_id),
            make(module.DeleteTopicState, name=None, topic_id=unknown_id),
            make(module.DeleteTopicState, name=other, topic_id=uuid.uuid4()),
        )
        response = client.request(make(module.DeleteTopicsRequest, topics=entries, timeout=TIMEOUT))
        by_id, unknown, both = response.responses
        assert (by_id.name, by_id.topic_id, by_id.error_code) == (name, topic_id, ErrorCode.none)
        assert (unknown.topic_id, unknown.error_code) == (unknown_id, ErrorCode.unknown_topic_id)
        assert both.error_code == ErrorCode.invalid_request
        assert partition_count(client, other) == 1
        # A name and an id that resolve to the same topic are a duplicate.
        (again,) = metadata(client, [other]).topics
        response = client.request(
            make(
                module.DeleteTopicsRequest,
                topics=(
                    make(module.DeleteTopicState, name=other, topic_id=None),
                    make(module.DeleteTopicState, name=None, topic_id=again.topic_id),
                ),
                timeout=TIMEOUT,
            )
        )
        assert [r.error_code for r in response.responses] == [ErrorCode.invalid_request] * 2


def test_delete_topic_renames_then_removes_its_directories(shared_broker: BrokerProcess) -> None:
    data_dir = shared_broker.data_dir
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, "del-disk", partitions=2)
        assert produce(client, name, 0, batch([b"on disk"])).error_code == ErrorCode.none
        assert (data_dir / f"{name}-0").is_dir() and (data_dir / f"{name}-1").is_dir()
        assert delete_topics(client, 6, [name])[name].error_code == ErrorCode.none
        # Renamed before the response (housekeeping may already have removed it).
        assert not (data_dir / f"{name}-0").exists() and not (data_dir / f"{name}-1").exists()
        renamed = [p.name for p in data_dir.iterdir() if p.name.startswith(f"{name}-")]
        assert all(n.endswith("-delete") for n in renamed), renamed
        wait_for(
            lambda: not [p for p in data_dir.iterdir() if p.name.startswith(f"{name}-")],
            "the -delete directories to be removed",
        )


def test_delete_topics_disabled(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", ["--override", "delete.topic.enable=false"]).start()
    try:
        with WireClient(process.bootstrap) as client:
            name = make_topic(client, "keep")
            for version in range(1, 7):
                result = delete_topics(client, version, [name])[name]
                expected = (
                    ErrorCode.topic_deletion_disabled if version >= 3 else ErrorCode.invalid_request
                )
                assert result.error_code == expected, version
            assert partition_count(client, name) == 1
    finally:
        try:
            assert process.stop() == 0
        finally:
            process.kill()


# -- CreatePartitions ------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, f"parts-v{version}")
        (dry,) = create_partitions(client, version, [(name, 3, None)], validate_only=True)
        assert dry.error_code == ErrorCode.none
        assert partition_count(client, name) == 1
        (grown,) = create_partitions(client, version, [(name, 3, None)])
        assert grown.error_code == ErrorCode.none and grown.name == name
        assert partition_count(client, name) == 3
        assert produce(client, name, 2, batch([b"new partition"])).error_code == ErrorCode.none
        (placed,) = create_partitions(client, version, [(name, 4, [[1]])])
        assert placed.error_code == ErrorCode.none
        assert partition_count(client, name) == 4
        missing = unique("missing")
        results = create_partitions(
            client,
            version,
            [
                (name, 4, None),  # not an increase
                (missing, 2, None),
            ],
        )
        assert [r.error_code for r in results] == [
            ErrorCode.invalid_partitions,
            ErrorCode.unknown_topic_or_partition,
        ]
        assert results[0].error_message
        (fewer,) = create_partitions(client, version, [(name, 2, None)])
        assert fewer.error_code == ErrorCode.invalid_partitions
        for bad in ([[1], [1]], [[2]], [[1, 1]], [[]]):
            (result,) = create_partitions(client, version, [(name, 5, bad)])
            assert result.error_code == ErrorCode.invalid_replica_assignment, bad
        twice = create_partitions(client, version, [(name, 6, None), (name, 7, None)])
        assert [r.error_code for r in twice] == [ErrorCode.invalid_request] * 2
        (huge,) = create_partitions(client, version, [(name, 2**31 - 1, None)])
        assert huge.error_code == ErrorCode.policy_violation
        assert partition_count(client, name) == 4


# -- DescribeCluster -----------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster(shared_broker: BrokerProcess, version: int) -> None:
    module = nested(DESCRIBE_CLUSTER, version)
    with WireClient(shared_broker.bootstrap) as client:
        cluster_id = metadata(client, None).cluster_id
        response = client.request(
            make(
                module.DescribeClusterRequest,
                include_cluster_authorized_operations=False,
                endpoint_type=1,
                include_fenced_brokers=True,  # v2 (KIP-1073): fenced ones too, marked
            )
        )
        if version >= 2:  # the single node is unfenced before it is ready
            assert [b.is_fenced for b in response.brokers] == [False]
        assert response.error_code == ErrorCode.none
        assert (response.cluster_id, response.controller_id) == (cluster_id, 1)
        assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [
            (1, "127.0.0.1", shared_broker.port, None)
        ]
        assert response.cluster_authorized_operations == -(2**31)
        if version >= 1:
            assert response.endpoint_type == 1
        response = client.request(
            make(
                module.DescribeClusterRequest,
                include_cluster_authorized_operations=True,
                endpoint_type=1,
                include_fenced_brokers=False,
            )
        )
        operations = response.cluster_authorized_operations
        assert {op for op in range(32) if operations & (1 << op)} == {5, 7, 8, 9, 10, 11, 12}
        if version >= 1:
            controllers = client.request(
                make(
                    module.DescribeClusterRequest,
                    include_cluster_authorized_operations=False,
                    endpoint_type=2,
                    include_fenced_brokers=False,
                )
            )
            assert controllers.error_code == ErrorCode.unsupported_endpoint_type
            assert controllers.brokers == ()


# -- DescribeLogDirs -----------------------------------------------------------------------
@pytest.mark.parametrize("version", range(1, 5))
def test_describe_log_dirs(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, f"dirs-v{version}", partitions=2)
        assert produce(client, name, 0, batch([b"sized"] * 3)).error_code == ErrorCode.none
        response = describe_log_dirs(client, version, None)
        if version >= 3:
            assert response.error_code == ErrorCode.none
        (result,) = response.results
        assert result.error_code == ErrorCode.none
        assert result.log_dir == str(shared_broker.data_dir.resolve())
        topics = {t.name: t for t in result.topics}
        partitions = {p.partition_index: p for p in topics[name].partitions}
        on_disk = sum(
            f.stat().st_size for f in (shared_broker.data_dir / f"{name}-0").glob("*.log")
        )
        assert partitions[0].partition_size == on_disk > 0
        assert partitions[1].partition_size == 0
        assert all(p.offset_lag == 0 and not p.is_future_key for p in partitions.values())
        if version >= 4:
            assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
        (filtered,) = describe_log_dirs(
            client, version, {name: [1], unique("missing"): [0]}
        ).results
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in filtered.topics] == [
            (name, [1])
        ]


# -- DeleteRecords ---------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 3))
def test_delete_records(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, f"dr-v{version}", configs={"segment.bytes": "200"})
        for i in range(4):  # 4 segments of 2 records: 0-1, 2-3, 4-5, 6-7
            values = [f"record-{i}-{j}".encode() * 5 for j in range(2)]
            assert produce(client, name, 0, batch(values)).error_code == ErrorCode.none
        directory = shared_broker.data_dir / f"{name}-0"
        assert len(list(directory.glob("*.log"))) == 4
        result = delete_records(client, version, name, {0: 5})[0]
        assert (result.error_code, result.low_watermark) == (ErrorCode.none, 5)
        assert list_offset(client, name, 0, -2).offset == 5
        # Segments wholly below offset 5 are gone; the one holding 5 stays.
        assert sorted(p.name for p in directory.glob("*.log")) == [
            "00000000000000000004.log",
            "00000000000000000006.log",
        ]
        assert fetch(client, name, 0, 0).error_code == ErrorCode.offset_out_of_range
        assert fetch(client, name, 0, 5).error_code == ErrorCode.none
        # Below the current start: nothing happens, the start is reported.
        assert delete_records(client, version, name, {0: 2})[0].low_watermark == 5
        errors = delete_records(client, version, name, {0: 100, 3: 1})
        assert errors[0].error_code == ErrorCode.offset_out_of_range
        assert errors[3].error_code == ErrorCode.unknown_topic_or_partition
        assert delete_records(client, version, name, {0: -7})[0].error_code == (
            ErrorCode.offset_out_of_range
        )
        result = delete_records(client, version, name, {0: -1})[0]  # -1: the high watermark
        assert (result.error_code, result.low_watermark) == (ErrorCode.none, 8)
        assert list_offset(client, name, 0, -2).offset == 8
        compacted = make_topic(client, "dr-compact", configs={"cleanup.policy": "compact"})
        result = delete_records(client, version, compacted, {0: 0})[0]
        assert result.error_code == ErrorCode.policy_violation


# -- OffsetForLeaderEpoch ----------------------------------------------------------------------
@pytest.mark.parametrize("version", range(2, 5))
def test_offset_for_leader_epoch(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, f"ofle-v{version}", partitions=2)
        assert produce(client, name, 0, batch([b"1", b"2", b"3"])).error_code == ErrorCode.none
        for current in (-1, 0):
            result = offset_for_epoch(client, version, name, 0, 0, current)
            assert (result.error_code, result.leader_epoch, result.end_offset) == (
                ErrorCode.none,
                0,
                3,
            )
        # An empty partition: its current epoch starts (and ends) at 0.
        empty = offset_for_epoch(client, version, name, 1, 0)
        assert (empty.error_code, empty.leader_epoch, empty.end_offset) == (ErrorCode.none, 0, 0)
        future = offset_for_epoch(client, version, name, 0, 4)
        assert (future.error_code, future.leader_epoch, future.end_offset) == (
            ErrorCode.none,
            -1,
            -1,
        )
        ahead = offset_for_epoch(client, version, name, 0, 0, current=5)
        assert ahead.error_code == ErrorCode.unknown_leader_epoch
        missing = offset_for_epoch(client, version, name, 7, 0)
        assert missing.error_code == ErrorCode.unknown_topic_or_partition
