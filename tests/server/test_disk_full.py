"""A real full disk: a broker whose data dir is a small tmpfs that fills up.

Needs root to mount the tmpfs (skipped otherwise; tests/storage/test_disk_full.py
covers the same logic by injecting ENOSPC and runs everywhere). With default configs:
produce answers KAFKA_STORAGE_ERROR per partition once the disk is full; CreateTopics
answers KAFKA_STORAGE_ERROR when the metadata record cannot be written, and that
topic does not exist, now or after a restart; the connection stays up and nothing
logs a traceback; SIGTERM on the full disk exits 1 with one line; after space is
freed a restart recovers every acknowledged record, exactly once.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.server.test_protocol import assert_clean_log, batch, metadata, produce, read_all
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient, create_topic

TMPFS_SIZE = "24m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(path: Path) -> None:
    """Write ``path`` until the file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"z" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"z")
    except OSError:
        pass
    finally:
        os.close(fd)


def test_full_disk_gets_storage_errors_and_loses_nothing_acknowledged(
    small_disk: Path, tmp_path: Path
) -> None:
    # Ballast the operator deletes to make room again before the restart.
    (small_disk / "ballast").write_bytes(b"b" * 4 * 2**20)
    broker = BrokerProcess(small_disk / "data")
    broker.log_path = tmp_path / "broker.log"  # not on the disk that fills up
    broker.start()
    try:
        acked: list[bytes] = []
        with WireClient(broker.bootstrap) as client:
            assert create_topic(client, "data", 1, None).error_code == ErrorCode.none
            codes = []
            for i in range(400):  # ~40 MB of 100 KB batches into 20 MB
                value = f"big-{i}".encode().ljust(100_000, b".")
                response = produce(client, "data", 0, batch([value]))
                codes.append(response.error_code)
                if response.error_code != ErrorCode.none:
                    break
                acked.append(value)
            assert codes[-1] == ErrorCode.kafka_storage_error, codes[-5:]
            fill(small_disk / "filler")
            for i in range(200):  # small ones fit in the last page, then no more
                value = f"small-{i}".encode().ljust(500, b".")
                response = produce(client, "data", 0, batch([value]))
                if response.error_code != ErrorCode.none:
                    assert response.error_code == ErrorCode.kafka_storage_error
                    break
                acked.append(value)
            else:
                pytest.fail("200 produce requests fitted on a full disk")

            created, refused = [], []
            for i in range(200):
                name = f"new-{i}"
                result = create_topic(client, name, 1, None)
                if result.error_code == ErrorCode.none:
                    created.append(name)  # committed (its log may wait for space)
                    continue
                assert result.error_code == ErrorCode.kafka_storage_error, result
                assert "No space left on device" in (result.error_message or "")
                refused.append(name)
                if len(refused) == 3:
                    break
            assert refused, "the metadata log never ran out of space"
            # Same connection still served; the refused topics do not exist.
            names = {t.name for t in metadata(client, None).topics}
            assert set(created) <= names and not names & set(refused)
        assert broker.alive()
        assert broker.stop() == 1
        log = broker.log()
        assert "odradek serve: shutdown incomplete" in log.splitlines()[-1]
        assert_clean_log(broker)

        (small_disk / "filler").unlink()
        (small_disk / "ballast").unlink()
        broker.start()
        with WireClient(broker.bootstrap) as client:
            names = {t.name for t in metadata(client, None).topics}
            assert set(created) <= names and not names & set(refused)
            assert [r.value for r in read_all(client, "data", 0)] == acked
            assert produce(client, "data", 0, batch([b"after"])).base_offset == len(acked)
            for name in created:  # their logs exist now
                assert produce(client, name, 0, batch([b"x"])).error_code == ErrorCode.none
        assert broker.stop() == 0
        assert_clean_log(broker)
    finally:
        broker.kill()
