"""In-process checks of the admin helpers: OffsetForLeaderEpoch on a leader whose epoch
moved on (FENCED_LEADER_EPOCH cannot be provoked on a single node over the wire, since
leader epochs only change with elections), and the config tables behind DescribeConfigs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.build import make
from odradek.protocol.messages import Request, RequestHeader
from odradek.records.codec import encode_batch, new_records
from odradek.replica.replica_manager import Partition, ReplicaManager
from odradek.server.authorizer import ALLOW_ALL
from odradek.server.config import BROKER_CONFIGS, BrokerConfig
from odradek.server.config_describe import (
    DEFAULT_CONFIG,
    INT,
    LIST,
    LONG,
    STATIC_BROKER_CONFIG,
    TOPIC_SYNONYMS,
    BrokerLayers,
    broker_config_type,
    broker_documentation,
    describe_topic,
)
from odradek.server.handlers.records_admin import offset_for_leader_epoch
from odradek.storage.log_config import TOPIC_CONFIGS, LogConfig
from odradek.storage.log_loader import open_log
from tests.server.test_protocol import nested


@pytest.fixture
def partition(tmp_path: Path) -> Any:
    """A leader at epoch 3 whose log has epochs 0 (offsets 0-2) and 2 (offsets 3-4)."""
    log, _ = open_log(tmp_path / "t-0", LogConfig())
    log.append_as_leader(encode_batch(new_records([b"a", b"b", b"c"])), 0)
    log.append_as_leader(encode_batch(new_records([b"d", b"e"])), 2)
    log.high_watermark = log.log_end_offset
    part = Partition("t", 0, "id", log, 1)
    assert part.become_leader(3, 0, (1,), (1,), now_ms=0)  # writes epoch 3 at the log end
    yield part
    log.close()


def test_a_new_leader_s_epoch_starts_at_its_log_end_before_anything_is_written_in_it(
    partition: Partition,
) -> None:
    def end_offset_for(epoch: int) -> tuple[int, int]:
        return partition.last_offset_for_leader_epoch(-1, epoch)

    assert end_offset_for(3) == (3, 5)  # current epoch, nothing written in it
    assert end_offset_for(2) == (2, 5)
    assert end_offset_for(1) == (0, 3)
    assert end_offset_for(0) == (0, 3)
    assert end_offset_for(4) == (-1, -1)
    assert end_offset_for(-1) == (-1, -1)


@pytest.mark.parametrize("version", range(2, 5))
def test_offset_for_leader_epoch_checks_the_current_leader_epoch(
    partition: Partition, version: int
) -> None:
    replicas = ReplicaManager(1, None)  # type: ignore[arg-type]
    replicas.partitions[("t", 0)] = partition
    services = SimpleNamespace(replicas=replicas, authorizer=ALLOW_ALL)
    module = nested(23, version)

    def ask(current: int, epoch: int) -> Any:
        body = make(
            module.OffsetForLeaderEpochRequest,
            replica_id=-1,
            topics=(
                make(
                    module.OffsetForLeaderTopic,
                    topic="t",
                    partitions=(
                        make(
                            module.OffsetForLeaderPartition,
                            partition=0,
                            current_leader_epoch=current,
                            leader_epoch=epoch,
                        ),
                    ),
                ),
            ),
        )
        request = Request(RequestHeader(23, version, 1, "tests"), body, 0)
        response = asyncio.run(offset_for_leader_epoch(services, request))  # type: ignore[arg-type]
        return response.topics[0].partitions[0]

    fenced = ask(2, 2)
    assert (fenced.error_code, fenced.leader_epoch, fenced.end_offset) == (
        ErrorCode.fenced_leader_epoch,
        -1,
        -1,
    )
    assert ask(4, 2).error_code == ErrorCode.unknown_leader_epoch
    answer = ask(3, 1)
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.none, 0, 3)


def test_every_config_has_a_type_and_documentation() -> None:
    for definition in BROKER_CONFIGS:
        assert broker_config_type(definition) in range(1, 10), definition.name
        assert broker_documentation(definition), definition.name
    assert broker_config_type(next(d for d in BROKER_CONFIGS if d.name == "log.roll.hours")) == INT
    assert broker_config_type(next(d for d in BROKER_CONFIGS if d.name == "log.roll.ms")) == LONG
    assert broker_config_type(next(d for d in BROKER_CONFIGS if d.name == "log.dirs")) == LIST
    assert all(d.doc for d in TOPIC_CONFIGS)


def test_topic_synonyms_follow_kafka_precedence() -> None:
    assert TOPIC_SYNONYMS["retention.ms"] == [
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ]
    assert TOPIC_SYNONYMS["segment.ms"] == ["log.roll.ms", "log.roll.hours"]
    assert TOPIC_SYNONYMS["max.message.bytes"] == ["message.max.bytes"]
    assert TOPIC_SYNONYMS["delete.retention.ms"] == ["log.cleaner.delete.retention.ms"]
    assert TOPIC_SYNONYMS["file.delete.delay.ms"] == ["log.segment.delete.delay.ms"]


def test_describe_topic_from_static_hours() -> None:
    static = BrokerConfig({"log.retention.hours": "2", "log.segment.bytes": "4096"})
    layers = BrokerLayers(static, {}, {})
    entries = {e.name: e for e in describe_topic(layers, {}, LogConfig(), None)}
    # The value shown is the effective one; here the caller passed plain defaults.
    retention = entries["retention.ms"]
    assert retention.source == STATIC_BROKER_CONFIG
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.hours", "2", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    ]
    assert entries["delete.retention.ms"].source == DEFAULT_CONFIG
    assert [(s.name, s.value, s.source) for s in entries["delete.retention.ms"].synonyms] == [
        ("log.cleaner.delete.retention.ms", "86400000", DEFAULT_CONFIG),
    ]
    effective = static.topic_defaults
    assert (effective.retention_ms, effective.segment_bytes) == (7_200_000, 4096)
