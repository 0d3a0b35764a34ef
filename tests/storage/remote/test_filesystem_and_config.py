"""Filesystem backend specifics (layout, atomic copies) and the configuration factory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from odradek.storage.remote.filesystem import FileSystemRemoteStorageManager
from odradek.storage.remote.s3 import S3RemoteStorageManager
from odradek.storage.remote.storage_manager import (
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    remote_storage_manager_from_config,
)
from tests.storage.remote.segments import write_segment


def test_layout_and_no_leftovers(tmp_path: Path) -> None:
    local = write_segment(tmp_path / "local", target_bytes=64 * 1024)
    rsm = FileSystemRemoteStorageManager(tmp_path / "remote")
    metadata = local.metadata()
    rsm.copy_log_segment_data(metadata, local.data)
    sid = metadata.remote_log_segment_id
    partition_dir = tmp_path / "remote" / f"tiered.orders-2-{sid.topic_id}"
    stem = f"{local.base_offset:020d}-{sid.id}"
    suffixes = [".index", ".leader-epoch-checkpoint", ".log", ".snapshot", ".timeindex"]
    expected = sorted(stem + s for s in [*suffixes, ".txnindex"])
    assert sorted(os.listdir(partition_dir)) == expected
    rsm.delete_log_segment_data(metadata)
    assert os.listdir(partition_dir) == []


def test_a_half_copied_segment_is_invisible(tmp_path: Path) -> None:
    """Files staged without their .log (a crash mid-copy) are not a segment, and the
    delete of the segment removes them."""
    local = write_segment(tmp_path / "local", target_bytes=64 * 1024)
    rsm = FileSystemRemoteStorageManager(tmp_path / "remote")
    metadata = local.metadata()
    rsm.copy_log_segment_data(metadata, local.data)
    rsm.path(metadata, ".log").rename(rsm.path(metadata, ".log.tmp"))  # as if cut short
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(metadata, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(metadata, IndexType.OFFSET)
    rsm.delete_log_segment_data(metadata)
    assert os.listdir(rsm.path(metadata, ".log").parent) == []


def test_failed_copy_removes_what_it_wrote(tmp_path: Path) -> None:
    local = write_segment(tmp_path / "local", target_bytes=64 * 1024)
    rsm = FileSystemRemoteStorageManager(tmp_path / "remote")
    metadata = local.metadata()
    with pytest.raises(RemoteStorageError, match=r"gone\.log"):
        rsm.copy_log_segment_data(metadata, replace(local.data, log_segment=tmp_path / "gone.log"))
    assert os.listdir(rsm.path(metadata, ".log").parent) == []


# -- configuration ---------------------------------------------------------------------
class CustomManager:
    def __init__(self, config: Mapping[str, str]) -> None:
        self.config = dict(config)

    @classmethod
    def from_config(cls, config: Mapping[str, str], prefix: str) -> CustomManager:
        return cls(config)

    def copy_log_segment_data(self, metadata, segment_data):
        return None

    def fetch_log_segment(self, metadata, start_position, end_position=None):
        return b""

    def fetch_index(self, metadata, index_type):
        return b""

    def delete_log_segment_data(self, metadata):
        pass

    def close(self):
        pass


def test_factory_backends(tmp_path: Path) -> None:
    fs = remote_storage_manager_from_config({"rsm.config.dir": str(tmp_path / "r")})
    assert isinstance(fs, FileSystemRemoteStorageManager) and fs.fsync
    s3 = remote_storage_manager_from_config(
        {
            "remote.log.storage.manager.class.name": "s3",
            "remote.log.storage.manager.impl.prefix": "tier.",
            "tier.s3.bucket": "b",
            "tier.s3.endpoint.url": "http://127.0.0.1:1",
            "tier.s3.allow.http": "TRUE",
            "rsm.config.ignored": "not under the prefix",
        }
    )
    assert isinstance(s3, S3RemoteStorageManager) and s3.bucket == "b"
    custom = remote_storage_manager_from_config(
        {
            "remote.log.storage.manager.class.name": f"{__name__}:CustomManager",
            "rsm.config.anything": "x",
        }
    )
    assert isinstance(custom, CustomManager) and custom.config == {"anything": "x"}


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({}, "rsm.config.dir"),
        ({"rsm.config.dir": "/tmp/x", "rsm.config.fsync": "maybe"}, "rsm.config.fsync"),
        ({"rsm.config.dir": "/tmp/x", "rsm.config.dri": "/y"}, "rsm.config.dri"),
        ({"remote.log.storage.manager.class.name": "s3"}, "rsm.config.s3.bucket"),
        (
            {
                "remote.log.storage.manager.class.name": "s3",
                "rsm.config.s3.bucket": "b",
                "rsm.config.s3.multipart.part.size.bytes": "1024",
            },
            "rsm.config.s3.multipart.part.size.bytes",
        ),
        (
            {
                "remote.log.storage.manager.class.name": "s3",
                "rsm.config.s3.bucket": "b",
                "rsm.config.s3.max.retries": "three",
            },
            "rsm.config.s3.max.retries",
        ),
        (
            {
                "remote.log.storage.manager.class.name": "s3",
                "rsm.config.s3.bucket": "b",
                "rsm.config.s3.endpoint.url": "ftp://x",
            },
            "rsm.config.s3.endpoint.url",
        ),
        (
            {"remote.log.storage.manager.class.name": "hdfs"},
            "remote.log.storage.manager.class.name",
        ),
        (
            {"remote.log.storage.manager.class.name": "no.such.module:Thing"},
            "remote.log.storage.manager.class.name",
        ),
        (
            {"remote.log.storage.manager.class.name": "os.path:join"},
            "remote.log.storage.manager.class.name",
        ),
        ({"remote.log.storage.manager.impl.prefix": ""}, "remote.log.storage.manager.impl.prefix"),
    ],
)
def test_bad_config_names_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError) as raised:
        remote_storage_manager_from_config(props)
    message = str(raised.value)
    assert message.startswith(key + ":") and "\n" not in message, message
