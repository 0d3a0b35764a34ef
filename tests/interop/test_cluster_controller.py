"""Real clients against three combined KRaft nodes name the quorum's leader as controller.

confluent-kafka (Metadata's controller id and DescribeCluster), kafka-python
(DescribeCluster through ``KafkaAdminClient``) and kcat (``-L``, the broker marked
``(controller)``) must each report the node the quorum itself reports as leader
(DescribeQuorum through the controller listeners), before and after kill -9 of that
leader. The brokers each client lists are not asserted: which brokers Metadata names
follows from broker registration, which is built separately. Every process is stopped
by pid.
"""

from __future__ import annotations

import gc
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient

from tests.support.kraft import Quorum

QUIET = {"log_level": 0}
AGREE_TIMEOUT_S = 60.0


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[Quorum]:
    with Quorum(
        tmp_path,
        properties={
            "controller.quorum.election.timeout.ms": "500",
            "controller.quorum.fetch.timeout.ms": "2000",
        },
    ) as running:
        yield running


def confluent_metadata_controller(bootstrap: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    return int(admin.list_topics(timeout=10).controller_id)


def confluent_describe_cluster_controller(bootstrap: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    description = admin.describe_cluster(request_timeout=10).result(timeout=15)
    return int(description.controller.id) if description.controller is not None else -1


def kafka_python_controller(bootstrap: str) -> int:
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap.split(","),
        request_timeout_ms=10_000,
    )
    try:
        return int(admin.describe_cluster()["controller_id"])
    finally:
        admin.close()


def kcat_controller(bootstrap: str) -> int:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (make kcat)")
    listing = subprocess.run(
        ["kcat", "-L", "-b", bootstrap, "-m", "10"], capture_output=True, text=True, timeout=30
    )
    found = re.search(r"broker (\d+) at \S+ \(controller\)", listing.stdout)
    return int(found.group(1)) if found else -1


CLIENTS: dict[str, Callable[[str], int]] = {
    "confluent-kafka metadata": confluent_metadata_controller,
    "confluent-kafka describe_cluster": confluent_describe_cluster_controller,
    "kafka-python describe_cluster": kafka_python_controller,
    "kcat -L": kcat_controller,
}


def each_client_sees(bootstrap: str, leader: int) -> None:
    """Every client reports ``leader`` (asked again while the brokers catch up)."""
    deadline = time.monotonic() + AGREE_TIMEOUT_S
    for name, ask in CLIENTS.items():
        while True:
            try:
                seen: int | str = ask(bootstrap)
            except Exception as error:  # a client whose broker just died: ask again
                seen = f"{type(error).__name__}: {error}"
            finally:
                gc.collect()
            if seen == leader:
                break
            assert time.monotonic() < deadline, f"{name} reports {seen}, the quorum {leader}"
            time.sleep(0.5)


def test_clients_report_the_quorum_leader_as_controller_before_and_after_a_kill(
    quorum: Quorum,
) -> None:
    leader, epoch = quorum.wait_for_leader(30)
    each_client_sees(quorum.bootstrap, leader)

    quorum.kill(leader)
    survivors = [n for n in quorum.node_ids if n != leader]
    new_leader, new_epoch = quorum.wait_for_leader(30, frozenset({leader}), survivors)
    assert new_epoch > epoch
    alive = ",".join(quorum.broker_address(n) for n in survivors)
    each_client_sees(alive, new_leader)
    # The killed node comes back as a follower and names the same controller.
    quorum.start_node(leader)
    each_client_sees(quorum.broker_address(leader), new_leader)
