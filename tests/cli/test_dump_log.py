"""Tests for ``odradek dump-log`` on logs written by the real storage engine."""

from __future__ import annotations

import contextlib
import io
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek import __version__
from odradek.cli import dump_common
from odradek.cli.main import main
from odradek.records.batch import (
    COMPRESSION_NAMES,
    GZIP,
    LZ4,
    NO_COMPRESSION,
    SNAPPY,
    ZSTD,
    compute_crc,
    iter_batches,
)
from odradek.records.codec import Header, Record, encode_batch, encode_end_txn_marker
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from tests.support.damage import flip

NOW_MS = 1_700_000_000_000
BATCHES = 20
RECORDS_PER_BATCH = 3
SMALL_SEGMENTS = {"segment_bytes": 1000, "index_interval_bytes": 150}


# -- helpers ---------------------------------------------------------------------


def open_test_log(directory: Path, **config: object) -> Log:
    log, _ = open_log(directory, LogConfig(**config), clock=lambda: NOW_MS)  # type: ignore[arg-type]
    return log


def batch_records(batch: int, base: int = 0) -> list[Record]:
    return [
        Record(
            base + i,
            NOW_MS + batch * 10 + i,
            f"k{batch}-{i}".encode(),
            f"value {batch}-{i}".encode(),
            (Header("a", b"1"), Header("b", None)),
        )
        for i in range(RECORDS_PER_BATCH)
    ]


def write_log(directory: Path, codecs: tuple[int, ...] = (NO_COMPRESSION,)) -> Path:
    """A closed log with several segments; batch i uses codecs[i % len(codecs)]."""
    log = open_test_log(directory, **SMALL_SEGMENTS)
    for batch in range(BATCHES):
        data = encode_batch(
            batch_records(batch),
            compression=codecs[batch % len(codecs)],
            producer_id=7,
            producer_epoch=0,
            base_sequence=batch * RECORDS_PER_BATCH,
        )
        log.append_as_leader(data, leader_epoch=batch // 5)
    log.close()
    return directory


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return write_log(tmp_path / "t-0", codecs=(NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD))


def first(directory: Path, suffix: str) -> Path:
    return sorted(directory.glob(f"*{suffix}"))[0]


def dump(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, list[str], str]:
    code = main(["dump-log", *(str(arg) for arg in args)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def fields(line: str) -> dict[str, str]:
    """The ``name: value`` pairs of a dump line (values without spaces)."""
    return dict(re.findall(r"(\w+): (\S+)", line))


def batch_lines(lines: list[str]) -> list[dict[str, str]]:
    return [fields(line) for line in lines if line.startswith("baseOffset:")]


def record_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("| offset:")]


def batch_positions(path: Path) -> list[int]:
    return [header.position for header in iter_batches(path.read_bytes())]


# -- .log ------------------------------------------------------------------------


def test_batch_lines_match_the_batches_in_the_file(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segments = sorted(log_dir.glob("*.log"))
    assert len(segments) >= 3
    code, lines, err = dump(capsys, segments[1])
    assert (code, err) == (0, "")
    assert lines[:2] == [f"Dumping {segments[1]}", f"Log starting offset: {int(segments[1].stem)}"]
    batches = batch_lines(lines)
    expected = list(iter_batches(segments[1].read_bytes()))
    assert len(batches) == len(expected) == len(lines) - 2
    next_offset = int(segments[1].stem)
    for shown, header in zip(batches, expected, strict=True):
        assert int(shown["baseOffset"]) == next_offset
        assert int(shown["lastOffset"]) == next_offset + RECORDS_PER_BATCH - 1
        assert int(shown["count"]) == RECORDS_PER_BATCH
        assert int(shown["position"]) == header.position
        assert int(shown["size"]) == header.size
        assert int(shown["crc"]) == header.crc
        assert int(shown["CreateTime"]) == header.max_timestamp
        assert shown["compresscodec"] == COMPRESSION_NAMES[header.compression]
        assert int(shown["partitionLeaderEpoch"]) == next_offset // (5 * RECORDS_PER_BATCH)
        assert (shown["producerId"], shown["magic"], shown["isvalid"]) == ("7", "2", "true")
        assert int(shown["baseSequence"]) == next_offset
        assert int(shown["lastSequence"]) == next_offset + RECORDS_PER_BATCH - 1
        next_offset += RECORDS_PER_BATCH


def test_print_data_log_shows_every_record_of_every_codec(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segments = sorted(log_dir.glob("*.log"))
    code, lines, _ = dump(capsys, "--print-data-log", *segments)
    assert code == 0
    records = record_lines(lines)
    assert len(records) == BATCHES * RECORDS_PER_BATCH
    assert {fields(line)["compresscodec"] for line in lines if "compresscodec" in line} == set(
        COMPRESSION_NAMES.values()
    )
    for offset, line in enumerate(records):
        batch, i = divmod(offset, RECORDS_PER_BATCH)
        assert line == (
            f"| offset: {offset} CreateTime: {NOW_MS + batch * 10 + i} keySize: "
            f"{len(f'k{batch}-{i}')} valueSize: {len(f'value {batch}-{i}')} "
            f"sequence: {offset} headerKeys: [a,b] key: k{batch}-{i} payload: value {batch}-{i}"
        )


def test_null_and_binary_keys_and_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = open_test_log(tmp_path / "t-0")
    records = [Record(0, NOW_MS, None, b"\xff\xfeok"), Record(1, NOW_MS, "ключ".encode(), None)]
    log.append_as_leader(encode_batch(records), leader_epoch=0)
    log.close()
    code, lines, _ = dump(capsys, "--print-data-log", first(tmp_path / "t-0", ".log"))
    assert code == 0
    assert record_lines(lines) == [
        f"| offset: 0 CreateTime: {NOW_MS} keySize: -1 valueSize: 4 sequence: -1 "
        "headerKeys: [] key: null payload: \ufffd\ufffdok",
        f"| offset: 1 CreateTime: {NOW_MS} keySize: 8 valueSize: -1 sequence: -1 "
        "headerKeys: [] key: ключ payload: null",
    ]


def test_log_append_time_batches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = open_test_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    log.append_as_leader(encode_batch(batch_records(0)), leader_epoch=0)
    log.close()
    code, lines, _ = dump(capsys, "--print-data-log", first(tmp_path / "t-0", ".log"))
    assert code == 0
    assert fields(lines[2])["LogAppendTime"] == str(NOW_MS)
    assert "CreateTime" not in lines[2]
    assert all(f"LogAppendTime: {NOW_MS} " in line for line in record_lines(lines))


def write_transactions(directory: Path) -> None:
    """A committed transaction (data + COMMIT marker), then one left open."""
    log = open_test_log(directory)

    def transactional(records: list[Record], **fields: Any) -> bytes:
        return encode_batch(
            records, producer_id=9, producer_epoch=2, is_transactional=True, **fields
        )

    log.append_as_leader(transactional(batch_records(0), base_sequence=0), leader_epoch=3)
    end = log.log_end_offset
    marker = encode_end_txn_marker(True, 5, offset=end, timestamp=NOW_MS)
    control = transactional([marker], base_offset=end, partition_leader_epoch=3, is_control=True)
    log.append_as_follower(control)
    log.append_as_leader(transactional(batch_records(1), base_sequence=3), leader_epoch=3)
    log.close()


def test_control_batches_show_their_marker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_transactions(tmp_path / "t-0")
    code, lines, _ = dump(capsys, "--print-data-log", first(tmp_path / "t-0", ".log"))
    assert code == 0
    batches = batch_lines(lines)
    assert [(b["isTransactional"], b["isControl"]) for b in batches] == [
        ("true", "false"),
        ("true", "true"),
        ("true", "false"),
    ]
    marker = [line for line in record_lines(lines) if "endTxnMarker" in line]
    assert marker == [
        f"| offset: 3 CreateTime: {NOW_MS} keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 5"
    ]


def test_empty_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"{42:020d}.log"
    path.write_bytes(b"")
    assert dump(capsys, path) == (0, [f"Dumping {path}", "Log starting offset: 42"], "")


def test_a_flipped_byte_stops_the_dump_at_that_batch(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment, other = sorted(log_dir.glob("*.log"))[:2]
    bad = batch_positions(segment)[2]
    flip(segment, bad + 70)  # inside the records, covered by the CRC
    code, lines, err = dump(capsys, segment, other)
    assert (code, err) == (1, "")
    shown = batch_lines(lines)
    assert [b["isvalid"] for b in shown[:3]] == ["true", "true", "false"]
    assert int(shown[2]["position"]) == bad
    invalid = lines.index(next(line for line in lines if line.startswith("Found")))
    assert lines[invalid].startswith(f"Found invalid batch at position {bad}: CRC32C mismatch")
    assert lines[invalid + 1] == f"Dumping {other}"  # the next file is still dumped
    assert all(b["isvalid"] == "true" for b in shown[3:])


@pytest.mark.parametrize(
    ("where", "value", "reason"),
    [
        (16, 1, "magic is 1; only v2 batches are supported"),
        (8, 10, "batch length 10 is below the minimum"),
    ],
)
def test_a_damaged_header_is_reported_with_its_position(
    log_dir: Path, capsys: pytest.CaptureFixture[str], where: int, value: int, reason: str
) -> None:
    segment = first(log_dir, ".log")
    bad = batch_positions(segment)[1]
    data = bytearray(segment.read_bytes())
    struct.pack_into(">b" if where == 16 else ">i", data, bad + where, value)
    segment.write_bytes(bytes(data))
    code, lines, _ = dump(capsys, segment)
    assert code == 1
    assert len(batch_lines(lines)) == 1
    assert lines[-1] == f"Found invalid batch at position {bad}: {reason}"


def test_records_that_do_not_decode_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A valid CRC over a record section that claims one record more than it holds.
    good = encode_batch(batch_records(0))
    data = bytearray(encode_batch(batch_records(1, base=3), base_offset=3))
    struct.pack_into(">i", data, 57, RECORDS_PER_BATCH + 1)
    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    path = tmp_path / f"{0:020d}.log"
    path.write_bytes(good + bytes(data))
    code, lines, _ = dump(capsys, "--print-data-log", path)
    assert code == 1
    assert lines[-1] == (
        f"Found invalid batch at position {len(good)}: record count is 4 but only 3 records fit"
    )
    code, lines, _ = dump(capsys, path)  # without records the batch looks fine
    assert code == 0


def test_offsets_going_backwards_are_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = encode_batch(batch_records(0, base=10), base_offset=10)
    path = tmp_path / f"{10:020d}.log"
    path.write_bytes(batch + batch)
    code, lines, _ = dump(capsys, path)
    assert code == 1
    assert lines[-1] == (
        f"Found invalid batch at position {len(batch)}: base offset 10 is below the next "
        "expected offset 13"
    )


@pytest.mark.parametrize("cut", [1, 30, 100])
def test_a_truncated_file_reports_the_invalid_bytes_at_the_end(
    log_dir: Path, capsys: pytest.CaptureFixture[str], cut: int
) -> None:
    segment = first(log_dir, ".log")
    positions = batch_positions(segment)
    last = positions[-1]
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - cut])
    code, lines, _ = dump(capsys, segment)
    assert code == 1
    assert len(batch_lines(lines)) == len(positions) - 1
    assert lines[-1] == (
        f"Found {len(data) - cut - last} invalid bytes at the end of {segment} (position {last})"
    )


def test_max_bytes_reads_only_whole_batches_within_the_limit(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = first(log_dir, ".log")
    positions = batch_positions(segment)
    code, lines, _ = dump(capsys, "--max-bytes", positions[3] + 10, segment)
    assert code == 0  # a batch cut off by the limit is not damage
    assert [int(b["position"]) for b in batch_lines(lines)] == positions[:3]


def test_small_read_chunks_give_the_same_dump(
    log_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    segments = sorted(log_dir.glob("*.log"))
    expected = dump(capsys, "--print-data-log", *segments)
    monkeypatch.setattr(dump_common, "READ_CHUNK_BYTES", 64)  # every batch is "large" now
    assert dump(capsys, "--print-data-log", *segments) == expected
    flip(segments[0], batch_positions(segments[0])[1] + 100)
    code, lines, _ = dump(capsys, segments[0])
    assert code == 1
    assert [b["isvalid"] for b in batch_lines(lines)] == ["true", "false"]


def test_deleted_segments_are_dumped(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    segment = first(log_dir, ".log")
    deleted = segment.with_name(segment.name + ".deleted")
    segment.rename(deleted)
    code, lines, _ = dump(capsys, deleted)
    assert code == 0
    assert lines[1] == "Log starting offset: 0"


# -- .index and .timeindex -------------------------------------------------------------


def test_index_entries_point_at_batches(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    segment = first(log_dir, ".log")
    _, log_lines, _ = dump(capsys, segment)
    last_offset_at = {int(b["position"]): int(b["lastOffset"]) for b in batch_lines(log_lines)}
    code, lines, _ = dump(capsys, segment.with_suffix(".index"))
    assert code == 0
    assert lines[0] == f"Dumping {segment.with_suffix('.index')}"
    entries = [fields(line) for line in lines[1:]]
    assert len(entries) >= 2
    for entry in entries:
        assert last_offset_at[int(entry["position"])] == int(entry["offset"])


def test_time_index_entries(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = first(log_dir, ".timeindex")
    code, lines, _ = dump(capsys, path)
    assert code == 0
    entries = [(int(f["timestamp"]), int(f["offset"])) for f in map(fields, lines[1:])]
    assert len(entries) >= 2
    # Batch b (offsets 3b..3b+2) has max timestamp NOW + 10b + 2.
    assert all(t == NOW_MS + 10 * (o // 3) + 2 and o % 3 == 2 for t, o in entries)


def test_verify_index_only_passes_on_a_good_log(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    indexes = sorted(log_dir.glob("*.index")) + sorted(log_dir.glob("*.timeindex"))
    code, lines, err = dump(capsys, "--verify-index-only", *indexes)
    assert (code, err) == (0, "")
    assert len(lines) == 2 * len(indexes)  # "Dumping" and the summary, nothing per entry
    summaries = lines[1::2]
    assert all(
        re.fullmatch(r"Verified [1-9]\d* index entr(y|ies) against \d{20}\.log: no mismatches", s)
        for s in summaries
    )


def rewrite_entry(path: Path, entry: int, layout: str, *values: int) -> None:
    size = struct.calcsize(layout)
    data = bytearray(path.read_bytes())
    struct.pack_into(layout, data, entry * size, *values)
    path.write_bytes(bytes(data))


def read_entries(path: Path, layout: str) -> list[tuple[int, ...]]:
    return list(struct.iter_unpack(layout, path.read_bytes()))


def test_verify_finds_an_index_entry_pointing_at_the_wrong_batch(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = first(log_dir, ".index")
    entries = read_entries(index, ">ii")
    relative, position = entries[1]
    rewrite_entry(index, 1, ">ii", relative + 2, position)
    code, lines, _ = dump(capsys, "--verify-index-only", index)
    assert code == 1
    assert lines[1:] == [
        f"Index offset {relative + 2} points to position {position} but the batch there "
        f"has last offset {relative}",
        f"Verified {len(entries)} index entries against {index.stem}.log: 1 mismatch",
    ]


def test_verify_finds_positions_that_are_not_batch_starts(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = first(log_dir, ".index")
    entries = read_entries(index, ">ii")
    relative, position = entries[0]
    rewrite_entry(index, 0, ">ii", relative, position + 5)
    last_relative, _ = entries[-1]
    rewrite_entry(index, len(entries) - 1, ">ii", last_relative, 10**6)
    code, lines, _ = dump(capsys, "--verify-index-only", index)
    assert code == 1
    assert lines[1] == (
        f"Index offset {relative} points to position {position + 5}, which is not a batch start"
    )
    assert lines[2] == (
        f"Index offset {last_relative} points to position {10**6}, past the end of the log "
        f"({index.with_suffix('.log').stat().st_size} bytes)"
    )


def test_verify_finds_entries_out_of_order(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = first(log_dir, ".index")
    entries = read_entries(index, ">ii")
    rewrite_entry(index, 1, ">ii", *entries[0])
    code, lines, _ = dump(capsys, "--verify-index-only", index)
    assert code == 1
    assert lines[1] == (
        f"Index entry offset {entries[0][0]} position {entries[0][1]} does not follow "
        f"offset {entries[0][0]} position {entries[0][1]}"
    )


def test_verify_finds_a_wrong_time_index_timestamp(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = first(log_dir, ".timeindex")
    entries = read_entries(path, ">qi")
    timestamp, relative = entries[0]
    rewrite_entry(path, 0, ">qi", timestamp - 1, relative)
    code, lines, _ = dump(capsys, "--verify-index-only", path)
    assert code == 1
    assert lines[1] == (
        f"Time index timestamp {timestamp - 1} for offset {relative} but the largest "
        f"timestamp up to the batch holding it is {timestamp}"
    )
    rewrite_entry(path, 0, ">qi", timestamp, 10**6)
    code, lines, _ = dump(capsys, "--verify-index-only", path)
    assert code == 1
    assert f"Time index offset {10**6} (timestamp {timestamp}) is past the last offset" in lines[1]


def test_a_torn_index_file(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = first(log_dir, ".index")
    data = index.read_bytes()
    index.write_bytes(data + b"\x00\x01\x02")
    for flags in ([], ["--verify-index-only"]):
        code, lines, _ = dump(capsys, *flags, index)
        assert code == 1
        expected = f"Found 3 invalid bytes at the end of {index} (position {len(data)})"
        assert expected in lines


def test_verify_reports_a_damaged_log(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    segment = first(log_dir, ".log")
    data = segment.read_bytes()
    segment.write_bytes(data[:100])
    code, lines, _ = dump(capsys, "--verify-index-only", segment.with_suffix(".index"))
    assert code == 1
    assert any("past the end of the log" in line or "damage" in line for line in lines)
    assert any(line.endswith("later entries could not be checked") for line in lines)


def test_verify_needs_the_sibling_log(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = first(log_dir, ".index")
    index.with_suffix(".log").unlink()
    code, lines, err = dump(capsys, "--verify-index-only", index)
    assert (code, lines) == (1, [])
    assert (
        err == f"odradek dump-log: error: {index.with_suffix('.log')}: No such file or directory\n"
    )


# -- .snapshot and leader-epoch-checkpoint ----------------------------------------------


def test_producer_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_transactions(tmp_path / "t-0")
    snapshot = first(tmp_path / "t-0", ".snapshot")
    code, lines, _ = dump(capsys, snapshot)
    assert code == 0
    assert lines == [
        f"Dumping {snapshot}",
        f"producerId: 9 producerEpoch: 2 coordinatorEpoch: 5 currentTxnFirstOffset: 4 "
        f"lastTimestamp: {NOW_MS + 12} batches: [0-2@0-2, 3-5@4-6]",
    ]


def test_a_corrupt_snapshot_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_transactions(tmp_path / "t-0")
    snapshot = first(tmp_path / "t-0", ".snapshot")
    flip(snapshot, 12)
    code, lines, err = dump(capsys, snapshot)
    assert (code, lines) == (1, [])
    assert err == f"odradek dump-log: error: {snapshot}: CRC mismatch\n"


def test_leader_epoch_checkpoint(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = log_dir / "leader-epoch-checkpoint"
    code, lines, _ = dump(capsys, path)
    assert code == 0
    assert lines == [f"Dumping {path}"] + [
        f"epoch: {epoch} startOffset: {epoch * 5 * RECORDS_PER_BATCH}" for epoch in range(4)
    ]
    path.write_text("0\n2\n0 0\n")
    code, lines, err = dump(capsys, path)
    assert (code, lines) == (1, [])
    assert err.count("\n") == 1 and "count says 2 entries, found 1" in err


# -- command line ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["dump-log"],
        ["dump-log", "--max-bytes", "x", "a.log"],
        ["dump-log", "--max-bytes", "0", "a.log"],
        ["dump-log", "--no-such-flag", "a.log"],
        ["no-such-command"],
    ],
)
def test_bad_arguments_exit_2_with_a_usage_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: odradek" in captured.err
    assert "Traceback" not in captured.err
    assert captured.err.splitlines()[-1].startswith("odradek")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"odradek {__version__}\n"


def test_unreadable_files_are_one_line_errors_and_the_rest_is_dumped(
    tmp_path: Path, log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / f"{0:020d}.log"
    directory.mkdir()
    missing = tmp_path / "00000000000000000000.index"
    odd = tmp_path / "notes.txt"
    odd.write_text("hello")
    unnamed = tmp_path / "segment.log"
    unnamed.write_bytes(b"")
    good = first(log_dir, ".log")
    code, lines, err = dump(capsys, missing, directory, odd, unnamed, good)
    assert code == 1
    assert lines[0] == f"Dumping {good}"
    assert err.splitlines() == [
        f"odradek dump-log: error: {missing}: No such file or directory",
        f"odradek dump-log: error: {directory}: not a regular file",
        f"odradek dump-log: error: {odd}: unknown file type (expected .log, .index, "
        ".timeindex, .snapshot, .checkpoint or leader-epoch-checkpoint)",
        f"odradek dump-log: error: {unnamed}: the file name does not start with a base offset",
    ]


def test_python_dash_m_runs_the_command(log_dir: Path) -> None:
    segment = first(log_dir, ".log")
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "dump-log", "--print-data-log", str(segment)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(f"Dumping {segment}\nLog starting offset: 0\nbaseOffset: 0 ")
    bad = subprocess.run(
        [sys.executable, "-m", "odradek", "dump-log", "--max-bytes"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr


# -- damage never escapes as a traceback ---------------------------------------------


@pytest.fixture(scope="module")
def sample_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    directory = write_log(
        tmp_path_factory.mktemp("fuzz") / "t-0", codecs=(NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD)
    )
    return {
        suffix: first(directory, suffix).read_bytes()
        for suffix in (".log", ".index", ".timeindex", ".snapshot")
    }


def dump_quietly(*args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["dump-log", *args])


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_damaged_files_never_raise(sample_files: dict[str, bytes], data: st.DataObject) -> None:
    suffix = data.draw(st.sampled_from(sorted(sample_files)), label="file")
    content = bytearray(sample_files[suffix])
    flips = st.tuples(st.integers(0, len(content) - 1), st.integers(1, 255))
    for position, mask in data.draw(st.lists(flips, max_size=4), label="flips"):
        content[position] ^= mask
    cut = data.draw(st.integers(0, len(content)), label="length")
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for name, original in sample_files.items():
            path = Path(directory) / f"{0:020d}{name}"
            path.write_bytes(bytes(content[:cut]) if name == suffix else original)
            paths.append(str(path))
        for flags in ([], ["--print-data-log"], ["--verify-index-only"]):
            assert dump_quietly(*flags, *paths) in (0, 1)


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from(sorted(COMPRESSION_NAMES)),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_malformed_records_behind_a_good_crc_never_raise(
    codec: int, flips: list[tuple[int, int]]
) -> None:
    data = bytearray(encode_batch(batch_records(0), compression=codec))
    for position, mask in flips:
        data[61 + position % (len(data) - 61)] ^= mask
    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"{0:020d}.log"
        path.write_bytes(bytes(data))
        assert dump_quietly("--print-data-log", str(path)) in (0, 1)
