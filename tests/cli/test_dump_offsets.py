"""dump-log decodes __consumer_offsets records with Kafka's key/value schemas."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.cli.main import main
from odradek.coordinator.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from odradek.records.codec import Record, encode_batch
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log


def write_offsets_log(directory: Path) -> Path:
    log, _ = open_log(directory, LogConfig())
    member = MemberValue("m-1", "static-1", "client", "/10.0.0.1", 30_000, 10_000, b"s", b"a")
    records = [
        Record(
            0,
            1_000,
            encode_offset_key(OffsetKey("g", "t", 0)),
            encode_offset_value(OffsetValue(5, 2, "meta", 1_000)),
        ),
        Record(
            1,
            1_000,
            encode_group_key(GroupKey("g")),
            encode_group_value(GroupValue("consumer", 3, "range", "m-1", 1_000, (member,))),
        ),
        Record(2, 1_000, encode_offset_key(OffsetKey("g", "t", 1)), None),
        Record(3, 1_000, b"\x00\x09junk", b"x"),
    ]
    log.append_as_leader(encode_batch(records), 0)
    path = log.active_segment.log_path
    log.close()
    return path


def test_records_under_consumer_offsets_are_decoded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_offsets_log(tmp_path / "__consumer_offsets-7")
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "key: offset_commit::group=g,partition=t-0 payload: offset=5,leaderEpoch=2,"
        "metadata=meta,commitTimestamp=1000" in out
    )
    assert "key: group_metadata::group=g payload: protocolType=consumer,generation=3," in out
    assert "m-1[static-1](client@/10.0.0.1,session=10000,rebalance=30000,assignment=1B)" in out
    assert "key: offset_commit::group=g,partition=t-1 payload: <DELETE>" in out
    assert "<undecodable key: unknown key version 9>" in out


def test_offsets_decoder_flag_elsewhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_offsets_log(tmp_path / "copy-0")
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    assert "offset_commit::" not in capsys.readouterr().out
    assert main(["dump-log", "--print-data-log", "--offsets-decoder", str(path)]) == 0
    assert "offset_commit::group=g,partition=t-0" in capsys.readouterr().out
