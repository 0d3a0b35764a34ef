"""RemoteLogMetadataCache: events applied in log order, lookups by epoch lineage."""

from __future__ import annotations

import uuid

import pytest

from odradek.storage.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from odradek.storage.remote.metadata_cache import RemoteLogMetadataCache
from odradek.storage.remote.metadata_records import deserialize, serialize
from odradek.storage.remote.storage_manager import RemoteResourceNotFoundError

S = RemoteLogSegmentState
TP = TopicIdPartition(uuid.UUID(int=42), "events", 0)


def segment(start: int, end: int, epochs: dict[int, int]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(TP),
        start,
        end,
        1000 + end,
        1,
        0,
        (end - start + 1) * 10,
        epochs,
    )


def update(meta: RemoteLogSegmentMetadata, state: S, ts: int = 1) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(meta.remote_log_segment_id, ts, None, state, 2)


def copied(cache: RemoteLogMetadataCache, meta: RemoteLogSegmentMetadata) -> None:
    # through the serde, as a broker consuming the topic would see them
    for message in (meta, update(meta, S.COPY_SEGMENT_FINISHED)):
        cache.apply(deserialize(serialize(message)))


@pytest.fixture
def cache() -> RemoteLogMetadataCache:
    return RemoteLogMetadataCache(TP)


def test_only_finished_segments_are_served(cache: RemoteLogMetadataCache) -> None:
    first = segment(0, 99, {0: 0})
    cache.apply(first)
    assert cache.segment_for(0, 50) is None
    assert cache.earliest_offset() is None
    assert cache.highest_offset_for_epoch(0) is None
    assert cache.list_segments() == [first]  # listed: a failed copy must be found to delete
    cache.apply(update(first, S.COPY_SEGMENT_FINISHED))
    found = cache.segment_for(0, 50)
    assert found is not None and found.state == S.COPY_SEGMENT_FINISHED
    assert found.broker_id == 2 and found.event_timestamp_ms == 1
    assert cache.earliest_offset() == 0
    assert cache.highest_offset_for_epoch(0) == 99


def test_lookup_follows_the_epoch_lineage(cache: RemoteLogMetadataCache) -> None:
    a = segment(0, 99, {0: 0})
    b = segment(100, 199, {0: 100, 1: 150})  # spans epochs 0 and 1
    c = segment(200, 299, {1: 200, 3: 260})
    for meta in (c, a, b):  # arrival order does not matter for lookups
        copied(cache, meta)
    ids = {m.remote_log_segment_id.id: name for m, name in ((a, "a"), (b, "b"), (c, "c"))}

    def at(epoch: int, offset: int) -> str | None:
        found = cache.segment_for(epoch, offset)
        return None if found is None else ids[found.remote_log_segment_id.id]

    assert [at(0, o) for o in (0, 99, 100, 149, 150)] == ["a", "a", "b", "b", None]
    assert [at(1, o) for o in (149, 150, 199, 200, 259, 260)] == [None, "b", "b", "c", "c", None]
    assert [at(3, o) for o in (260, 299, 300)] == ["c", "c", None]
    assert at(2, 230) is None
    assert cache.highest_offset_for_epoch(0) == 149
    assert cache.highest_offset_for_epoch(1) == 259
    assert cache.highest_offset_for_epoch(3) == 299
    assert cache.earliest_offset() == 0
    assert [ids[m.remote_log_segment_id.id] for m in cache.list_segments()] == ["a", "b", "c"]
    assert [ids[m.remote_log_segment_id.id] for m in cache.list_segments(1)] == ["b", "c"]
    assert cache.list_segments(2) == []


def test_divergent_lineages_do_not_mix(cache: RemoteLogMetadataCache) -> None:
    # after an unclean election, offsets 100..199 exist under epoch 1 and under epoch 2
    old = segment(100, 199, {1: 100})
    new = segment(100, 179, {2: 100})
    copied(cache, old)
    copied(cache, new)
    assert cache.segment_for(1, 190) == cache.list_segments(1)[0]
    found = cache.segment_for(2, 150)
    assert found is not None and found.remote_log_segment_id == new.remote_log_segment_id
    assert cache.segment_for(2, 190) is None


def test_deleting_segments_stop_being_served(cache: RemoteLogMetadataCache) -> None:
    a, b = segment(0, 99, {0: 0}), segment(100, 199, {0: 100})
    copied(cache, a)
    copied(cache, b)
    cache.apply(update(a, S.DELETE_SEGMENT_STARTED))
    assert cache.segment_for(0, 10) is None
    assert cache.earliest_offset() == 100
    states = [m.state for m in cache.list_segments()]
    assert states == [S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED]
    assert cache.list_segments(states={S.COPY_SEGMENT_FINISHED}) == [cache.segment_for(0, 150)]
    cache.apply(update(a, S.DELETE_SEGMENT_STARTED))  # a retried delete repeats the state
    cache.apply(update(a, S.DELETE_SEGMENT_FINISHED))
    assert len(cache.list_segments()) == 1
    assert cache.highest_offset_for_epoch(0) == 199  # deletes never lower it
    cache.apply(update(b, S.DELETE_SEGMENT_STARTED))
    cache.apply(update(b, S.DELETE_SEGMENT_FINISHED))
    assert cache.earliest_offset() is None
    assert cache.highest_offset_for_epoch(0) == 199
    with pytest.raises(RemoteResourceNotFoundError):
        cache.apply(update(b, S.DELETE_SEGMENT_FINISHED))


def test_a_failed_copy_is_deleted_without_ever_being_served(cache: RemoteLogMetadataCache) -> None:
    a = segment(0, 99, {0: 0})
    cache.apply(a)
    cache.apply(update(a, S.DELETE_SEGMENT_STARTED))
    cache.apply(update(a, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_segments() == [] and cache.highest_offset_for_epoch(0) is None


def test_illegal_events_are_refused(cache: RemoteLogMetadataCache) -> None:
    a = segment(0, 99, {0: 0})
    cache.apply(a)
    with pytest.raises(ValueError, match="added twice"):
        cache.apply(a)
    with pytest.raises(IllegalStateTransitionError):
        cache.apply(update(a, S.DELETE_SEGMENT_FINISHED))
    copied_later = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(TP), 0, 9, 0, 1, 0, 1, {0: 0}, S.COPY_SEGMENT_FINISHED
    )
    with pytest.raises(IllegalStateTransitionError):
        cache.apply(copied_later)  # a segment must start in COPY_SEGMENT_STARTED
    other = TopicIdPartition(uuid.UUID(int=43), "events", 0)
    with pytest.raises(ValueError, match="applied to the cache"):
        cache.apply(
            RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(other), 0, 9, 0, 1, 0, 1, {0: 0})
        )


def test_partition_delete_empties_the_cache(cache: RemoteLogMetadataCache) -> None:
    copied(cache, segment(0, 99, {0: 0}))
    P = RemotePartitionDeleteState
    with pytest.raises(IllegalStateTransitionError):
        cache.apply(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_STARTED, 1, 1))
    for state in P:
        cache.apply(RemotePartitionDeleteMetadata(TP, state, 1, 1))
    assert cache.partition_delete_state == P.DELETE_PARTITION_FINISHED
    assert cache.list_segments() == [] and cache.segment_for(0, 5) is None
