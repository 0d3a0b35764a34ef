"""Strict loading (the metadata log): flushed data is never cut, a torn tail still is.

``open_log(strict=True)`` is how ``__cluster_metadata-0`` is opened. Below the
recovery point everything was fsynced, so damage there is not a torn write but lost
or corrupted history: the load raises CommittedDataCorruptError naming the file and
position and leaves every file as it was. Above the recovery point a crash may have
torn the last write, which is cut as in any log.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from odradek.records.codec import Record, encode_batch
from odradek.storage.errors import CommittedDataCorruptError
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

CONFIG = LogConfig(retention_ms=-1, segment_bytes=4000)


def fill(directory: Path, batches: int) -> tuple[int, list[int]]:
    """``batches`` one-record batches, flushed; returns (log end, segment bases)."""
    log, _ = open_log(directory, CONFIG)
    for i in range(batches):
        log.append_as_leader(encode_batch([Record(0, 1_700_000_000_000 + i, b"k", b"v" * 200)]), 1)
    log.flush()
    end, bases = log.log_end_offset, [s.base_offset for s in log.segments]
    log.close()
    return end, bases


def digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.suffix == ".log"
    }


def open_strict(directory: Path, recovery_point: int, clean: bool = False) -> Log:
    log, _ = open_log(
        directory, CONFIG, recovery_point=recovery_point, clean_shutdown=clean, strict=True
    )
    return log


@pytest.mark.parametrize("clean", [False, True])
def test_flipped_byte_below_the_recovery_point_raises_and_changes_nothing(
    tmp_path: Path, clean: bool
) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    end, bases = fill(directory, 40)
    path = directory / f"{bases[-1]:020d}.log"
    data = bytearray(path.read_bytes())
    data[300 + 30] ^= 0x40  # inside the second batch's CRC-covered bytes
    path.write_bytes(bytes(data))
    before = digest(directory)
    if clean:
        # A clean load trusts flushed segments (no CRC pass): it opens, and the
        # metadata replay is what checks every CRC (tests/server/test_metadata_log.py).
        open_strict(directory, end, clean=True).close()
    else:
        with pytest.raises(CommittedDataCorruptError) as raised:
            open_strict(directory, end)
        assert raised.value.path == path
        assert raised.value.position > 0
        assert "CRC32C" in raised.value.detail
    assert digest(directory) == before


def test_cut_or_missing_flushed_data_raises(tmp_path: Path) -> None:
    directory = tmp_path / "m-0"
    end, bases = fill(directory, 60)
    assert len(bases) >= 3
    last = directory / f"{bases[-1]:020d}.log"
    os.truncate(last, last.stat().st_size - 30)
    cut = digest(directory)
    with pytest.raises(CommittedDataCorruptError, match=r"runs past|declares|remain"):
        open_strict(directory, end, clean=True)
    assert digest(directory) == cut  # not cut further
    # A segment file in the middle gone: the gap is below the recovery point.
    os.truncate(last, 0)
    (directory / f"{bases[1]:020d}.log").unlink()
    with pytest.raises(CommittedDataCorruptError, match=r"missing|cut or deleted"):
        open_strict(directory, end, clean=True)


def test_deleted_log_file_raises(tmp_path: Path) -> None:
    directory = tmp_path / "m-0"
    end, bases = fill(directory, 5)
    (directory / f"{bases[0]:020d}.log").unlink()
    expected = f"no segment file, but offsets up to {end} were flushed"
    with pytest.raises(CommittedDataCorruptError, match=expected):
        open_strict(directory, end, clean=True)


def test_torn_tail_above_the_recovery_point_is_cut(tmp_path: Path) -> None:
    directory = tmp_path / "m-0"
    end, bases = fill(directory, 30)
    last = directory / f"{bases[-1]:020d}.log"
    size = last.stat().st_size
    with open(last, "ab") as handle:  # half a batch written when the process died
        handle.write(encode_batch([Record(end, 1, b"k", b"torn" * 50)], base_offset=end)[:90])
    log = open_strict(directory, end)
    assert log.log_end_offset == end
    assert last.stat().st_size == size
    log.close()
    # Without strictness the same damage below the recovery point is cut as before.
    data = bytearray(last.read_bytes())
    data[40] ^= 1
    last.write_bytes(bytes(data))
    log, stats = open_log(directory, CONFIG, recovery_point=end, clean_shutdown=False)
    assert stats.corruption is not None
    assert log.log_end_offset == bases[-1]
    log.close()
