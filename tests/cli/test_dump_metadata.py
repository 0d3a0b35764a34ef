"""dump-log decodes __cluster_metadata records (Kafka's --cluster-metadata-decoder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.cli.main import main
from odradek.metadata.image import MetadataRecord
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
