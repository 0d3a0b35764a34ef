"""Metadata snapshots: the file format, image → records, and when to take one.

- ``build_snapshot``/``read_snapshot`` round-trip any records, in batches of at most
  ``MAX_BATCH_BYTES`` whose offsets count from 0 (header first, footer last); any
  flipped byte or cut is refused with one line naming the file;
- ``MetadataImage.to_records`` replayed from empty gives the same image, for random
  sequences of changes (broker epochs included);
- ``MetadataSnapshotter`` decides on bytes and time since the last snapshot.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.metadata.image import ImageReplay, MetadataImage, MetadataRecord
from odradek.metadata.snapshot import (
    MAX_BATCH_BYTES,
    SnapshotCorruptError,
    build_snapshot,
    read_snapshot,
)
from odradek.metadata.snapshotter import RETRY_BACKOFF_MS, MetadataSnapshotter, SnapshotPolicy
from odradek.records.batch import iter_batches
from tests.server.test_metadata_image import record_lists


def controller_shaped(records: list[MetadataRecord]) -> list[MetadataRecord]:
    """Drop Topic records the controller never writes: a name that exists, an id used
    before (topic ids are fresh uuid4s). Replay accepts them, leaving id→name entries
    no set of records in a snapshot could rebuild."""
    live: set[str] = set()
    used: set[str] = set()
    ids: dict[str, str] = {}
    kept = []
    for record in records:
        f = record.fields
        if record.kind == "Topic":
            if f["name"] in live or f["topic_id"] in used:
                continue
            live.add(f["name"])
            used.add(f["topic_id"])
            ids[f["topic_id"]] = f["name"]
        elif record.kind == "RemoveTopic" and f["topic_id"] in ids:
            live.discard(ids.pop(f["topic_id"]))
        kept.append(record)
    return kept


def image_of(records: list[MetadataRecord]) -> MetadataImage | None:
    records = controller_shaped(records)
    replay = ImageReplay()
    try:
        replay.apply(records, len(records) + 10)
    except ValueError:  # a Partition of an unknown topic: not an image
        return None
    return replay.image()


def rebuilt(image: MetadataImage) -> MetadataImage:
    replay = ImageReplay()
    replay.apply(image.to_records(), image.offset)
    return replay.image()


# -- image → records ----------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(records=record_lists())
def test_replaying_to_records_rebuilds_an_equal_image(records: list[MetadataRecord]) -> None:
    image = image_of(records)
    if image is None:
        return
    assert rebuilt(image) == image
    # and through the snapshot bytes
    contents = read_snapshot(build_snapshot(image.to_records(), 5, epoch=3))
    replay = ImageReplay()
    replay.apply(contents.records, image.offset)
    assert replay.image() == image


def test_to_records_keeps_broker_epochs_fencing_partition_epochs_and_all_configs() -> None:
    topic_id = uuid.UUID(int=5)
    records = [
        MetadataRecord("RegisterBroker", {"broker_id": 1, "endpoints": [["P", "h", 1]]}),
        MetadataRecord(
            "RegisterBroker",
            {"broker_id": 2, "endpoints": [["P", "h", 2]], "rack": "r", "fenced": True},
        ),
        MetadataRecord("Topic", {"name": "t", "topic_id": str(topic_id)}),
        MetadataRecord(
            "Partition",
            {
                "topic_id": str(topic_id),
                "partition": 0,
                "replicas": [1, 2],
                "isr": [1],
                "leader": 1,
                "leader_epoch": 4,
                "partition_epoch": 7,
            },
        ),
        MetadataRecord(
            "Config",
            {"resource_type": "topic", "resource_name": "t", "name": "a", "value": "1"},
        ),
        MetadataRecord(
            "Config",
            {"resource_type": "broker", "resource_name": "", "name": "b", "value": "2"},
        ),
        MetadataRecord(
            "Config",
            {"resource_type": "group", "resource_name": "g", "name": "c", "value": "3"},
        ),
        MetadataRecord("ProducerIds", {"broker_id": 1, "next_producer_id": 3000}),
    ]
    image = MetadataImage().apply(records, 100)
    assert image.brokers[1].epoch == 93 and image.brokers[2].fenced
    again = rebuilt(image)
    assert again == image
    assert again.brokers[1].epoch == 93
    assert len(image.to_records()) == len(records)  # minimal: nothing superseded
    assert rebuilt(MetadataImage()) == MetadataImage() and MetadataImage().to_records() == []


# -- format -------------------------------------------------------------------------------


def many_records(count: int, value_bytes: int = 100) -> list[MetadataRecord]:
    return [
        MetadataRecord(
            "Config",
            {
                "resource_type": "topic",
                "resource_name": f"t{i}",
                "name": "x",
                "value": "v" * value_bytes,
            },
        )
        for i in range(count)
    ]


def test_format_is_header_then_bounded_data_batches_then_footer() -> None:
    records = many_records(30_000)
    data = build_snapshot(records, 1_700_000_000_123, epoch=7)
    headers = list(iter_batches(data))
    assert len(headers) >= 4
    assert headers[0].is_control and headers[-1].is_control
    assert not any(h.is_control for h in headers[1:-1])
    assert all(h.size <= MAX_BATCH_BYTES for h in headers)
    assert all(h.partition_leader_epoch == 7 for h in headers)
    assert headers[0].base_offset == 0 and headers[1].base_offset == 1
    assert headers[-1].base_offset == len(records) + 1
    for before, after in itertools.pairwise(headers):
        assert after.base_offset == before.last_offset + 1
    contents = read_snapshot(data)
    assert contents.records == records
    assert contents.last_contained_timestamp == 1_700_000_000_123 and contents.epoch == 7


def test_an_empty_image_is_a_header_and_a_footer() -> None:
    data = build_snapshot([], 0)
    assert len(list(iter_batches(data))) == 2
    assert read_snapshot(data).records == []


SMALL = build_snapshot(many_records(40, 5), 99, epoch=2)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(position=st.integers(0, len(SMALL) - 1), mask=st.integers(1, 255))
def test_any_flipped_byte_is_refused_with_one_line(position: int, mask: int) -> None:
    damaged = bytearray(SMALL)
    damaged[position] ^= mask
    with pytest.raises(SnapshotCorruptError) as raised:
        read_snapshot(bytes(damaged), "/x/00000000000000000041-0000000002.checkpoint")
    text = str(raised.value)
    assert text.startswith("/x/00000000000000000041-0000000002.checkpoint: ") and "\n" not in text


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(1, len(SMALL) - 1))
def test_a_cut_snapshot_is_refused(cut: int) -> None:
    with pytest.raises(SnapshotCorruptError):
        read_snapshot(SMALL[:cut], "s")
    with pytest.raises(SnapshotCorruptError):
        read_snapshot(SMALL + SMALL[:cut], "s")  # trailing bytes


def test_header_and_footer_must_be_where_they_belong() -> None:
    headers = list(iter_batches(SMALL))
    footer = SMALL[headers[-1].position :]
    header = SMALL[: headers[1].position]
    data_batches = SMALL[headers[1].position : headers[-1].position]
    for bad in (data_batches + footer, header + data_batches, footer + header):
        with pytest.raises(SnapshotCorruptError):
            read_snapshot(bad, "s")


# -- snapshotter decisions ----------------------------------------------------------------


def test_due_after_the_byte_bound() -> None:
    snapshotter = MetadataSnapshotter(SnapshotPolicy(1000, 3_600_000), now_ms=0)
    assert not snapshotter.due(10)
    snapshotter.record_commit(999)
    assert not snapshotter.due(10)
    snapshotter.record_commit(1)
    assert snapshotter.due(10)
    snapshotter.started()
    assert not snapshotter.due(10)  # one at a time
    snapshotter.record_commit(5000)  # committed while writing: counts for the next one
    snapshotter.finished(20, ok=True)
    assert snapshotter.due(21)


def test_due_after_the_time_bound_only_with_a_change() -> None:
    snapshotter = MetadataSnapshotter(SnapshotPolicy(10**9, 60_000), now_ms=1000)
    assert not snapshotter.due(10**9)  # nothing committed: nothing to snapshot
    snapshotter.record_commit(10)
    assert not snapshotter.due(60_999)
    assert snapshotter.due(61_000)
    snapshotter.started()
    snapshotter.finished(61_500, ok=True)
    snapshotter.record_commit(10)
    assert not snapshotter.due(121_499) and snapshotter.due(121_500)


def test_time_bound_zero_means_never_by_time() -> None:
    snapshotter = MetadataSnapshotter(SnapshotPolicy(10**9, 0), now_ms=0)
    snapshotter.record_commit(10)
    assert not snapshotter.due(10**12)


def test_a_failed_snapshot_keeps_its_bytes_and_backs_off() -> None:
    snapshotter = MetadataSnapshotter(SnapshotPolicy(100, 0), now_ms=0)
    snapshotter.record_commit(150)
    snapshotter.started()
    assert snapshotter.bytes_since == 0
    snapshotter.finished(1000, ok=False)
    assert snapshotter.bytes_since == 150
    assert not snapshotter.due(1000 + RETRY_BACKOFF_MS - 1)
    assert snapshotter.due(1000 + RETRY_BACKOFF_MS)


def test_images_compare_by_value() -> None:  # what the property tests rely on
    image = MetadataImage().apply(many_records(3), 2)
    assert rebuilt(image) == image
    assert dataclasses.replace(rebuilt(image), offset=1) != image
