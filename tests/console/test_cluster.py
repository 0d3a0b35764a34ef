"""The console over a three-node KRaft cluster: every broker listed with its log dir,
the quorum's leader and both followers, and a replicated topic's replicas, ISR and
size (read from its leader's DescribeLogDirs)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.console.test_app import row
from tests.support.kraft import Quorum

pytest.importorskip("starlette")
pytest.importorskip("httpx2")
from starlette.testclient import TestClient

from odradek.console.app import create_app
from odradek.console.source import ClusterSource

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.mark.slow  # three nodes to start (10-40 s on a busy 2-core machine)
def test_three_nodes_show_brokers_quorum_and_replicas(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    with Quorum(tmp_path / "cluster") as quorum:
        admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
        for future in admin.create_topics([NewTopic("replicated", 1, 3)]).values():
            future.result(30)
        producer = confluent_kafka.Producer({"bootstrap.servers": quorum.bootstrap, "acks": "all"})
        for n in range(20):
            producer.produce("replicated", value=b"x" * 100, key=str(n).encode())
        assert producer.flush(30) == 0
        app = create_app(ClusterSource(quorum.bootstrap), sample_interval_s=0)
        with TestClient(app) as client:
            page = client.get("/").text
            brokers = re.findall(r'<table id="brokers".*?</table>', page, re.S)[0]
            assert len(re.findall(r"<tr>", brokers)) == 1 + 3
            controller = _controller(page)
            for node_id in (1, 2, 3):
                host, port = quorum.broker_address(node_id).rsplit(":", 1)
                label = f"{node_id} controller" if node_id == controller else str(node_id)
                cells = row(page, "brokers", label)
                assert cells[1:3] == [host, port]
                assert str(quorum.data_dir(node_id)) in cells[4]
            roles = sorted(row(page, "quorum", str(n))[1] for n in (1, 2, 3))
            assert roles == ["Follower", "Follower", "Leader"]
            deadline = time.monotonic() + 30
            while True:  # the followers' ISR catches up with acks=all at once; sizes too
                topic = client.get("/topics/replicated").text
                partition = row(topic, "partitions", "0")
                in_sync = sorted(partition[3].split(", ")) == ["1", "2", "3"]
                if in_sync or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert sorted(partition[2].split(", ")) == ["1", "2", "3"]
            assert sorted(partition[3].split(", ")) == ["1", "2", "3"]
            assert partition[5:7] == ["0", "20"]
            assert partition[7].endswith("B") and partition[7] != "0 B"


def _controller(page: str) -> int:
    found = re.search(r'id="controller">(\d+)<', page)
    assert found
    return int(found.group(1))
