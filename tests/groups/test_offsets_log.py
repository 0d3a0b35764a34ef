"""What the coordinator writes to ``__consumer_offsets``, read back with dump-log.

``odradek dump-log --print-data-log`` on the group's ``__consumer_offsets-N`` segment
(N = Java hashCode of the group id, masked, mod 50) decodes Kafka's key and value
schemas: offset commits with their offsets and metadata, the group's metadata record
with its members, and the tombstones DeleteGroups leaves.
"""

from __future__ import annotations

import subprocess
import sys

from tests.groups.wire import (
    OFFSETS_TOPIC,
    commit,
    coordinator_partition,
    create_topic,
    delete_groups,
    find_coordinator,
    leave,
    single_member_group,
    unique,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient


def dump(broker: BrokerProcess, group: str) -> str:
    segment = (
        broker.data_dir
        / f"{OFFSETS_TOPIC}-{coordinator_partition(group)}"
        / "00000000000000000000.log"
    )
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "dump-log", str(segment), "--print-data-log"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_dump_log_decodes_consumer_offsets(group_broker: BrokerProcess) -> None:
    group, doomed = unique("dump"), unique("dump-deleted")
    with WireClient(group_broker.bootstrap) as wire:
        find_coordinator(wire, 6, [group])
        topic = create_topic(wire, unique("dumped"), 2)
        member = single_member_group(wire, group, protocols=(("range", b"sub"),))
        commit(
            wire,
            9,
            group,
            {(topic, 0): 42, (topic, 1): 7},
            generation=member.generation,
            member_id=member.member_id,
            metadata="hello",
            leader_epoch=3,
        )
        leave(wire, 5, group, [(member.member_id, None)])
        commit(wire, 9, doomed, {(topic, 0): 5})
        delete_groups(wire, 2, [doomed])
    out = dump(group_broker, group)
    assert f"key: offset_commit::group={group},partition={topic}-0 payload: offset=42," in out
    assert "leaderEpoch=3,metadata=hello" in out
    assert f"key: offset_commit::group={group},partition={topic}-1 payload: offset=7," in out
    assert f"key: group_metadata::group={group} payload: protocolType=consumer,generation=1," in out
    assert member.member_id in out
    deleted = dump(group_broker, doomed)
    assert f"key: offset_commit::group={doomed},partition={topic}-0 payload: offset=5," in deleted
    assert f"key: offset_commit::group={doomed},partition={topic}-0 payload: <DELETE>" in deleted
