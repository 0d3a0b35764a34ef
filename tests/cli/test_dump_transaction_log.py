"""dump-log decodes __transaction_state records (Kafka's --transaction-log-decoder) and
shows transaction markers: records built with the coordinator's own codec, a tombstone,
and malformed keys and values, which are noted on their line while the dump goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.cli import transaction_log_decoder
from odradek.cli.main import main
from odradek.coordinator.transaction.records import TransactionValue, encode_key, encode_value
from odradek.records.codec import Record, encode_batch
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log

ONGOING = TransactionValue(
    producer_id=7,
    producer_epoch=3,
    timeout_ms=60_000,
    status=1,
    partitions=(("t", (0, 1)), ("u", (2,))),
    last_update_ms=1_700_000_000_500,
    start_ms=1_700_000_000_000,
)
EMPTY = TransactionValue(8, 0, 30_000, 0, None, 1_000, -1)


def test_describe_ongoing_v1_and_v0() -> None:
    expected = (
        "transaction_metadata::transactionalId=app-1",
        "producerId:7,producerEpoch:3,state=Ongoing,partitions=[t-0,t-1,u-2],"
        "txnLastUpdateTimestamp=1700000000500,txnTimeoutMs=60000",
    )
    for version in (0, 1):
        got = transaction_log_decoder.describe(encode_key("app-1"), encode_value(ONGOING, version))
        assert got == expected


def test_describe_every_written_state() -> None:
    names = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"]
    for status, name in enumerate(names):
        value = TransactionValue(1, 0, 10, status, (("t", (0,)),), 5, 4)
        _, payload = transaction_log_decoder.describe(encode_key("x"), encode_value(value))
        assert f",state={name}," in payload


def test_empty_state_has_no_partitions_and_tombstone_is_delete() -> None:
    _, payload = transaction_log_decoder.describe(encode_key("e"), encode_value(EMPTY))
    assert payload == (
        "producerId:8,producerEpoch:0,state=Empty,partitions=[],"
        "txnLastUpdateTimestamp=1000,txnTimeoutMs=30000"
    )
    assert transaction_log_decoder.describe(encode_key("gone"), None) == (
        "transaction_metadata::transactionalId=gone",
        "<DELETE>",
    )


def test_malformed_records_are_noted_not_raised() -> None:
    key, payload = transaction_log_decoder.describe(b"\x00\x09junk", b"x")
    assert key.startswith("<unreadable transaction log key: ") and payload == "?"
    key, payload = transaction_log_decoder.describe(encode_key("a"), encode_value(ONGOING)[:9])
    assert key == "transaction_metadata::transactionalId=a"
    assert payload.startswith("<unreadable transaction log value: ")
    bad_status = bytearray(encode_value(ONGOING))
    bad_status[16] = 6  # Dead is never written
    _, payload = transaction_log_decoder.describe(encode_key("a"), bytes(bad_status))
    assert payload.startswith("<unreadable transaction log value: ")
    assert transaction_log_decoder.describe(None, b"x")[0] == "null"


def write_transaction_log(directory: Path) -> Path:
    log, _ = open_log(directory, LogConfig())
    records = [
        Record(0, 1_000, encode_key("app-1"), encode_value(ONGOING)),
        Record(1, 1_000, encode_key("app-2"), encode_value(EMPTY, 0)),
        Record(2, 1_000, encode_key("old"), None),
        Record(3, 1_000, b"\x00\x09junk", b"x"),
        Record(4, 1_000, encode_key("app-3"), b"\x00\x01\x00"),
    ]
    log.append_as_leader(encode_batch(records), 0)
    path = log.active_segment.log_path
    log.close()
    return path


def test_dump_under_transaction_state_decodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_transaction_log(tmp_path / "__transaction_state-3")
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(lines) == 5
    assert lines[0].endswith(
        "key: transaction_metadata::transactionalId=app-1 payload: producerId:7,"
        "producerEpoch:3,state=Ongoing,partitions=[t-0,t-1,u-2],"
        "txnLastUpdateTimestamp=1700000000500,txnTimeoutMs=60000"
    )
    assert "transactionalId=app-2 payload: producerId:8,producerEpoch:0,state=Empty," in lines[1]
    assert lines[2].endswith("key: transaction_metadata::transactionalId=old payload: <DELETE>")
    assert "key: <unreadable transaction log key: " in lines[3]
    assert "transactionalId=app-3 payload: <unreadable transaction log value: " in lines[4]


def test_decoder_flag_elsewhere_implies_print_data_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_transaction_log(tmp_path / "copy-0")
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    assert "transaction_metadata::" not in capsys.readouterr().out
    assert main(["dump-log", "--transaction-log-decoder", str(path)]) == 0
    out = capsys.readouterr().out
    assert "key: transaction_metadata::transactionalId=app-1 payload: producerId:7," in out


def test_markers_are_shown_as_end_txn_markers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, _ = open_log(tmp_path / "t-0", LogConfig())
    log.append_marker(99, 0, 4, True, 0)
    log.append_marker(99, 0, 5, False, 0)
    path = log.active_segment.log_path
    log.close()
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    out = capsys.readouterr().out
    assert "producerId: 99 producerEpoch: 0" in out
    assert "isTransactional: true isControl: true" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch: 4" in out
    assert "endTxnMarker: ABORT coordinatorEpoch: 5" in out
