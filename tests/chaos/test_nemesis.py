"""The replicated run's pure parts: the nemesis schedule and the segment-file reader."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from odradek.records.codec import Record, encode_batch
from odradek.storage.log_config import LogConfig
from odradek.storage.log_loader import open_log
from tests.chaos.nemesis import LEADER, MIXES, NETWORK_KINDS, NemesisPlan, schedule
from tests.chaos.replication import read_replica


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_a_schedule_is_seeded_uses_its_mix_and_ends_before_the_quiet_tail(mix: str) -> None:
    plan = NemesisPlan(duration_s=120.0)
    faults = schedule(7, plan, mix, nodes=3, partitions=3)
    assert faults == schedule(7, plan, mix, nodes=3, partitions=3)
    assert faults != schedule(8, plan, mix, nodes=3, partitions=3)
    assert {f.kind for f in faults} == set(MIXES[mix])  # each kind at least once
    assert all(f.kind in MIXES[mix] for f in faults)
    moments = [f.at_s for f in faults]
    assert moments == sorted(moments) and moments[0] == plan.first_after_s
    for fault in faults:
        assert fault.at_s + fault.hold_s <= plan.duration_s - plan.quiet_s
        assert fault.target == LEADER or 0 <= fault.target < 3
        assert 1 <= fault.other < 3 and 0 <= fault.partition < 3
        bounds = plan.cut_s if fault.kind in NETWORK_KINDS else None
        if bounds is not None:
            assert bounds[0] <= fault.hold_s <= bounds[1]


def test_most_faults_aim_at_a_partition_leader() -> None:
    faults = [
        f
        for seed in range(20)
        for f in schedule(seed, NemesisPlan(120.0, leader=0.7), "mixed", 3, 3)
    ]
    share = sum(f.target == LEADER for f in faults) / len(faults)
    assert 0.5 < share < 0.9


def test_read_replica_gives_the_batches_a_log_wrote_byte_for_byte(tmp_path: Path) -> None:
    # small segments, so batches are read across several files
    log, _ = open_log(tmp_path / "t-0", LogConfig(segment_bytes=2048))
    now = int(time.time() * 1000)
    for i in range(40):
        records = [Record(j, now, b"k%d" % j, b"v%d-%d" % (i, j) * 10) for j in range(1 + i % 4)]
        log.append_as_leader(encode_batch(records), leader_epoch=3 + i // 20)
    written = list(log.read_batches(log.log_start_offset))
    log.close()
    assert len(list((tmp_path / "t-0").glob("*.log"))) > 1
    found = read_replica(tmp_path / "t-0")
    assert len(found) == len(written) == 40
    offset = 0
    for batch, raw in zip(found, written, strict=True):
        assert batch.base_offset == offset == int.from_bytes(raw[:8], "big")
        offset = batch.last_offset + 1
    assert offset == sum(1 + i % 4 for i in range(40))
    assert [b.leader_epoch for b in found] == [3 + i // 20 for i in range(40)]
    assert len({b.digest for b in found}) == 40
    # one byte changed in the middle of a segment is a different digest there only
    first = sorted((tmp_path / "t-0").glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[100] ^= 0xFF
    first.write_bytes(bytes(data))
    damaged = read_replica(tmp_path / "t-0")
    assert [b != d for b, d in zip(found, damaged, strict=True)].count(True) == 1
