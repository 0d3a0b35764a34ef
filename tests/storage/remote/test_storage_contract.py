"""The RemoteStorageManager contract, for every backend (filesystem and S3 via moto).

A real segment written by LogSegment (a few MB, with indexes, with and without a
transaction index) is copied, read back whole and in byte ranges (Kafka's inclusive
end), index by index, then deleted; every read of what is not there raises
RemoteResourceNotFoundError.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from odradek.storage.remote.storage_manager import (
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    remote_storage_manager_from_config,
)
from tests.storage.remote.segments import LocalSegment, write_segment
from tests.support.s3server import S3Server


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, LocalSegment]:
    root = tmp_path_factory.mktemp("local")
    return {
        True: write_segment(root / "with-txn", txn=True),
        False: write_segment(root / "without-txn", base=5000, txn=False),
    }


@pytest.fixture(params=["filesystem", "s3"])
def rsm(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteStorageManager:
    if request.param == "filesystem":
        props = {"rsm.config.dir": str(tmp_path / "remote")}
    else:
        server: S3Server = request.getfixturevalue("s3_server")
        props = {"remote.log.storage.manager.class.name": "s3", **server.rsm_config()}
        props["rsm.config.s3.prefix"] = "cluster-a/tiered"
    manager = remote_storage_manager_from_config(props)
    yield manager
    manager.close()


def index_files(local: LocalSegment) -> dict[IndexType, bytes | None]:
    data = local.data
    return {
        IndexType.OFFSET: data.offset_index.read_bytes(),
        IndexType.TIMESTAMP: data.time_index.read_bytes(),
        IndexType.TRANSACTION: (
            data.transaction_index.read_bytes() if data.transaction_index else None
        ),
        IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index.read_bytes(),
        IndexType.LEADER_EPOCH: data.leader_epoch_index,
    }


@pytest.mark.parametrize("txn", [True, False], ids=["txnindex", "no-txnindex"])
def test_copy_fetch_delete(rsm: RemoteStorageManager, segments, txn: bool) -> None:
    local = segments[txn]
    log = local.data.log_segment.read_bytes()
    assert len(log) == local.size > 2 * 1024 * 1024
    metadata = local.metadata()
    assert rsm.copy_log_segment_data(metadata, local.data) is None

    assert rsm.fetch_log_segment(metadata, 0) == log
    assert rsm.fetch_log_segment(metadata, 0, len(log) - 1) == log
    rng = random.Random(405)
    ranges = [(0, 0), (0, 60), (4096, 8191), (len(log) - 1, len(log) - 1), (len(log) - 10, None)]
    ranges += [tuple(sorted(rng.sample(range(len(log)), 2))) for _ in range(8)]
    for start, end in ranges:
        expected = log[start:] if end is None else log[start : end + 1]
        assert rsm.fetch_log_segment(metadata, start, end) == expected, (start, end)
    assert rsm.fetch_log_segment(metadata, 100, 99) == b""  # empty range
    assert rsm.fetch_log_segment(metadata, len(log) - 5, len(log) + 100) == log[-5:]
    assert rsm.fetch_log_segment(metadata, len(log)) == b""
    assert rsm.fetch_log_segment(metadata, len(log) + 10, len(log) + 20) == b""

    for index_type, expected_index in index_files(local).items():
        if expected_index is None:
            with pytest.raises(RemoteResourceNotFoundError):
                rsm.fetch_index(metadata, index_type)
        else:
            assert rsm.fetch_index(metadata, index_type) == expected_index, index_type

    rsm.delete_log_segment_data(metadata)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(metadata, 0, 10)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(metadata, 5, 4)
    for index_type in IndexType:
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_index(metadata, index_type)
    rsm.delete_log_segment_data(metadata)  # idempotent


def test_copies_are_independent(rsm: RemoteStorageManager, segments) -> None:
    local = segments[True]
    first, retry = local.metadata(), local.metadata()  # a retried copy: same offsets, new uuid
    rsm.copy_log_segment_data(first, local.data)
    rsm.copy_log_segment_data(retry, local.data)
    rsm.delete_log_segment_data(first)
    assert rsm.fetch_log_segment(retry, 0, 99) == local.data.log_segment.read_bytes()[:100]
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(first, IndexType.OFFSET)


def test_unknown_segment_is_not_found(rsm: RemoteStorageManager, segments) -> None:
    metadata = segments[True].metadata()
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(metadata, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(metadata, IndexType.TIMESTAMP)
    rsm.delete_log_segment_data(metadata)


def test_failed_copy_leaves_nothing_visible(
    rsm: RemoteStorageManager, segments, tmp_path: Path
) -> None:
    local = segments[True]
    from dataclasses import replace

    broken = replace(local.data, log_segment=tmp_path / "gone.log")  # the .log goes last
    metadata = local.metadata()
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(metadata, broken)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(metadata, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(metadata, IndexType.OFFSET)


def test_bad_ranges_are_refused(rsm: RemoteStorageManager, segments) -> None:
    metadata = segments[True].metadata()
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(metadata, -1)
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(metadata, 10, 5)
