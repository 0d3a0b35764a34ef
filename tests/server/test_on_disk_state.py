"""Damaged or mismatched on-disk state never deletes data and never gets a traceback.

Real ``odradek serve`` processes at default settings (1 GiB segments):
(a) a partition directory the metadata does not know is renamed
    ``<topic>-<partition>.<id>-stray`` with a WARN and kept byte for byte, and is not
    loaded again on the next start;
(b) a ``log-start-offset-checkpoint`` entry beyond the log end is clamped to the log
    end with a WARN: a new record gets an offset a fetch can read;
(c) garbage ``meta.properties``, a missing one beside data, and a ``partition.metadata``
    naming another topic id each stop the broker with one line on stderr that says what
    to do, a non-zero exit, no traceback, and every file left as it was.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.storage.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from tests.server.test_protocol import (
    assert_clean_log,
    batch,
    fetch,
    list_offset,
    make_topic,
    metadata,
    produce,
    read_all,
    records_of,
)
from tests.support.broker import BrokerProcess, running_broker
from tests.support.wire import WireClient

EARLIEST, LATEST = -2, -1
SERVE = (sys.executable, "-m", "odradek", "serve")


def snapshot(data_dir: Path) -> dict[str, str]:
    """Every file under ``data_dir`` (but the lock) with a digest of its bytes."""
    return {
        str(path.relative_to(data_dir)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(data_dir.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


def fill(client: WireClient, topic: str, batches: int, per_batch: int, size: int) -> None:
    for i in range(batches):
        values = [f"{i}-{j}".encode().ljust(size, b".") for j in range(per_batch)]
        response = produce(client, topic, 0, batch(values))
        assert response.error_code == ErrorCode.none, response


def serve_refused(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``odradek serve`` expecting it to refuse to start."""
    completed = subprocess.run(
        [*SERVE, "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode != 0, completed
    assert "odradek ready" not in completed.stdout
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed


def refusal_line(stderr: str) -> str:
    (line,) = [line for line in stderr.splitlines() if line.startswith("odradek serve:")]
    return line


@pytest.fixture
def stopped_topic(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    """A data dir with a topic of ~5 MB written by a broker that then stopped cleanly."""
    data_dir = tmp_path / "data"
    with running_broker(data_dir) as broker, WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "keep")
        fill(client, topic, batches=50, per_batch=100, size=1000)
    assert broker.process is not None and broker.process.returncode == 0
    return data_dir, topic, snapshot(data_dir / f"{topic}-0")


def test_log_unknown_to_the_metadata_is_set_aside_not_deleted(
    tmp_path: Path, stopped_topic: tuple[Path, str, dict[str, str]]
) -> None:
    data_dir, topic, before = stopped_topic
    assert sum(1 for name in before if name.endswith(".log")) == 1
    # A metadata log that never heard of the topic: a fresh broker's.
    other = tmp_path / "other"
    with running_broker(other):
        pass
    shutil.rmtree(data_dir / "__cluster_metadata-0")
    shutil.copytree(other / "__cluster_metadata-0", data_dir / "__cluster_metadata-0")
    # ... with its own recovery point (a metadata log shorter than its checkpointed
    # recovery point is damage, which stops the broker: test_metadata_log.py).
    metadata_tp = ("__cluster_metadata", 0)
    checkpoint = data_dir / "recovery-point-offset-checkpoint"
    entries = read_offset_checkpoint(checkpoint)
    entries[metadata_tp] = read_offset_checkpoint(other / checkpoint.name)[metadata_tp]
    write_offset_checkpoint(checkpoint, entries)

    with running_broker(data_dir) as broker, WireClient(broker.bootstrap) as client:
        (described,) = metadata(client, [topic], allow_auto_topic_creation=False).topics
        assert described.error_code == ErrorCode.unknown_topic_or_partition
    (stray,) = [p for p in data_dir.iterdir() if p.name.startswith(f"{topic}-0.")]
    assert stray.name.endswith("-stray") and len(stray.name) == len(f"{topic}-0.") + 32 + 6
    assert not (data_dir / f"{topic}-0").exists()
    assert snapshot(stray) == before  # every byte kept
    log = broker.log()
    assert f"WARNING odradek.replica.replica_manager: log {topic}-0" in log
    assert str(stray) in log and "not deleted" in log
    assert "deleting" not in log
    assert_clean_log(broker)

    # Next start: the stray directory is left alone (not loaded, not deleted).
    with running_broker(data_dir) as again:
        pass
    assert snapshot(stray) == before
    assert f"not loading {stray}: a stray log" in again.log()
    assert_clean_log(again)


def test_log_start_checkpoint_beyond_the_log_end_is_clamped(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir).start()
    try:
        with WireClient(broker.bootstrap) as client:
            topic = make_topic(client, "clamp")
            fill(client, topic, batches=50, per_batch=1000, size=20)  # 50,000 records
        assert broker.stop() == 0
        checkpoint = data_dir / "log-start-offset-checkpoint"
        entries = read_offset_checkpoint(checkpoint)
        entries[(topic, 0)] = 99_999_999
        write_offset_checkpoint(checkpoint, entries)

        broker.start()
        warning = f"{topic}-0: log-start-offset-checkpoint says 99999999, beyond the log end"
        assert warning in broker.log()
        with WireClient(broker.bootstrap) as client:
            assert list_offset(client, topic, 0, EARLIEST).offset == 50_000
            assert list_offset(client, topic, 0, LATEST).offset == 50_000
            response = produce(client, topic, 0, batch([b"after"]))
            assert (response.error_code, response.base_offset) == (ErrorCode.none, 50_000)
            data = fetch(client, topic, 0, 50_000)
            assert data.error_code == ErrorCode.none
            assert (data.log_start_offset, data.high_watermark) == (50_000, 50_001)
            assert [r.value for r in records_of(data.records)] == [b"after"]
            assert [r.value for r in read_all(client, topic, 0, 50_000)] == [b"after"]
        assert broker.stop() == 0
        # The clamped value is what the checkpoint holds now.
        assert read_offset_checkpoint(checkpoint)[(topic, 0)] == 50_000
        assert_clean_log(broker)
    finally:
        broker.kill()


def test_garbage_meta_properties_is_refused_in_one_line(
    stopped_topic: tuple[Path, str, dict[str, str]],
) -> None:
    data_dir, _topic, _ = stopped_topic
    (data_dir / "meta.properties").write_bytes(bytes(range(256)) * 3)
    before = snapshot(data_dir)
    completed = serve_refused(data_dir)
    line = refusal_line(completed.stderr)
    assert "meta.properties is damaged" in line and "restore it from a backup" in line
    assert snapshot(data_dir) == before


def test_missing_meta_properties_beside_data_is_refused(
    stopped_topic: tuple[Path, str, dict[str, str]],
) -> None:
    data_dir, topic, _ = stopped_topic
    (data_dir / "meta.properties").unlink()
    before = snapshot(data_dir)
    completed = serve_refused(data_dir)
    line = refusal_line(completed.stderr)
    assert "holds data" in line and "no meta.properties" in line
    assert f"{topic}-0" in line and "restore meta.properties" in line
    assert snapshot(data_dir) == before
    assert not (data_dir / "meta.properties").exists()  # no new cluster id made up


def test_partition_metadata_with_another_topic_id_is_refused(
    stopped_topic: tuple[Path, str, dict[str, str]],
) -> None:
    data_dir, topic, _ = stopped_topic
    path = data_dir / f"{topic}-0" / "partition.metadata"
    path.write_text("version: 0\ntopic_id: 00000000-0000-4000-8000-000000000001\n")
    before = snapshot(data_dir)
    completed = serve_refused(data_dir)
    line = refusal_line(completed.stderr)
    assert "holds topic id 00000000-0000-4000-8000-000000000001" in line
    assert f"the metadata says topic {topic!r} has id" in line and "-stray" in line
    assert snapshot(data_dir) == before


def test_damaged_partition_metadata_is_refused(
    stopped_topic: tuple[Path, str, dict[str, str]],
) -> None:
    data_dir, topic, _ = stopped_topic
    (data_dir / f"{topic}-0" / "partition.metadata").write_bytes(b"\xff\xfe garbage \x00")
    before = snapshot(data_dir)
    line = refusal_line(serve_refused(data_dir).stderr)
    assert f"{topic}-0/partition.metadata is damaged" in line
    assert snapshot(data_dir) == before
