"""AlterPartition and ElectLeaders through both channels, over a real socket.

The setup of test_controller_rpc.py: a real Controller serves the CONTROLLER plane on
loopback; ``RemoteControllerChannel`` forwards to it and ``LocalControllerChannel``
calls it in-process. Both must give the same answers (``IsrChannel`` semantics:
request-level failures as that error in every outcome), and a remote ElectLeaders
returns only once the caller's trailing image shows the new leader.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.metadata import partition_rpc
from odradek.metadata.broker_heartbeats import BrokerHeartbeat
from odradek.metadata.controller_client import ControllerClient, connector
from odradek.metadata.elections import PREFERRED, UNCLEAN, ElectionResult
from odradek.metadata.errors import ControllerError
from odradek.metadata.topic_changes import NewTopic
from odradek.replica.interfaces import IsrChannel, IsrOutcome, IsrProposal
from tests.metadata.test_controller_rpc import Setup, run
from tests.support.brokers import register_unfenced


async def three_replicas(s: Setup) -> dict[int, int]:
    """Brokers 2 and 3 beside 1, and topic "t" with partition 0 on (1, 2, 3)."""
    epochs = {1: s.controller.image.brokers[1].epoch}
    for b in (2, 3):
        epochs[b] = await register_unfenced(s.controller, b)
    assert await s.local.create_topics([NewTopic("t", assignments={0: (1, 2, 3)})], False) == [None]
    return epochs


def test_alter_partition_remote_and_local_answer_alike(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        channels: list[IsrChannel] = [s.remote, s.local]  # both are IsrChannels (mypy)
        assert len(channels) == 2
        epochs = await three_replicas(s)
        topic = s.controller.image.topics["t"]

        def shrink(isr: tuple[int, ...], partition_epoch: int, **epochs_named: int) -> IsrProposal:
            named = {int(k[1:]): v for k, v in epochs_named.items()}
            return IsrProposal(topic.topic_id, 0, 0, partition_epoch, isr, named)

        (out,) = await s.remote.alter_partition(1, epochs[1], [shrink((1, 2), 0)])
        assert out == IsrOutcome("NONE", 1, 0, 1, (1, 2))
        assert s.controller.image.topics["t"].partitions[0].isr == (1, 2)
        for channel in (s.remote, s.local):
            # stale partition epoch; a repeat of what is in place; an unknown topic
            outcomes = await channel.alter_partition(
                1,
                epochs[1],
                [
                    shrink((1,), 0),
                    IsrProposal(topic.topic_id.__class__(int=7), 0, 0, 0, (1,), {}),
                ],
            )
            assert [o.error for o in outcomes] == ["INVALID_UPDATE_VERSION", "UNKNOWN_TOPIC_ID"]
            assert outcomes[0] == IsrOutcome("INVALID_UPDATE_VERSION", 1, 0, 1, (1, 2))
            # the request as a whole: every outcome carries the error
            outcomes = await channel.alter_partition(
                1, epochs[1] + 50, [shrink((1,), 1), shrink((1, 3), 1)]
            )
            assert [o.error for o in outcomes] == ["STALE_BROKER_EPOCH"] * 2
            # KIP-903 (v3 carries each member's broker epoch): an old one is refused
            (out,) = await channel.alter_partition(
                1, epochs[1], [shrink((1, 2, 3), 1, b3=epochs[3] - 1)]
            )
            assert out.error == "INELIGIBLE_REPLICA"
        (out,) = await s.local.alter_partition(1, epochs[1], [shrink((1, 2, 3), 1, b3=epochs[3])])
        assert out == IsrOutcome("NONE", 1, 0, 2, (1, 2, 3))
        s.active[0] = False  # the gate does not stand before AlterPartition: the
        # controller's own check (its writer is active here) decides; the local one too
        (out,) = await s.remote.alter_partition(1, epochs[1], [shrink((1, 2, 3), 2)])
        assert out.error == "NONE"

    run(tmp_path, body)


def test_elect_leaders_remote_waits_for_the_callers_image(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        epochs = await three_replicas(s)
        # broker 1 shuts down: partition 0 moves to 2, 1 leaves the ISR
        await s.controller.broker_heartbeat(
            BrokerHeartbeat(1, epochs[1], s.controller.image.offset, want_shut_down=True)
        )
        state = s.controller.image.topics["t"].partitions[0]
        assert (state.leader, state.isr) == (2, (2, 3))
        assert await s.remote.elect_leaders(PREFERRED, [("t", 0)]) == [
            ElectionResult("t", 0, "PREFERRED_LEADER_NOT_AVAILABLE")
        ]
        await s.controller.broker_heartbeat(
            BrokerHeartbeat(1, epochs[1], s.controller.image.offset)
        )
        assert not s.controller.image.brokers[1].fenced
        topic = s.controller.image.topics["t"]
        (out,) = await s.local.alter_partition(
            2,
            epochs[2],
            [
                IsrProposal(
                    topic.topic_id, 0, state.leader_epoch, state.partition_epoch, (2, 3, 1), {}
                )
            ],
        )
        assert out.error == "NONE"
        assert await s.remote.elect_leaders(PREFERRED, None) == [ElectionResult("t", 0, "NONE")]
        # returned once the trailing image shows it
        assert s.follower[0].topics["t"].partitions[0].leader == 1
        assert await s.remote.elect_leaders(PREFERRED, None) == []
        assert await s.remote.elect_leaders(UNCLEAN, [("t", 0), ("nope", 3)]) == [
            ElectionResult("t", 0, "ELECTION_NOT_NEEDED"),
            ElectionResult("nope", 3, "UNKNOWN_TOPIC_OR_PARTITION"),
        ]

    run(tmp_path, body)


def test_the_oldest_versions_alter_partition_v2_and_elect_leaders_v0(tmp_path: Path) -> None:
    async def body(s: Setup) -> None:
        epochs = await three_replicas(s)
        topic = s.controller.image.topics["t"]
        voters = list(s.client._voters.values())  # the same controller listener
        old = ControllerClient(
            voters,
            lambda: 1,
            connector(client_id="old", versions={56: (2, 2), 43: (0, 0)}),
            retry_backoff_s=0.02,
        )
        try:
            # v2: the new ISR without broker epochs
            (out,) = await partition_rpc.alter_partition(
                old, 5.0, 1, epochs[1], [IsrProposal(topic.topic_id, 0, 0, 0, (1, 3), {})]
            )
            assert out == IsrOutcome("NONE", 1, 0, 1, (1, 3))
            # v0 knows only preferred elections, and has no top-level error
            assert await partition_rpc.elect_leaders(old, 5.0, PREFERRED, [("t", 0)]) == [
                ElectionResult("t", 0, "ELECTION_NOT_NEEDED")
            ]
            with pytest.raises(ControllerError) as caught:
                await partition_rpc.elect_leaders(old, 5.0, UNCLEAN, [("t", 0)])
            assert caught.value.code == "UNSUPPORTED_VERSION"
        finally:
            await old.close()

    run(tmp_path, body)
