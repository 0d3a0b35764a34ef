"""MetadataLoader: committed batches in, (delta, image) out; start-up replay through it.

- each record type shows up in the delta as what it changed, with old and new state;
- a replay of N batches publishes once and gives the image and the (net) delta that
  feeding the same batches one by one gives; every delta equals a full comparison of
  the two images (the touched-keys shortcut misses nothing);
- a damaged batch stops the replay at that batch's position, with nothing published;
- the controller's image is the loader's; a failed append publishes nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.metadata.controller import Controller
from odradek.metadata.delta import MetadataDelta, between
from odradek.metadata.image import MetadataImage, MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.topic_changes import NewTopic
from odradek.metadata.writer import LocalMetadataWriter, replay_log
from odradek.records.codec import Record, encode_batch
from odradek.storage.errors import CommittedDataCorruptError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from tests.support.brokers import register_unfenced

from .test_metadata_image import as_model, record_lists

TOPIC_ID = uuid.UUID(int=7)


def broker(broker_id: int, port: int = 9092, **extra: Any) -> MetadataRecord:
    fields = {"broker_id": broker_id, "endpoints": [["PLAINTEXT", "h", port]], "rack": None}
    return MetadataRecord("RegisterBroker", {**fields, **extra})


def topic(name: str, topic_id: uuid.UUID = TOPIC_ID) -> MetadataRecord:
    return MetadataRecord("Topic", {"name": name, "topic_id": str(topic_id)})


def partition(index: int, epoch: int = 0, topic_id: uuid.UUID = TOPIC_ID) -> MetadataRecord:
    return MetadataRecord(
        "Partition",
        {
            "topic_id": str(topic_id),
            "partition": index,
            "replicas": [0],
            "isr": [0],
            "leader": 0,
            "leader_epoch": epoch,
        },
    )


def config(kind: str, name: str, key: str, value: str | None) -> MetadataRecord:
    fields = {"resource_type": kind, "resource_name": name, "name": key, "value": value}
    return MetadataRecord("Config", fields)


class Recorder:
    def __init__(self, loader: MetadataLoader) -> None:
        self.published: list[tuple[MetadataDelta, MetadataImage]] = []
        loader.subscribe(lambda delta, image: self.published.append((delta, image)))

    @property
    def last(self) -> MetadataDelta:
        return self.published[-1][0]


def test_each_record_type_is_in_the_delta_with_old_and_new_state() -> None:
    loader = MetadataLoader()
    seen = Recorder(loader)

    loader.handle_commit(1, [broker(0), broker(1, fenced=True)])
    delta = seen.last
    assert (delta.previous_offset, delta.offset) == (-1, 1)
    assert set(delta.brokers) == {0, 1} and delta.brokers[0].old is None
    assert delta.brokers[0].new.epoch == 0 and delta.brokers[1].new.epoch == 1
    assert delta.brokers[1].new.fenced and not delta.brokers[0].new.fenced
    assert not delta.topics_changed

    loader.handle_commit(4, [topic("t"), partition(0), partition(1)])
    delta = seen.last
    assert list(delta.created_topics) == [TOPIC_ID] and not delta.deleted_topics
    assert {key: (c.old, c.new.partition) for key, c in delta.partitions.items()} == {
        (TOPIC_ID, 0): (None, 0),
        (TOPIC_ID, 1): (None, 1),
    }

    loader.handle_commit(5, [partition(1, epoch=3)])
    delta = seen.last
    (change,) = delta.partitions.values()
    assert change.old is not None and change.old.leader_epoch == 0
    assert change.new.leader_epoch == 3 and change.topic.name == "t"
    assert not delta.created_topics and not delta.brokers

    loader.handle_commit(7, [config("topic", "t", "retention.ms", "5"), broker(0, port=1)])
    delta = seen.last
    assert delta.topic_configs_changed() == {"t"} and not delta.broker_configs_changed
    assert dict(delta.configs[("topic", "t")].new) == {"retention.ms": "5"}
    assert dict(delta.configs[("topic", "t")].old) == {}
    old, new = delta.brokers[0].old, delta.brokers[0].new
    assert old is not None and old.endpoints[0][2] == 9092 and new.endpoints[0][2] == 1
    assert new.epoch == 7  # a re-registration is a new broker epoch

    loader.handle_commit(8, [config("broker", "", "num.partitions", "3")])
    assert seen.last.broker_configs_changed

    loader.handle_commit(9, [MetadataRecord("ProducerIds", {"next_producer_id": 1000})])
    assert seen.last.producer_ids == (0, 1000)

    loader.handle_commit(10, [MetadataRecord("RemoveTopic", {"topic_id": str(TOPIC_ID)})])
    delta = seen.last
    assert set(delta.deleted_topics) == {TOPIC_ID}
    assert set(delta.deleted_topics[TOPIC_ID].partitions) == {0, 1}
    assert not delta.partitions  # the deletion says it; no per-partition entries
    assert set(delta.configs) == {("topic", "t")}  # its configs went with it
    assert loader.image.offset == 10 and "t" not in loader.image.topics


def test_a_topic_recreated_under_its_name_is_a_deletion_and_a_creation() -> None:
    loader = MetadataLoader()
    seen = Recorder(loader)
    loader.handle_commit(1, [topic("t"), partition(0)])
    other = uuid.UUID(int=8)
    remove = MetadataRecord("RemoveTopic", {"topic_id": str(TOPIC_ID)})
    loader.handle_commit(4, [remove, topic("t", other), partition(0, topic_id=other)])
    delta = seen.last
    assert set(delta.deleted_topics) == {TOPIC_ID} and set(delta.created_topics) == {other}
    assert list(delta.partitions) == [(other, 0)] and delta.partitions[(other, 0)].old is None


def test_created_and_deleted_within_one_replay_is_not_in_its_delta() -> None:
    loader = MetadataLoader()
    seen = Recorder(loader)
    run = loader.replay()
    run.apply(1, [topic("t"), partition(0)])
    run.apply(2, [MetadataRecord("RemoveTopic", {"topic_id": str(TOPIC_ID)})])
    run.apply(3, [broker(0)])
    assert not seen.published  # nothing is visible before finish()
    run.finish()
    ((delta, image),) = seen.published
    assert not delta.topics_changed and set(delta.brokers) == {0} and image.offset == 3


def test_an_empty_replay_publishes_nothing() -> None:
    loader = MetadataLoader()
    seen = Recorder(loader)
    assert loader.replay().finish() is loader.image
    assert not seen.published


def test_offsets_must_grow() -> None:
    loader = MetadataLoader()
    loader.handle_commit(3, [broker(0)])
    with pytest.raises(AssertionError):
        loader.handle_commit(3, [broker(1)])


def test_a_failing_subscriber_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    loader = MetadataLoader()

    def broken(_delta: MetadataDelta, _image: MetadataImage) -> None:
        raise RuntimeError("bug")

    loader.subscribe(broken)
    seen = Recorder(loader)
    loader.handle_commit(0, [broker(0)])
    assert len(seen.published) == 1 and "bug" in caplog.text


def batches(records: list[MetadataRecord], cuts: list[int]) -> list[list[MetadataRecord]]:
    points = sorted({c for c in cuts if 0 < c < len(records)})
    bounds = [0, *points, len(records)]
    return [records[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(max_examples=200, deadline=None)
@given(records=record_lists(), cuts=st.lists(st.integers(0, 41), max_size=6))
def test_replaying_n_batches_equals_applying_them_one_by_one(
    records: list[MetadataRecord], cuts: list[int]
) -> None:
    split = batches(records, cuts)
    one_by_one, replayed = MetadataLoader(), MetadataLoader()
    seen_one, seen_all = Recorder(one_by_one), Recorder(replayed)
    run = replayed.replay()
    offset = -1
    try:
        for batch in split:
            offset += len(batch)
            before = one_by_one.image
            one_by_one.handle_commit(offset, batch)
            delta, image = seen_one.published[-1]
            assert delta == between(before, image)  # touched keys miss nothing
            run.apply(offset, batch)
    except ValueError:  # a Partition of an unknown topic: refused either way
        return
    run.finish()
    assert len(seen_one.published) == len(split) and len(seen_all.published) == 1
    assert as_model(replayed.image) == as_model(one_by_one.image)
    assert replayed.image == one_by_one.image
    ((delta, image),) = seen_all.published
    assert delta == between(MetadataImage(), image)


# -- start-up replay from the log ----------------------------------------------------
def open_metadata_log(path: Path) -> Log:
    log, _ = open_log(path, LogConfig(retention_ms=-1, retention_bytes=-1), clean_shutdown=False)
    return log


def write_batches(log: Log, *batches: list[MetadataRecord]) -> list[int]:
    """Append each batch; the file position where each starts."""
    positions = []
    for records in batches:
        positions.append(log.active_segment.size)
        encoded = [Record(i, 0, *r.encode()) for i, r in enumerate(records)]
        log.append_as_leader(encode_batch(encoded), 1)
    log.flush()
    return positions


def test_start_up_replay_goes_through_the_loader_in_one_publication(tmp_path: Path) -> None:
    log = open_metadata_log(tmp_path / "__cluster_metadata-0")
    write_batches(log, [broker(0)], [topic("t"), partition(0)], [partition(0, epoch=2)])
    loader = MetadataLoader()
    seen = Recorder(loader)
    image = replay_log(log, loader)
    log.close()
    ((delta, published),) = seen.published
    assert published is image is loader.image and image.offset == 3
    assert image.topics["t"].partitions[0].leader_epoch == 2
    assert set(delta.created_topics) == {TOPIC_ID} and set(delta.brokers) == {0}


@pytest.mark.parametrize("damage", ["crc", "unknown topic"])
def test_a_damaged_batch_stops_the_replay_at_its_position(tmp_path: Path, damage: str) -> None:
    log = open_metadata_log(tmp_path / "__cluster_metadata-0")
    stray = partition(0, topic_id=uuid.UUID(int=99))  # decodes, does not fit the image
    second = [stray] if damage == "unknown topic" else [topic("t")]
    positions = write_batches(log, [broker(0)], second, [broker(1)])
    if damage == "crc":
        with open(log.active_segment.log_path, "r+b") as file:
            file.seek(positions[1] + 70)  # inside the records, under the CRC
            byte = file.read(1)
            file.seek(positions[1] + 70)
            file.write(bytes([byte[0] ^ 0x10]))
    loader = MetadataLoader()
    seen = Recorder(loader)
    with pytest.raises(CommittedDataCorruptError) as raised:
        replay_log(log, loader)
    log.close()
    assert raised.value.position == positions[1]
    assert f"position {positions[1]}" in str(raised.value) and "\n" not in str(raised.value)
    assert not seen.published and loader.image == MetadataImage()


def test_the_controller_decides_on_the_image_the_loader_publishes(tmp_path: Path) -> None:
    log = open_metadata_log(tmp_path / "__cluster_metadata-0")
    loader = MetadataLoader()
    seen = Recorder(loader)
    defaults = {"num.partitions": 2, "default.replication.factor": 1}
    controller = Controller(LocalMetadataWriter(log, loader), loader, 0, lambda: defaults)
    controller.replay()

    async def changes() -> None:
        await register_unfenced(controller, 0)
        await controller.create_topics([NewTopic("t")], False)

    asyncio.run(changes())
    log.close()
    assert (
        controller.image is loader.image and len(seen.published) == 3
    )  # registered, unfenced, created
    delta, image = seen.published[-1]
    assert image is controller.image and set(image.topics["t"].partitions) == {0, 1}
    assert [t.name for t in delta.created_topics.values()] == ["t"]


def test_removing_a_replaced_topic_id_keeps_the_topic_that_took_its_name() -> None:
    """Found by hypothesis: Topic a (id 1), Topic a (id 2), RemoveTopic id 1 removed id 2."""
    first, second = uuid.UUID(int=1), uuid.UUID(int=2)
    loader = MetadataLoader()
    seen = Recorder(loader)
    loader.handle_commit(
        1,
        [
            MetadataRecord("Topic", {"name": "a", "topic_id": str(first)}),
            MetadataRecord("Topic", {"name": "a", "topic_id": str(second)}),
        ],
    )
    loader.handle_commit(2, [MetadataRecord("RemoveTopic", {"topic_id": str(first)})])
    assert loader.image.topics["a"].topic_id == second
    assert loader.image.topic_by_id(first) is None
    delta, _ = seen.published[-1]
    assert not delta.deleted_topics and not delta.created_topics
