"""AlterPartitionReassignments and ListPartitionReassignments over a real socket.

The setup of test_controller_rpc.py: a real Controller serves the CONTROLLER plane on
loopback, ``RemoteControllerChannel`` forwards to it, ``LocalControllerChannel`` calls
it in-process. Both answer alike; a remote call returns only once the caller's
trailing image shows the new replica set; v0 cannot carry "no replication factor
change"; ListPartitionReassignments, asked with the tool's request, lists the ongoing
move from the node's image.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.cli.reassign_partitions import CLIENT_VERSIONS, _connected, _ongoing
from odradek.metadata import partition_rpc
from odradek.metadata.controller_client import ControllerClient, connector
from odradek.metadata.errors import ControllerError
from odradek.metadata.reassignment import ReassignmentRequest, ReassignmentResult
from odradek.metadata.topic_changes import NewTopic
from tests.metadata.test_controller_rpc import Setup, run
from tests.support.brokers import register_unfenced


def test_remote_and_local_answer_alike_and_the_remote_waits_for_the_image(
    tmp_path: Path,
) -> None:
    async def body(s: Setup) -> None:
        for b in (2, 3):
            await register_unfenced(s.controller, b)
        created = await s.local.create_topics(
            [NewTopic("t", assignments={0: (1, 2), 1: (1, 2)})], False
        )
        assert created == [None]
        move = [ReassignmentRequest("t", 0, (2, 3)), ReassignmentRequest("nope", 0, (1,))]
        assert await s.remote.alter_partition_reassignments(move, True) == [
            ReassignmentResult("t", 0),
            ReassignmentResult("nope", 0, "UNKNOWN_TOPIC_OR_PARTITION"),
        ]
        # returned once the trailing image shows the replica set (target first)
        shown = s.follower[0].topics["t"].partitions[0]
        assert shown.replicas == (2, 3, 1) and shown.adding_replicas == (3,)
        for channel in (s.remote, s.local):
            results = await channel.alter_partition_reassignments(
                [
                    ReassignmentRequest("t", 1, None),
                    ReassignmentRequest("t", 1, (1, 7)),
                    ReassignmentRequest("t", 1, (1, 2, 3)),
                ],
                False,
            )
            assert [r.error for r in results] == [
                "NO_REASSIGNMENT_IN_PROGRESS",
                "INVALID_REQUEST",  # the partition named twice
                "INVALID_REQUEST",
            ]
            (rf,) = await channel.alter_partition_reassignments(
                [ReassignmentRequest("t", 1, (1, 2, 3))], False
            )
            assert rf.error == "INVALID_REPLICATION_FACTOR"
            (bad,) = await channel.alter_partition_reassignments(
                [ReassignmentRequest("t", 1, (1, 7))], True
            )
            assert bad.error == "INVALID_REPLICA_ASSIGNMENT" and "7" in (bad.message or "")
        # the request's tool asks the controller listener what is in progress
        (voter,) = s.client._voters.values()
        async with _connected([(voter.host, voter.port)]) as connection:
            assert await _ongoing(connection, None) == {("t", 0): ((2, 3, 1), (3,))}
            assert await _ongoing(connection, [("t", 1), ("nope", 2)]) == {}
        # cancel through the remote channel
        assert await s.remote.alter_partition_reassignments(
            [ReassignmentRequest("t", 0, None)], True
        ) == [ReassignmentResult("t", 0)]
        # the original replicas in the order the reassigning set held them (as Kafka's
        # revert: the set is target first, so a shared replica now comes first)
        assert s.follower[0].topics["t"].partitions[0].replicas == (2, 1)
        assert CLIENT_VERSIONS[45] == partition_rpc.ALTER_REASSIGNMENTS_VERSIONS

    run(tmp_path, body)


def test_v0_cannot_forbid_a_replication_factor_change(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        await register_unfenced(s.controller, 2)
        assert await s.local.create_topics([NewTopic("t", assignments={0: (1,)})], False) == [None]
        voters = list(s.client._voters.values())
        old = ControllerClient(
            voters,
            lambda: 1,
            connector(client_id="old", versions={45: (0, 0)}),
            retry_backoff_s=0.02,
        )
        try:
            with pytest.raises(ControllerError) as caught:
                await partition_rpc.alter_partition_reassignments(
                    old, 5.0, [ReassignmentRequest("t", 0, (1, 2))], False
                )
            assert caught.value.code == "UNSUPPORTED_VERSION"
            assert await partition_rpc.alter_partition_reassignments(
                old, 5.0, [ReassignmentRequest("t", 0, (2,))], True
            ) == [ReassignmentResult("t", 0)]
        finally:
            await old.close()
        # broker 2 is registered and in sync with nothing: the move to (2,) waits for it
        state = s.controller.image.topics["t"].partitions[0]
        assert state.replicas == (2, 1) and state.adding_replicas == (2,)

    run(tmp_path, body)
