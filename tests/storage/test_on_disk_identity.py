"""Stray logs, a log start offset beyond the log end, meta.properties, partition.metadata.

Storage-level: a log set aside as stray keeps every file and is not loaded again; a
checkpointed log start offset beyond the log end is clamped to it (new records are
readable); damaged or missing identity files raise errors that name the file and say
what to do, and nothing is written before the identity is known.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from odradek.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from odradek.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager, LogManagerSettings
from odradek.storage.meta_properties import (
    MetaPropertiesError,
    describe_dirs,
    ensure_meta_properties,
    format_dirs,
    parse_uuid,
    random_uuid,
    read_meta_properties,
    require_formatted,
    write_meta_properties,
)
from odradek.storage.partition_metadata import (
    PartitionMetadataError,
    check_topic_id,
    parse_topic_id,
    read_partition_metadata,
    write_partition_metadata,
)

from .conftest import FakeClock, make_batch


def manager(dirs: list[Path], clock: FakeClock) -> LogManager:
    settings = LogManagerSettings(tick_ms=1)
    return LogManager(dirs, LogConfig(), settings=settings, clock=clock)


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


# -- stray logs ---------------------------------------------------------------------


def test_stray_log_is_renamed_aside_kept_and_not_loaded_again(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    lm = manager([tmp_path], clock)
    lm.startup()
    for name in ("kept", "stray"):
        log = lm.get_or_create_log(name, 0, topic_id=str(uuid.uuid4()))
        for _ in range(10):
            log.append_as_leader(make_batch(timestamp=clock()), leader_epoch=0)
    lm.shutdown()
    before = files(tmp_path / "stray-0")

    lm = manager([tmp_path], clock)
    lm.startup()
    target = lm.set_aside_stray_log("stray", 0)
    assert target is not None and target.parent == tmp_path
    assert target.name.startswith("stray-0.") and target.name.endswith("-stray")
    assert not (tmp_path / "stray-0").exists()
    assert files(target) == before
    assert set(lm.logs) == {("kept", 0)}
    assert read_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {
        ("kept", 0): 20
    }
    lm.shutdown()

    again = manager([tmp_path], clock)
    with caplog.at_level(logging.WARNING):
        again.startup()
    assert set(again.logs) == {("kept", 0)}
    assert f"not loading {target}: a stray log" in caplog.text
    again.shutdown()
    assert files(target) == before  # housekeeping and restarts never touch it


def test_a_topic_named_like_a_stray_dir_is_still_a_log(tmp_path: Path, clock: FakeClock) -> None:
    name = f"t-0.{uuid.uuid4().hex}-stray"  # a legal topic name; its directory ends in -3
    lm = manager([tmp_path], clock)
    lm.startup()
    lm.get_or_create_log(name, 3).append_as_leader(make_batch(timestamp=clock()), 0)
    lm.shutdown()
    again = manager([tmp_path], clock)
    again.startup()
    assert set(again.logs) == {(name, 3)}
    again.shutdown()


# -- log start offset beyond the log end ----------------------------------------------


def test_log_start_offset_beyond_the_log_end_is_clamped(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    log, _ = open_log(tmp_path / "t-0", LogConfig(), clock=clock)
    for _ in range(5):
        log.append_as_leader(make_batch(count=10, timestamp=clock()), leader_epoch=0)
    log.close()
    with caplog.at_level(logging.WARNING):
        log, _ = open_log(tmp_path / "t-0", LogConfig(), log_start_offset=99_999_999, clock=clock)
    assert "t-0: log-start-offset-checkpoint says 99999999, beyond the log end offset 50" in (
        caplog.text
    )
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    info = log.append_as_leader(make_batch(count=1, timestamp=clock()), leader_epoch=0)
    assert info.first_offset == 50
    log.high_watermark = log.log_end_offset
    read = log.read(50, 1 << 20)
    assert read.log_start_offset == 50 and read.high_watermark == 51 and read.size > 0
    log.close()


def test_log_start_offset_within_the_log_is_believed(tmp_path: Path, clock: FakeClock) -> None:
    log, _ = open_log(tmp_path / "t-0", LogConfig(), clock=clock)
    log.append_as_leader(make_batch(count=10, timestamp=clock()), leader_epoch=0)
    log.close()
    log, _ = open_log(tmp_path / "t-0", LogConfig(), log_start_offset=7, clock=clock)
    assert (log.log_start_offset, log.log_end_offset) == (7, 10)
    log.close()


def test_log_manager_rewrites_a_checkpoint_beyond_the_log_end(
    tmp_path: Path, clock: FakeClock
) -> None:
    lm = manager([tmp_path], clock)
    lm.startup()
    lm.get_or_create_log("t", 0).append_as_leader(make_batch(count=4, timestamp=clock()), 0)
    lm.shutdown()
    write_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT, {("t", 0): 1_000})
    lm = manager([tmp_path], clock)
    lm.startup()
    assert lm.logs[("t", 0)].log_start_offset == 4
    assert read_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("t", 0): 4}
    lm.shutdown()


# -- a refused start writes nothing -------------------------------------------------


def test_shutdown_before_loading_writes_no_checkpoint_or_marker(
    tmp_path: Path, clock: FakeClock
) -> None:
    lm = manager([tmp_path], clock)
    lm.startup()
    lm.get_or_create_log("t", 0).append_as_leader(make_batch(timestamp=clock()), 0)
    lm.shutdown()
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()  # as after a crash
    before = files(tmp_path)
    refused = manager([tmp_path], clock)
    refused.lock_dirs()
    refused.shutdown()  # what `odradek serve` does when an identity check fails
    after = files(tmp_path)
    assert after == before  # no empty checkpoints, no clean-shutdown marker


# -- meta.properties ------------------------------------------------------------------


def new_ids() -> str:
    return uuid.uuid4().hex


def test_meta_properties_formats_an_empty_dir_and_then_keeps_its_identity(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cluster = ensure_meta_properties([tmp_path / "a", tmp_path / "b"], 3, new_ids)
    for name in ("a", "b"):
        properties = read_meta_properties(tmp_path / name)
        assert (properties["cluster.id"], properties["node.id"]) == (cluster, "3")
    assert ensure_meta_properties([tmp_path / "a", tmp_path / "b"], 3, new_ids) == cluster


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (bytes(range(256)), "not text: undecodable byte at position 128"),
        (b"version=1\njust some words\n", "line 2 is not key=value"),
        (b"version=1\nnode.id=1\n", "no cluster.id"),
        (b"version=1\ncluster.id=x\nnode.id=one\n", "node.id='one' is not a number"),
        (b"x" * 100_000, "larger than"),
    ],
)
def test_damaged_meta_properties_is_refused_naming_the_file(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "meta.properties").write_bytes(content)
    with pytest.raises(MetaPropertiesError) as raised:
        ensure_meta_properties([tmp_path], 1, new_ids)
    message = str(raised.value)
    assert f"{tmp_path / 'meta.properties'} is damaged" in message and problem in message
    assert "restore it from a backup" in message and "\n" not in message
    assert (tmp_path / "meta.properties").read_bytes() == content


@pytest.mark.parametrize("leftover", ["orders-0", "__cluster_metadata-0", "x-1.abc-stray"])
def test_missing_meta_properties_beside_data_is_refused(tmp_path: Path, leftover: str) -> None:
    (tmp_path / leftover).mkdir()
    with pytest.raises(MetaPropertiesError, match=f"holds data .*{leftover}.* no meta.properties"):
        ensure_meta_properties([tmp_path], 1, new_ids, reserved=("__cluster_metadata-0",))
    assert not (tmp_path / "meta.properties").exists()


def test_missing_meta_properties_beside_checkpoints_is_refused(tmp_path: Path) -> None:
    write_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint", {})
    with pytest.raises(MetaPropertiesError, match="recovery-point-offset-checkpoint"):
        ensure_meta_properties([tmp_path], 1, new_ids)


def test_other_node_or_other_cluster_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_meta_properties(tmp_path / "a", {"cluster.id": "c1", "node.id": "1", "version": "1"})
    write_meta_properties(tmp_path / "b", {"cluster.id": "c2", "node.id": "1", "version": "1"})
    with pytest.raises(MetaPropertiesError, match=r"says node\.id=1 but this broker is node\.id=2"):
        ensure_meta_properties([tmp_path / "a"], 2, new_ids)
    with pytest.raises(MetaPropertiesError, match="different clusters"):
        ensure_meta_properties([tmp_path / "a", tmp_path / "b"], 1, new_ids)


def test_duplicate_directory_ids_are_refused(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_meta_properties(
            tmp_path / name,
            {"cluster.id": "c1", "node.id": "1", "version": "1", "directory.id": "same"},
        )
    with pytest.raises(MetaPropertiesError, match=r"same directory\.id=same"):
        ensure_meta_properties([tmp_path / "a", tmp_path / "b"], 1, new_ids)


def test_random_uuid_is_kafkas_format() -> None:
    ids = {random_uuid() for _ in range(200)}
    assert len(ids) == 200
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        assert len(parse_uuid(text)) == 16


@pytest.mark.parametrize(
    "text", ["", "abc", "x" * 23, "MkU3OEVBNTcwNTJENDM2Qk", "MkU3OEVBNTcwNTJENDM2Q!", "é" * 22]
)
def test_parse_uuid_refuses_what_is_not_16_bytes_of_base64(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kafka uuid") as raised:
        parse_uuid(text)
    assert "\n" not in str(raised.value)


def test_format_writes_every_dir_and_checks_all_before_writing(tmp_path: Path) -> None:
    cluster = random_uuid()
    dirs = [tmp_path / "a", tmp_path / "b" / "nested"]
    results = format_dirs(dirs, cluster, 5)
    assert [(r.log_dir, r.formatted) for r in results] == [(d, True) for d in dirs]
    found = [read_meta_properties(d) for d in dirs]
    assert all((p["cluster.id"], p["node.id"], p["version"]) == (cluster, "5", "1") for p in found)
    assert found[0]["directory.id"] != found[1]["directory.id"]
    assert len(parse_uuid(found[0]["directory.id"])) == 16
    # Formatted already: refused (nothing written) unless ignore_formatted.
    third = tmp_path / "c"
    with pytest.raises(MetaPropertiesError, match=r"is already formatted\. Use --ignore-formatted"):
        format_dirs([third, *dirs], cluster, 5)
    assert not third.exists()
    results = format_dirs([third, *dirs], cluster, 5, ignore_formatted=True)
    assert [r.formatted for r in results] == [True, False, False]
    assert read_meta_properties(dirs[0]) == found[0]  # left as it was
    # Another cluster or node: refused even with ignore_formatted.
    with pytest.raises(MetaPropertiesError, match="another cluster's data"):
        format_dirs(dirs, random_uuid(), 5, ignore_formatted=True)
    with pytest.raises(MetaPropertiesError, match=r"says node\.id=5"):
        format_dirs(dirs, cluster, 6, ignore_formatted=True)
    with pytest.raises(ValueError, match="is not a Kafka uuid"):
        format_dirs([tmp_path / "d"], "nope", 5)
    assert not (tmp_path / "d").exists()


def test_format_refuses_a_dir_with_data_but_no_meta_properties(tmp_path: Path) -> None:
    (tmp_path / "t-0").mkdir()
    with pytest.raises(MetaPropertiesError, match="holds data"):
        format_dirs([tmp_path], random_uuid(), 1)
    assert not (tmp_path / "meta.properties").exists()


def test_require_formatted_and_ensure_without_formatting(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    with pytest.raises(MetaPropertiesError, match="odradek storage format -t"):
        require_formatted([empty])
    assert not empty.exists()
    empty.mkdir()
    with pytest.raises(MetaPropertiesError, match="odradek storage format -t"):
        ensure_meta_properties([empty], 1, new_ids, format_empty=False)
    assert list(empty.iterdir()) == []
    cluster = random_uuid()
    format_dirs([empty], cluster, 1)
    require_formatted([empty])
    assert ensure_meta_properties([empty], 1, new_ids, format_empty=False) == cluster


def test_describe_dirs_reports_each_dir_and_the_problems(tmp_path: Path) -> None:
    cluster = random_uuid()
    format_dirs([tmp_path / "a"], cluster, 1)
    (tmp_path / "b").mkdir()
    report = describe_dirs([tmp_path / "a", tmp_path / "b", tmp_path / "c"], 1)
    assert list(report.found) == [tmp_path / "a"]
    assert report.found[tmp_path / "a"]["cluster.id"] == cluster
    assert report.problems == (
        f"{tmp_path / 'b'} is not formatted.",
        f"{tmp_path / 'c'} does not exist.",
    )
    assert "says node.id=1" in describe_dirs([tmp_path / "a"], 2).problems[0]


# -- partition.metadata ---------------------------------------------------------------


def test_topic_ids_in_uuid_and_base64_form_are_the_same_id(tmp_path: Path) -> None:
    topic_id = uuid.uuid4()
    base64_form = "AAAAAAAAAAAAAAAAAAAAAA"
    assert parse_topic_id(str(topic_id)) == topic_id
    assert parse_topic_id(base64_form) == uuid.UUID(int=0)
    assert parse_topic_id("not-an-id") is None
    write_partition_metadata(tmp_path, base64_form)
    check_topic_id(tmp_path, "t", str(uuid.UUID(int=0)))  # accepted
    assert read_partition_metadata(tmp_path) == base64_form


def test_partition_metadata_naming_another_topic_is_refused(tmp_path: Path) -> None:
    write_partition_metadata(tmp_path, str(uuid.UUID(int=1)))
    with pytest.raises(PartitionMetadataError) as raised:
        check_topic_id(tmp_path, "orders", str(uuid.UUID(int=2)))
    message = str(raised.value)
    assert f"{tmp_path} holds topic id {uuid.UUID(int=1)}" in message
    assert f"topic 'orders' has id {uuid.UUID(int=2)}" in message and "-stray" in message


@pytest.mark.parametrize(
    "content", [b"\xff\xfe\x00garbage", b"version: 0\n", b"version: 0\ntopic_id: nonsense\n"]
)
def test_damaged_partition_metadata_is_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "partition.metadata").write_bytes(content)
    with pytest.raises(PartitionMetadataError, match=r"partition\.metadata is damaged"):
        check_topic_id(tmp_path, "t", str(uuid.uuid4()))


def test_missing_partition_metadata_is_accepted_and_written(
    tmp_path: Path, clock: FakeClock
) -> None:
    lm = manager([tmp_path], clock)
    lm.startup()
    lm.get_or_create_log("t", 0)
    lm.shutdown()
    assert read_partition_metadata(tmp_path / "t-0") is None
    lm = manager([tmp_path], clock)
    lm.startup()
    topic_id = str(uuid.uuid4())
    lm.get_or_create_log("t", 0, topic_id=topic_id)
    assert read_partition_metadata(tmp_path / "t-0") == topic_id
    lm.shutdown()
