"""``__cluster_metadata-0`` across restarts: recovered from its recovery point, never cut
below it, and damage there stops the broker rather than starting an empty cluster.

(a) A metadata log of tens of MB (several 8 MiB segments) survives clean SIGTERM
restarts whole: its recovery point is checkpointed like any log's, a clean start does
not re-read it (no "recovered __cluster_metadata-0" line), a topic created afterwards
and its data are still there after the next restart, and a kill -9 re-reads only the
segment holding the recovery point. Before, every start re-read it all, and with the
4 MiB chunk bug cut it, forgot later topics and deleted their data as "stray".
(b) Damage below the recovery point — a flipped byte in the first batch (after a clean
stop or a kill -9), 30 bytes cut off the end, the file or the directory deleted —
makes ``odradek serve`` exit non-zero with one line naming the file, the position and
what to do, without a traceback, and without touching a byte of partition data.
(c) A torn tail above the recovery point after a kill -9 is cut as in any log, and
``--truncate-damaged-metadata`` starts from the metadata before the damage.

The tens of MB of (valid, controller-format) config records are appended to the log
offline with odradek's own Log between two runs: through the wire they would take
tens of thousands of fsynced AlterConfigs.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.metadata.image import MetadataRecord
from odradek.records.batch import iter_batches
from odradek.records.codec import Record, decode_batch, encode_batch
from odradek.server.metadata_log import METADATA_LOG_CONFIG, METADATA_LOG_DIR
from odradek.storage.checkpoint import (
    RECOVERY_POINT_CHECKPOINT,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from odradek.storage.log_loader import open_log
from tests.server.test_admin_configs import configs_of, set_topic_configs
from tests.server.test_protocol import batch, list_offset, make_topic, metadata, produce, read_all
from tests.support.broker import BrokerProcess
from tests.support.damage import flip
from tests.support.wire import WireClient

TOPIC_TYPE = 2
METADATA_TP = ("__cluster_metadata", 0)
FIRST_SEGMENT = f"{0:020d}.log"


def timed_start(broker: BrokerProcess) -> float:
    started = time.monotonic()
    broker.start()
    return time.monotonic() - started


def metadata_recovered_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log().splitlines() if f"recovered {METADATA_LOG_DIR} " in line]


def grow_metadata_log(data_dir: Path, topic: str, target_bytes: int, final_value: str) -> int:
    """Append valid Config records for ``topic`` until the metadata log holds ``target_bytes``.

    Written as the controller writes them (JSON records, batches fsynced), with the
    recovery point checkpointed as a clean shutdown leaves it; returns the log end.
    """
    log, _ = open_log(data_dir / METADATA_LOG_DIR, METADATA_LOG_CONFIG)
    value = 0
    while log.size < target_bytes:
        records = []
        for _ in range(50):
            value += 1
            key, payload = MetadataRecord(
                "Config",
                {
                    "resource_type": "topic",
                    "resource_name": topic,
                    "name": "retention.ms",
                    "value": str(86_400_000 + value),
                },
            ).encode()
            records.append(Record(len(records), 1_700_000_000_000, key, payload))
        log.append_as_leader(encode_batch(records), 1)
    key, payload = MetadataRecord(
        "Config",
        {
            "resource_type": "topic",
            "resource_name": topic,
            "name": "retention.ms",
            "value": final_value,
        },
    ).encode()
    log.append_as_leader(encode_batch([Record(0, 1_700_000_000_000, key, payload)]), 1)
    log.flush()
    end = log.log_end_offset
    log.close()
    points = read_offset_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT)
    points[METADATA_TP] = end
    write_offset_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT, points)
    return end


def topic_names(bootstrap: str) -> set[str]:
    with WireClient(bootstrap) as client:
        return {t.name for t in metadata(client, None).topics}


def test_metadata_log_of_tens_of_mb_survives_clean_restarts_and_is_not_rescanned(
    restartable: BrokerProcess,
) -> None:
    broker = restartable.start()
    data_dir = broker.data_dir
    with WireClient(broker.bootstrap) as client:
        first = make_topic(client, "before")
        assert produce(client, first, 0, batch([b"a"] * 100)).error_code == ErrorCode.none
        for value in range(20):  # some config changes through the wire too
            set_topic_configs(client, first, retention_ms=str(3_600_000 + value))
    assert broker.stop() == 0
    # The clean stop checkpointed the metadata log's recovery point with the others.
    points = read_offset_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT)
    assert points.get(METADATA_TP, 0) > 20

    grown = time.monotonic()
    end = grow_metadata_log(data_dir, first, 24 * 2**20, "86400000")
    print(f"grew the metadata log in {time.monotonic() - grown:.1f}s")
    segments = sorted((data_dir / METADATA_LOG_DIR).glob("*.log"))
    assert len(segments) >= 3 and sum(p.stat().st_size for p in segments) > 24 * 2**20

    times = [timed_start(broker)]
    assert metadata_recovered_lines(broker) == []  # a clean start re-reads nothing
    with WireClient(broker.bootstrap) as client:
        assert configs_of(client, TOPIC_TYPE, first)["retention.ms"].value == "86400000"
        second = make_topic(client, "after")
        assert produce(client, second, 0, batch([b"b"] * 300)).error_code == ErrorCode.none
    assert broker.stop() == 0
    points = read_offset_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT)
    assert points[METADATA_TP] > end

    times.append(timed_start(broker))
    assert metadata_recovered_lines(broker) == []
    assert {first, second} <= topic_names(broker.bootstrap)
    with WireClient(broker.bootstrap) as client:
        assert len(read_all(client, second, 0)) == 300
        assert len(read_all(client, first, 0)) == 100
        assert configs_of(client, TOPIC_TYPE, first)["retention.ms"].value == "86400000"

    # After kill -9 only the segment holding the recovery point is re-read.
    broker.kill()
    times.append(timed_start(broker))
    (line,) = metadata_recovered_lines(broker)
    assert ": 1 segment(s)," in line, line
    recovered_from = int(line.split(" from offset ")[1].split(":")[0])
    assert points[METADATA_TP] <= recovered_from < end + 10, line
    assert {first, second} <= topic_names(broker.bootstrap)
    assert "Traceback" not in broker.log()
    print(f"metadata log {end} records; start times (clean, clean, kill -9): {times}")


# -- damage ------------------------------------------------------------------------------


def log_digests(data_dir: Path) -> dict[str, str]:
    """Every segment file in the data dir (partition data and the metadata log)."""
    return {
        str(p.relative_to(data_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(data_dir.rglob("*.log"))
    }


def serve_refused(data_dir: Path, *extra: str) -> str:
    """Run ``odradek serve`` expecting it to refuse; returns its one error line."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            "127.0.0.1:0",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0, result
    assert "odradek ready" not in result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "cannot start" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("odradek serve: cannot start: "), lines[0]
    return lines[0]


@pytest.fixture
def pristine(restartable: BrokerProcess, tmp_path: Path) -> tuple[BrokerProcess, Path, str]:
    """A cleanly stopped broker's data dir holding topic data, and a copy to restore."""
    broker = restartable.start()
    with WireClient(broker.bootstrap) as client:
        topic = make_topic(client, "c")
        for _ in range(10):
            assert produce(client, topic, 0, batch([b"x" * 100] * 50)).error_code == 0
        # the last change (the clean stop then fences the broker: controlled shutdown)
        set_topic_configs(client, topic, retention_ms="7200000")
    assert broker.stop() == 0
    copy = tmp_path / "pristine"
    shutil.copytree(broker.data_dir, copy)
    return broker, copy, topic


def restore(broker: BrokerProcess, copy: Path) -> Path:
    shutil.rmtree(broker.data_dir)
    shutil.copytree(copy, broker.data_dir)
    return broker.data_dir / METADATA_LOG_DIR / FIRST_SEGMENT


def test_damaged_flushed_metadata_stops_the_broker_and_touches_no_data(
    pristine: tuple[BrokerProcess, Path, str],
) -> None:
    broker, copy, topic = pristine
    data_dir = broker.data_dir

    # A flipped byte in the first batch, after a clean stop: replay finds it.
    path = restore(broker, copy)
    flip(path, 30, mask=0x10)
    before = log_digests(data_dir)
    line = serve_refused(data_dir)
    assert f"{path} position 0: " in line and "CRC32C" in line, line
    assert "Restore" in line and "--truncate-damaged-metadata" in line, line
    assert log_digests(data_dir) == before

    # The same after a kill -9: recovery finds it below the recovery point.
    path = restore(broker, copy)
    broker.start()
    broker.kill()
    flip(path, 30, mask=0x10)
    before = log_digests(data_dir)
    line = serve_refused(data_dir)
    assert f"{path} position 0: " in line and "CRC32C" in line, line
    assert log_digests(data_dir) == before

    # 30 bytes cut off the committed end.
    path = restore(broker, copy)
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size - 30)
    before = log_digests(data_dir)
    line = serve_refused(data_dir)
    assert str(path) in line and "position" in line, line
    assert log_digests(data_dir) == before

    # The segment file deleted, then the whole directory.
    path = restore(broker, copy)
    path.unlink()
    before = log_digests(data_dir)
    line = serve_refused(data_dir)
    assert f"{path.parent} is missing or empty" in line and f"{topic}-0" in line, line
    assert log_digests(data_dir) == before
    assert not path.exists()  # not recreated empty
    shutil.rmtree(path.parent)
    line = serve_refused(data_dir)
    assert f"{path.parent} is missing or empty" in line, line
    assert log_digests(data_dir) == before
    assert not path.parent.exists()
    # Without the recovery-point checkpoint (a data dir from before the metadata log
    # was checkpointed) the same: it is the partition data that tells.
    (data_dir / RECOVERY_POINT_CHECKPOINT).unlink()
    line = serve_refused(data_dir)
    assert "missing or empty" in line, line
    assert log_digests(data_dir) == before
    assert (data_dir / f"{topic}-0" / FIRST_SEGMENT).exists()


def test_torn_tail_is_cut_and_the_operator_may_start_from_the_metadata_before_damage(
    pristine: tuple[BrokerProcess, Path, str],
) -> None:
    broker, copy, topic = pristine
    # kill -9 with half a batch written after the last flushed one: cut, start.
    path = restore(broker, copy)
    broker.start()
    broker.kill()
    size = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(encode_batch([Record(0, 1, b"Config", b"{" * 300)])[:100])
    broker.start()
    assert "cut 100 bytes after the last valid batch" in broker.log()
    assert path.stat().st_size >= size
    with WireClient(broker.bootstrap) as client:
        assert list_offset(client, topic, 0, -1).offset == 500
    broker.stop()

    # Damage in the flushed batch of the config change: refused, unless asked.
    path = restore(broker, copy)
    data = path.read_bytes()
    *_, last = (
        h
        for h in iter_batches(data)
        if not h.is_control
        and any(
            r.key == b"Config"
            for r in decode_batch(data[h.position : h.position + h.batch_length + 12]).records
        )
    )
    flip(path, last.position + 40, mask=0x10)
    line = serve_refused(broker.data_dir)
    assert f"position {last.position}" in line, line
    broker.extra_args = ["--truncate-damaged-metadata"]
    broker.start()
    assert "keeping only the metadata before the damage" in broker.log()
    with WireClient(broker.bootstrap) as client:
        assert list_offset(client, topic, 0, -1).offset == 500
        assert configs_of(client, TOPIC_TYPE, topic)["retention.ms"].value != "7200000"
    assert "Traceback" not in broker.log()
