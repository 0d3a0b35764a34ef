"""LocalControllerChannel: plain data in, one error or None per item out, no images.

The channel's contract (metadata/controller_channel.py): a call that returns success
has already changed the image of the caller's node; a single-item call raises
ControllerError. Driven over a real in-process Controller on a tmp metadata log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from odradek.coordinator.transaction.producer_id_manager import ProducerIdManager
from odradek.metadata.controller import Controller
from odradek.metadata.controller_channel import (
    APPEND,
    DELETE,
    SET,
    Changes,
    ConfigOp,
    ControllerError,
    LocalControllerChannel,
    NewTopic,
    ProducerIdBlock,
    Validator,
)
from odradek.metadata.image import BROKER_RESOURCE, PRODUCER_ID_BLOCK_SIZE, TOPIC_RESOURCE
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.writer import LocalMetadataWriter
from odradek.server.metadata_log import METADATA_LOG_CONFIG
from odradek.storage.log_loader import open_log
from tests.support.brokers import register_unfenced

T = TypeVar("T")
DEFAULTS = {"num.partitions": 2, "default.replication.factor": 1}


class Rules:
    """ConfigRules with SET/DELETE/APPEND and a validator refusing the value "bad"."""

    def __init__(self) -> None:
        self.validated: list[dict[str, str]] = []

    def changes(
        self, resource_type: str, resource_name: str, ops: Sequence[ConfigOp]
    ) -> Callable[[Mapping[str, str]], Changes]:
        def combine(current: Mapping[str, str]) -> Changes:
            result: Changes = {}
            for op in ops:
                if op.op == APPEND:
                    base = current.get(op.name)
                    result[op.name] = f"{base},{op.value}" if base else op.value
                else:
                    result[op.name] = None if op.op == DELETE else op.value
            return result

        return combine

    def validator(self, resource_type: str, resource_name: str) -> Validator | None:
        def validate(merged: Mapping[str, str]) -> None:
            self.validated.append(dict(merged))
            if "bad" in merged.values():
                raise ControllerError("INVALID_CONFIG", "bad value")

        return validate if resource_type == BROKER_RESOURCE else None


@asynccontextmanager
async def channel_over(tmp_path: Path) -> AsyncIterator[tuple[LocalControllerChannel, Controller]]:
    log, _ = open_log(tmp_path / "__cluster_metadata-0", METADATA_LOG_CONFIG)
    loader = MetadataLoader()
    controller = Controller(LocalMetadataWriter(log, loader), loader, 1, lambda: DEFAULTS)
    channel = LocalControllerChannel(lambda: controller, Rules())
    await register_unfenced(controller, 1)
    try:
        yield channel, controller
    finally:
        log.close()


def run(
    tmp_path: Path, body: Callable[[LocalControllerChannel, Controller], Coroutine[Any, Any, T]]
) -> T:
    async def go() -> T:
        async with channel_over(tmp_path) as (channel, controller):
            return await body(channel, controller)

    return asyncio.run(go())


def test_create_topics_answers_an_error_or_none_per_topic_and_the_image_has_them(
    tmp_path: Path,
) -> None:
    async def body(channel: LocalControllerChannel, controller: Controller) -> None:
        errors = await channel.create_topics(
            [NewTopic("a", 3, 1), NewTopic("bad name!"), NewTopic("b", 1, 5)], False
        )
        assert errors[0] is None
        assert errors[1] is not None and errors[1].code == "INVALID_TOPIC_EXCEPTION"
        assert errors[2] is not None and errors[2].code == "INVALID_REPLICATION_FACTOR"
        assert len(controller.image.topics["a"].partitions) == 3  # already applied
        assert set(controller.image.topics) == {"a"}
        (again,) = await channel.create_topics([NewTopic("a")], False)
        assert again is not None and again.code == "TOPIC_ALREADY_EXISTS"
        before = controller.image
        assert await channel.create_topics([NewTopic("c")], validate_only=True) == [None]
        assert controller.image is before and "c" not in before.topics

    run(tmp_path, body)


def test_delete_topics_by_name_or_id(tmp_path: Path) -> None:
    async def body(channel: LocalControllerChannel, controller: Controller) -> None:
        await channel.create_topics([NewTopic("a"), NewTopic("b")], False)
        topic_id = controller.image.topics["b"].topic_id
        errors = await channel.delete_topics(["a", topic_id, "missing"])
        assert errors[:2] == [None, None]
        assert errors[2] is not None and errors[2].code == "UNKNOWN_TOPIC_OR_PARTITION"
        assert not controller.image.topics

    run(tmp_path, body)


def test_create_partitions_raises_its_error(tmp_path: Path) -> None:
    async def body(channel: LocalControllerChannel, controller: Controller) -> None:
        await channel.create_topics([NewTopic("a", 1, 1)], False)
        await channel.create_partitions("a", 4, None, validate_only=False)
        assert len(controller.image.topics["a"].partitions) == 4
        with pytest.raises(ControllerError) as fewer:
            await channel.create_partitions("a", 2, None, validate_only=False)
        assert fewer.value.code == "INVALID_PARTITIONS"
        with pytest.raises(ControllerError) as missing:
            await channel.create_partitions("nope", 2, None, validate_only=False)
        assert missing.value.code == "UNKNOWN_TOPIC_OR_PARTITION"

    run(tmp_path, body)


def test_alter_configs_applies_plain_ops_with_the_rules(tmp_path: Path) -> None:
    async def body(channel: LocalControllerChannel, controller: Controller) -> None:
        await channel.create_topics([NewTopic("a", 1, 1)], False)
        topic = (TOPIC_RESOURCE, "a")
        await channel.alter_configs(
            *topic,
            [ConfigOp("retention.ms", SET, "1000"), ConfigOp("cleanup.policy", SET, "delete")],
            replace=False,
            validate_only=False,
        )
        await channel.alter_configs(
            *topic,
            [ConfigOp("cleanup.policy", APPEND, "compact")],
            replace=False,
            validate_only=False,
        )
        assert controller.image.configs[topic] == {
            "retention.ms": "1000",
            "cleanup.policy": "delete,compact",
        }
        # legacy AlterConfigs replaces the whole set
        await channel.alter_configs(
            *topic, [ConfigOp("segment.ms", SET, "60000")], replace=True, validate_only=False
        )
        assert controller.image.configs[topic] == {"segment.ms": "60000"}
        with pytest.raises(ControllerError) as not_set:
            await channel.alter_configs(
                *topic, [ConfigOp("segment.ms", DELETE, None)], replace=True, validate_only=False
            )
        assert not_set.value.code == "INVALID_REQUEST"
        with pytest.raises(ControllerError) as invalid:  # the controller's own topic check
            await channel.alter_configs(
                *topic, [ConfigOp("retention.ms", SET, "x")], replace=False, validate_only=False
            )
        assert invalid.value.code == "INVALID_CONFIG"

    run(tmp_path, body)


def test_alter_configs_runs_the_rules_validator_before_committing(tmp_path: Path) -> None:
    async def body(channel: LocalControllerChannel, controller: Controller) -> None:
        broker = (BROKER_RESOURCE, "1")
        ok = [ConfigOp("log.retention.ms", SET, "5")]
        await channel.alter_configs(*broker, ok, replace=False, validate_only=True)
        assert broker not in controller.image.configs  # validate_only commits nothing
        with pytest.raises(ControllerError) as refused:
            await channel.alter_configs(
                *broker, [ConfigOp("x", SET, "bad")], replace=False, validate_only=False
            )
        assert refused.value.code == "INVALID_CONFIG"
        assert broker not in controller.image.configs
        await channel.alter_configs(*broker, ok, replace=False, validate_only=False)
        assert controller.image.configs[broker] == {"log.retention.ms": "5"}

    run(tmp_path, body)


def test_producer_id_blocks_and_the_manager_never_repeat_an_id(tmp_path: Path) -> None:
    async def body(channel: LocalControllerChannel, controller: Controller) -> list[int]:
        first = await channel.allocate_producer_ids(1)
        second = await channel.allocate_producer_ids(1)
        assert first == ProducerIdBlock(0, PRODUCER_ID_BLOCK_SIZE)
        assert second.first_id == first.first_id + first.count
        manager = ProducerIdManager(1, channel)
        return [await manager.next_producer_id() for _ in range(PRODUCER_ID_BLOCK_SIZE + 2)]

    ids = run(tmp_path, body)
    assert len(set(ids)) == len(ids)
    assert ids[0] == 2 * PRODUCER_ID_BLOCK_SIZE  # after the two blocks taken above
    assert ids[-1] == 3 * PRODUCER_ID_BLOCK_SIZE + 1  # the next block, on running out


def test_nothing_the_channel_returns_is_an_image(tmp_path: Path) -> None:
    async def body(channel: LocalControllerChannel, controller: Controller) -> list[Any]:
        return [
            *await channel.create_topics([NewTopic("a")], False),
            *await channel.create_topics([NewTopic("a")], True),
            *await channel.delete_topics(["a"]),
            await channel.allocate_producer_ids(1),
        ]

    for result in run(tmp_path, body):
        assert result is None or isinstance(result, (ControllerError, ProducerIdBlock))
