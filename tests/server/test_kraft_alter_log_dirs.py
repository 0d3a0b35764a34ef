"""A follower's replica moves between its broker's log dirs on three ``odradek serve``
processes (KIP-113) while an acks=all idempotent producer writes.

Broker 2 has two log dirs. ``odradek reassign-partitions --execute`` with a plan whose
``log_dirs`` name broker 2's second dir (the replica set unchanged, [1, 2, 3]) sends
broker 2 AlterReplicaLogDirs; its future log fills from its current one while its
fetcher keeps appending the leader's batches to the current one, and the swap happens
between two fetches. ``--verify`` reports the replica's move completed; broker 2's
segment files, now in the second dir, are byte-identical to the leader's; it stays in
the ISR; a consumer reads every acknowledged record once, in order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.server.test_kraft_reassignment import (
    FIRST,
    PROPERTIES,
    TOPIC,
    Writer,
    create,
    value,
    wait_until,
)
from tests.support.kraft import Quorum, odradek, read_partition

pytestmark = pytest.mark.slow


def files_in(directory: Path) -> dict[str, bytes]:
    if not directory.is_dir():
        return {}
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))}


def test_a_follower_replica_moves_to_its_brokers_other_dir(tmp_path: Path) -> None:
    second = tmp_path / "node2b"
    both = f"{tmp_path / 'q' / 'node2'},{second}"
    quorum = Quorum(tmp_path / "q", properties=PROPERTIES, node_properties={2: {"log.dirs": both}})
    quorum.nodes[2].data_dir = Path(both)  # serve's --data-dir is log.dirs: both dirs
    with quorum:
        admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
        create(admin, [1, 2, 3])
        writer = Writer(quorum.bootstrap)
        writer.start()
        wait_until(lambda: len(writer.acked) >= FIRST, 60, f"{FIRST} records acknowledged")
        assert (quorum.data_dir(2) / f"{TOPIC}-0").is_dir()

        plan = tmp_path / "plan.json"
        entry = {
            "topic": TOPIC,
            "partition": 0,
            "replicas": [1, 2, 3],
            "log_dirs": ["any", str(second), "any"],
        }
        plan.write_text(json.dumps({"version": 1, "partitions": [entry]}))
        base = ["reassign-partitions", "--bootstrap-server", quorum.bootstrap]
        done = odradek(*base, "--execute", "--reassignment-json-file", str(plan), timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == (
            f"Successfully started log directory move for: {TOPIC}-0-2"
        )

        def moved() -> bool:
            out = odradek(*base, "--verify", "--reassignment-json-file", str(plan), timeout=60)
            return f"Reassignment of replica {TOPIC}-0-2 completed successfully." in out.stdout

        wait_until(moved, 90, "broker 2's replica moved")
        after = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= after + 200, 60, "records after the move")
        writer.halt.set()
        writer.join(120)
        assert not writer.is_alive() and writer.errors == []
        assert not (quorum.data_dir(2) / f"{TOPIC}-0").exists()

        def identical() -> bool:
            leader = files_in(quorum.data_dir(1) / f"{TOPIC}-0")
            return bool(leader) and files_in(second / f"{TOPIC}-0") == leader

        wait_until(identical, 60, "broker 2's moved replica byte-identical to the leader's")
        metadata = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
        assert sorted(metadata.isrs) == [1, 2, 3]

        values = read_partition(quorum.bootstrap, TOPIC, len(writer.acked), "log-dir-check")
        assert values == writer.acked
        assert values == [value(i) for i in range(len(values))]
