"""dump-log decodes __cluster_metadata records (Kafka's --cluster-metadata-decoder) and
metadata snapshots (``<offset>-<epoch>.checkpoint``: header, batches, records, footer;
a damaged one is one error line and exit status 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.cli.main import main
from odradek.metadata.image import MetadataImage, MetadataRecord
from odradek.metadata.snapshotter import write_snapshot
from odradek.raft.snapshots import FileSnapshotStore
from odradek.records.codec import Record, encode_batch
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log


def write_metadata_log(directory: Path) -> Path:
    log, _ = open_log(directory, LogConfig())
    changes = [
        MetadataRecord("Topic", {"name": "orders", "topic_id": "AAAAAAAAAAAAAAAAAAAAAA"}),
        MetadataRecord("RegisterBroker", {"broker_id": 1, "endpoints": [], "rack": None}),
    ]
    records = [Record(i, 1_000, *change.encode()) for i, change in enumerate(changes)]
    records.append(Record(2, 1_000, b"Topic", b"{not json"))
    records.append(Record(3, 1_000, None, b"{}"))
    log.append_as_leader(encode_batch(records), 0)
    log.flush()
    path = log.segments[0].log_path
    log.close()
    return path


def test_metadata_dir_is_decoded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_metadata_log(tmp_path / "__cluster_metadata-0")
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    payloads = [line.split(" payload: ", 1)[1] for line in lines]
    assert json.loads(payloads[0]) == {
        "type": "Topic",
        "data": {"name": "orders", "topic_id": "AAAAAAAAAAAAAAAAAAAAAA"},
    }
    assert json.loads(payloads[1])["type"] == "RegisterBroker"
    assert payloads[2].startswith("<undecodable metadata record")
    assert payloads[3] == "<metadata record without a key or value>"


def test_decoder_flag_elsewhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_metadata_log(tmp_path / "copy-0")
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    assert '"type":"Topic"' not in capsys.readouterr().out
    assert main(["dump-log", "--print-data-log", "--cluster-metadata-decoder", str(path)]) == 0
    assert '"type":"Topic"' in capsys.readouterr().out


# -- metadata snapshots (KIP-630 .checkpoint files) ---------------------------------------


def write_metadata_snapshot(directory: Path) -> Path:
    directory.mkdir(parents=True)
    image = MetadataImage().apply(
        [
            MetadataRecord(
                "Topic", {"name": "orders", "topic_id": "00000000-0000-0000-0000-000000000007"}
            ),
            MetadataRecord("RegisterBroker", {"broker_id": 1, "endpoints": [], "rack": None}),
        ],
        41,
    )
    write_snapshot(FileSnapshotStore(directory), image, 3, 1_700_000_000_000)
    (path,) = directory.glob("*.checkpoint")
    return path


def test_a_metadata_snapshot_is_dumped_with_header_footer_and_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_metadata_snapshot(tmp_path / "__cluster_metadata-0")
    assert path.name == "00000000000000000042-0000000003.checkpoint"
    assert main(["dump-log", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Snapshot end offset: 42 epoch: 3" in out
    assert "Snapshot header: version: 0 lastContainedLogTimestamp: 1700000000000" in out
    assert "Snapshot footer: version: 0" in out and "Records: 2" in out
    assert out.count("baseOffset: ") == 3 and "payload" not in out
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert "controlType: SNAPSHOT_HEADER(3)" in lines[0]
    assert "controlType: SNAPSHOT_FOOTER(4)" in lines[-1]
    payloads = [json.loads(line.split(" payload: ", 1)[1]) for line in lines[1:-1]]
    assert [p["type"] for p in payloads] == ["RegisterBroker", "Topic"]
    assert payloads[0]["data"]["broker_epoch"] == 41


def test_a_damaged_metadata_snapshot_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_metadata_snapshot(tmp_path / "__cluster_metadata-0")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert main(["dump-log", str(path)]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"odradek dump-log: error: {path}: ") and "Traceback" not in line
