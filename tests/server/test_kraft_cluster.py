"""Three combined KRaft nodes as real ``odradek serve`` processes.

Each node gets an ``config/cluster/``-style properties file (process.roles=broker,
controller, controller.quorum.voters naming three fixed free ports, a CONTROLLER
listener on its own one), its dirs are formatted with one cluster id (``odradek storage
format``), and the three are launched together (a node is ready only once a majority
elected a leader and its loader caught up): the ``quorum`` fixture, tests/support/kraft.py.
``odradek metadata-quorum --bootstrap-controller`` then shows one leader and three
voters; kill -9 of the leader (by pid) gives a new leader; SIGTERM of a leader hands
leadership over at once (EndQuorumEpoch), well before the followers' fetch timeout would.

Every broker forwards metadata changes to the active controller over the controller
listeners, so CreateTopics on a follower's broker listener succeeds (the forwarding
itself, with real admin clients, is test_controller_forwarding.py's). Every process
is stopped by the test, by pid.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.support.broker import BrokerProcess
from tests.support.kraft import NODE_IDS, Quorum, odradek
from tests.support.wire import WireClient, create_topic

# The followers wait this long without a leader before electing: SIGTERM must beat it.
FETCH_TIMEOUT_MS = 4000
ELECTION_TIMEOUT_MS = 500
TIMEOUTS = {
    "controller.quorum.election.timeout.ms": str(ELECTION_TIMEOUT_MS),
    "controller.quorum.fetch.timeout.ms": str(FETCH_TIMEOUT_MS),
}


def quorum_status(node: BrokerProcess) -> dict[str, str] | None:
    """metadata-quorum describe --status through ``node``'s controller listener."""
    result = odradek(
        "metadata-quorum",
        "--bootstrap-controller",
        node.urls["CONTROLLER"],
        "describe",
        "--status",
        timeout=20,
    )
    if result.returncode != 0:
        return None
    fields = {}
    for line in result.stdout.splitlines():
        label, _, value = line.partition(":")
        fields[label] = value.strip()
    return fields


def wait_for_leader(
    nodes: list[BrokerProcess], timeout_s: float, not_in: frozenset[int] = frozenset()
) -> tuple[int, int]:
    """(leader id, epoch) once a node outside ``not_in`` leads, asked of ``nodes``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        for node in nodes:
            last = quorum_status(node)
            if last is not None and last.get("LeaderId", "").isdigit():
                leader = int(last["LeaderId"])
                if leader not in not_in:
                    return leader, int(last["LeaderEpoch"])
        time.sleep(0.1)
    raise AssertionError(f"no new leader within {timeout_s} s: {last}")


@pytest.mark.quorum(properties=TIMEOUTS)
def test_three_nodes_elect_and_fail_over(quorum: Quorum) -> None:
    nodes = quorum.nodes
    status = quorum_status(nodes[1])
    assert status is not None
    leader, epoch = int(status["LeaderId"]), int(status["LeaderEpoch"])
    assert leader in NODE_IDS
    assert [v["id"] for v in json.loads(status["CurrentVoters"])] == list(NODE_IDS)
    # Every node reports the same leader.
    for node in nodes.values():
        seen = quorum_status(node)
        assert seen is not None and int(seen["LeaderId"]) == leader

    # A follower's broker forwards to the active controller (test_controller_forwarding.py
    # covers the admin APIs with real clients).
    follower = next(n for i, n in nodes.items() if i != leader)
    with WireClient(follower.bootstrap) as client:
        assert create_topic(client, "on-a-follower").error_code == ErrorCode.none
    with WireClient(nodes[leader].bootstrap) as client:
        assert create_topic(client, "on-the-leader").error_code == ErrorCode.none

    # kill -9 of the leader: the other two elect a new one.
    nodes[leader].kill()
    survivors = [n for i, n in nodes.items() if i != leader]
    new_leader, new_epoch = wait_for_leader(survivors, 30.0, not_in=frozenset({leader}))
    assert new_epoch > epoch
    # The killed node comes back as a follower.
    quorum.start_node(leader)
    status = quorum_status(nodes[leader])
    assert status is not None and int(status["LeaderId"]) == new_leader

    # SIGTERM of the leader: it resigns and the others elect at once, well before
    # their fetch timeout.
    begun = time.monotonic()
    assert nodes[new_leader].stop() == 0
    others = [n for i, n in nodes.items() if i != new_leader]
    third, third_epoch = wait_for_leader(others, 30.0, not_in=frozenset({new_leader}))
    took_s = time.monotonic() - begun
    assert third_epoch > new_epoch
    assert took_s < FETCH_TIMEOUT_MS / 1000, f"the hand-over took {took_s:.1f} s"

    # The new active controller writes, on top of what the first one committed.
    deadline = time.monotonic() + 10
    with WireClient(nodes[third].bootstrap) as client:
        while (error := create_topic(client, "after-failover").error_code) != ErrorCode.none:
            assert error == ErrorCode.not_controller, error
            assert time.monotonic() < deadline, "the new leader never accepted a write"
            time.sleep(0.1)
        assert create_topic(client, "on-the-leader").error_code == (ErrorCode.topic_already_exists)


def test_a_node_waiting_for_its_quorum_stops_on_sigterm(tmp_path: Path) -> None:
    quorum = Quorum(tmp_path, properties=TIMEOUTS)  # three voters formatted, none started
    quorum.launch_node(1)
    node = quorum.nodes[1]
    try:
        # Alone: no majority, so never ready. Wait until it is waiting (its signal
        # handlers are installed by then; a loaded machine may take seconds to get there).
        deadline = time.monotonic() + 60
        while "odradek.raft: node 1 starts as" not in node.log():
            assert time.monotonic() < deadline and node.alive(), node.log()
            time.sleep(0.1)
        time.sleep(1)
        assert node.alive()
        begun = time.monotonic()
        assert node.stop() == 1
        assert time.monotonic() - begun < 5
        assert "odradek serve: stopped before it was ready" in node.log()
        assert "Traceback" not in node.log()
    finally:
        quorum.close()
