"""Metadata restart benchmark: start time with a 100,000-record metadata log, with and
without a snapshot (KIP-630, ``odradek/metadata/snapshotter.py``).

Run: ``make bench`` (every bench script) or
``.venv/bin/python bench/metadata_restart.py [--quick]``.

What is measured, and how: a data dir is formatted by one ``odradek serve`` run, then
its ``__cluster_metadata-0`` is given 100,000 records offline, written as the
controller writes them (JSON records in batches of 100, fsynced, recovery point
checkpointed as a clean stop leaves it; building that through the wire would take
100,000 fsynced requests). Two logs:

- ``churn``: 1,000 topics, then 98,000 config changes on them (retention.ms set over
  and over): the image is ~2,000 records however long the history;
- ``live``: 50,000 topics of one partition (100,000 records): the image is as large
  as the log, so a snapshot only saves what reading the log costs beyond the records.

Partitions are assigned to another broker id, so a start creates no partition
directories and the time is the metadata's. Each case starts ``odradek serve`` on a
fresh copy of the dir, once without a snapshot and once with one of the same image
written beside the log, and reports the time from exec to the ``odradek ready`` line
(median of the rounds), and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import (
    REPO,
    finish,
    load_average,
    read_line,
    show_load,
    stop_process,
    warn_if_busy,
)
from odradek.metadata.image import MetadataRecord
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.snapshotter import write_snapshot
from odradek.metadata.writer import replay_log
from odradek.raft.snapshots import FileSnapshotStore
from odradek.records.codec import Record, encode_batch
from odradek.server.metadata_log import METADATA_LOG_CONFIG, METADATA_LOG_DIR
from odradek.storage.checkpoint import (
    RECOVERY_POINT_CHECKPOINT,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from odradek.storage.log_loader import open_log

RECORDS = 100_000
BATCH_RECORDS = 100
OTHER_BROKER = 99  # replicas live elsewhere: no partition directories are created
TIMESTAMP_MS = 1_700_000_000_000


def serve(data_dir: Path) -> tuple[float, subprocess.Popen[bytes]]:
    """Start ``odradek serve``; seconds to its ready line, and the process."""
    log_path = data_dir.parent / f"{data_dir.name}.log"
    started = time.perf_counter()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "odradek",
                "serve",
                "--data-dir",
                str(data_dir),
                "--listen",
                "127.0.0.1:0",
                "--log-level",
                "WARNING",
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=REPO,
        )
    try:
        line = read_line(process, "odradek serve", log_path.read_text, 120.0)
    except BaseException:
        stop_process(process)
        raise
    if not line.startswith("odradek ready"):
        stop_process(process)
        raise RuntimeError(f"odradek serve said {line!r}")
    return time.perf_counter() - started, process


def topic_records(index: int) -> list[MetadataRecord]:
    topic_id = str(uuid.UUID(int=index + 1))
    return [
        MetadataRecord("Topic", {"name": f"topic-{index}", "topic_id": topic_id}),
        MetadataRecord(
            "Partition",
            {
                "topic_id": topic_id,
                "partition": 0,
                "replicas": [OTHER_BROKER],
                "isr": [OTHER_BROKER],
                "leader": OTHER_BROKER,
                "leader_epoch": 0,
                "partition_epoch": 0,
            },
        ),
    ]


def history(case: str) -> list[MetadataRecord]:
    if case == "live":
        return [r for index in range(RECORDS // 2) for r in topic_records(index)]
    records = [r for index in range(1000) for r in topic_records(index)]
    value = 0
    while len(records) < RECORDS:
        value += 1
        records.append(
            MetadataRecord(
                "Config",
                {
                    "resource_type": "topic",
                    "resource_name": f"topic-{value % 1000}",
                    "name": "retention.ms",
                    "value": str(86_400_000 + value),
                },
            )
        )
    return records


def prepare(base: Path, case: str) -> Path:
    """A formatted data dir whose metadata log holds the case's 100,000 records."""
    data_dir = base / f"{case}-template"
    _, process = serve(data_dir)  # formats the dir and registers the broker
    stop_process(process)
    append_history(data_dir, history(case))
    return data_dir


def append_history(data_dir: Path, records: list[MetadataRecord], epoch: int | None = None) -> int:
    """Append ``records`` to a stopped node's metadata log, in the log's latest epoch (or
    ``epoch``), as its leader would have written them; the new log end offset."""
    log, _ = open_log(data_dir / METADATA_LOG_DIR, METADATA_LOG_CONFIG)
    epoch = epoch if epoch is not None else max(log.latest_epoch or 1, 1)
    for first in range(0, len(records), BATCH_RECORDS):
        chunk = records[first : first + BATCH_RECORDS]
        encoded = [Record(i, TIMESTAMP_MS, *r.encode()) for i, r in enumerate(chunk)]
        log.append_as_leader(encode_batch(encoded), epoch)
    log.flush()
    end = log.log_end_offset
    log.close()
    points = read_offset_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT)
    points[("__cluster_metadata", 0)] = end
    write_offset_checkpoint(data_dir / RECOVERY_POINT_CHECKPOINT, points)
    return end


def add_snapshot(data_dir: Path) -> int:
    """Write the snapshot a running broker would have written of this log; its records."""
    directory = data_dir / METADATA_LOG_DIR
    log, _ = open_log(directory, METADATA_LOG_CONFIG)
    image = replay_log(log, MetadataLoader())
    log.close()
    write_snapshot(FileSnapshotStore(directory), image, 1, TIMESTAMP_MS)
    return len(image.to_records())


def start_time(template: Path, copy: Path, snapshot: bool) -> float:
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(template, copy)
    if snapshot:
        add_snapshot(copy)
    seconds, process = serve(copy)
    stop_process(process)
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round per case")
    parser.add_argument("--strict", action="store_true", help="accepted for bench/run.py")
    parser.add_argument("--verbose", action="store_true", help="accepted for bench/run.py")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else 3
    started = time.perf_counter()
    load_start = load_average()
    print(f"load average at start: {show_load(load_start)}", flush=True)
    warn_if_busy(load_start)
    with tempfile.TemporaryDirectory(prefix="odradek-metasnap-") as tmp:
        base = Path(tmp)
        _, process = serve(base / "empty")
        stop_process(process)
        empty = statistics.median(
            start_time(base / "empty", base / "run", False) for _ in range(rounds)
        )
        print(f"empty metadata log: start {empty:.2f} s", flush=True)
        print(
            f"{'case':6} {'log records':>11} {'snapshot records':>16} {'no snapshot s':>13} "
            f"{'snapshot s':>10} {'ratio':>6}",
            flush=True,
        )
        for case in ("churn", "live"):
            template = prepare(base, case)
            plain = [start_time(template, base / "run", False) for _ in range(rounds)]
            with_snapshot = [start_time(template, base / "run", True) for _ in range(rounds)]
            size = add_snapshot(template)
            a, b = statistics.median(plain), statistics.median(with_snapshot)
            print(
                f"{case:6} {RECORDS:11,d} {size:16,d} {a:13.2f} {b:10.2f} {b / a:6.2f}",
                flush=True,
            )
    return finish("metadata_restart", started, [], 0, args.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
