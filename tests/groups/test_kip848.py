"""The consumer group protocol (KIP-848) end to end: confluent-kafka consumers with
``group.protocol=consumer`` and the ConsumerGroupHeartbeat/ConsumerGroupDescribe wire
APIs in every claimed version, plus how consumer groups meet the classic APIs."""

from __future__ import annotations

import datetime
import gc
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kio.schema.errors import ErrorCode as E

from odradek.protocol.build import make
from odradek.server.handlers import supported_versions
from tests.groups.conftest import group_broker_process
from tests.groups.wire import (
    commit,
    create_topic,
    describe_one,
    fetch_offsets,
    join_request,
    list_groups,
    nested,
    unique,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
HEARTBEAT_MS, SESSION_MS = 300, 3000
KIP848_ARGS = (
    "--override",
    f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
    "--override",
    f"group.consumer.session.timeout.ms={SESSION_MS}",
    "--override",
    "offsets.topic.num.partitions=5",
)


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """This module's broker: short KIP-848 heartbeats and sessions (overrides conftest's)."""
    process = group_broker_process(tmp_path_factory.mktemp("kip848") / "data", *KIP848_ARGS)
    process.start()
    try:
        yield process
    finally:
        gc.collect()  # librdkafka handles in reference cycles, before the broker goes
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture
def client(group_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(group_broker.bootstrap) as wire:
        yield wire


# -- wire helpers ----------------------------------------------------------------------------
def heartbeat(
    client: WireClient,
    version: int,
    group: str,
    member_id: str,
    epoch: int,
    *,
    topics: tuple[str, ...] | None = None,
    owned: dict[uuid.UUID, tuple[int, ...]] | None = None,
    assignor: str | None = None,
    instance_id: str | None = None,
    rebalance_ms: int = -1,
) -> Any:
    module = nested(CONSUMER_GROUP_HEARTBEAT, version)
    return client.request(
        make(
            module.ConsumerGroupHeartbeatRequest,
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rack_id=None,
            rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),
            subscribed_topic_names=topics,
            subscribed_topic_regex=None,
            server_assignor=assignor,
            topic_partitions=None
            if owned is None
            else tuple(
                make(module.TopicPartitions, topic_id=t, partitions=ps) for t, ps in owned.items()
            ),
        )
    )


def join(client: WireClient, version: int, group: str, topics: tuple[str, ...], **kw: Any) -> Any:
    member_id = kw.pop("member_id", uuid.uuid4().hex if version >= 1 else "")
    return heartbeat(
        client, version, group, member_id, 0, topics=topics, owned={}, rebalance_ms=10_000, **kw
    )


def owned_of(response: Any) -> dict[uuid.UUID, tuple[int, ...]]:
    return {t.topic_id: tuple(t.partitions) for t in response.assignment.topic_partitions}


def describe_consumer_groups(client: WireClient, version: int, groups: list[str]) -> list[Any]:
    module = nested(CONSUMER_GROUP_DESCRIBE, version)
    response = client.request(
        make(
            module.ConsumerGroupDescribeRequest,
            group_ids=tuple(groups),
            include_authorized_operations=False,
        )
    )
    return list(response.groups)


def topic_id(client: WireClient, name: str) -> uuid.UUID:
    module = nested(3, 12)
    response = client.request(
        make(
            module.MetadataRequest,
            topics=(make(module.MetadataRequestTopic, name=name, topic_id=None),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
    )
    return response.topics[0].topic_id


# -- confluent-kafka helpers -------------------------------------------------------------------
class Member:
    """A confluent-kafka consumer with ``group.protocol=consumer``; tracks what it owns and
    checks, in its rebalance callbacks, that nobody else owns a partition it is given."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, owners: dict[int, str], **conf: Any
    ) -> None:
        self.name = uuid.uuid4().hex[:6]
        self.topic = topic
        self.owners = owners  # partition -> member name, shared by a test's members
        self.owned: set[int] = set()
        self.revoked: list[int] = []
        self.values: list[int] = []
        self.seen: list[tuple[int, int, int]] = []  # (partition, offset, value): for a failure
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **conf,
            }
        )
        self.consumer.subscribe(
            [topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
        )

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            assert tp.partition not in self.owners, f"{tp.partition} already owned"
            self.owners[tp.partition] = self.name
            self.owned.add(tp.partition)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        positions = [tp for tp in consumer.position(partitions) if tp.offset != OFFSET_INVALID]
        if positions:  # hand over exactly where this member stopped
            consumer.commit(offsets=positions, asynchronous=False)
        for tp in partitions:
            assert self.owners.pop(tp.partition) == self.name
            self.owned.discard(tp.partition)
            self.revoked.append(tp.partition)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Fenced or unknown to the coordinator: gone without a handover (no commit)."""
        for tp in partitions:
            if self.owners.get(tp.partition) == self.name:
                del self.owners[tp.partition]
            self.owned.discard(tp.partition)

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is not None and message.error() is None:
            assert message.partition() in self.owned
            self.values.append(int(message.value()))
            self.seen.append((message.partition(), message.offset(), int(message.value())))

    def commit_positions(self) -> None:
        tps = [TopicPartition(self.topic, p) for p in sorted(self.owned)]
        positions = [tp for tp in self.consumer.position(tps) if tp.offset != OFFSET_INVALID]
        if positions:
            self.consumer.commit(offsets=positions, asynchronous=False)


def produce(bootstrap: str, topic: str, values: range, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=str(value).encode(), partition=value % partitions)
    assert producer.flush(30) == 0


def poll_until(members: list[Member], done: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for member in members:
            member.poll()


def stable(client: WireClient, group: str, members: list[Member], partitions: int) -> bool:
    owned = [p for m in members for p in m.owned]
    if sorted(owned) != list(range(partitions)):
        return False
    (described,) = describe_consumer_groups(client, 1, [group])
    return bool(described.group_state == "Stable")


def close_all(members: list[Member]) -> None:
    for member in members:
        member.consumer.close()


# -- tests -----------------------------------------------------------------------------------
def test_claimed_versions() -> None:
    claimed = supported_versions()
    assert claimed[CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert claimed[CONSUMER_GROUP_DESCRIBE] == (0, 1)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_three_consumers_share_partitions_and_one_leaves(
    group_broker: BrokerProcess, client: WireClient, assignor: str
) -> None:
    partitions = 9
    topic = create_topic(client, unique("kip848"), partitions)
    group = unique("g848")
    owners: dict[int, str] = {}
    conf = {"group.remote.assignor": assignor}
    members = [Member(group_broker.bootstrap, group, topic, owners, **conf) for _ in range(3)]
    try:
        poll_until(members, lambda: stable(client, group, members, partitions), "stable group")
        assert all(len(m.owned) == 3 for m in members)
        (described,) = describe_consumer_groups(client, 1, [group])
        assert described.assignor_name == assignor and len(described.members) == 3
        assert {m.member_epoch for m in described.members} == {described.assignment_epoch}
        admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
        info = admin.describe_consumer_groups([group])[group].result(10)
        assert info.type == ConsumerGroupType.CONSUMER and info.partition_assignor == assignor
        assert sorted(len(m.assignment.topic_partitions) for m in info.members) == [3, 3, 3]
        listed = admin.list_consumer_groups().result(10).valid
        assert [g.type for g in listed if g.group_id == group] == [ConsumerGroupType.CONSUMER]

        produce(group_broker.bootstrap, topic, range(900), partitions)
        poll_until(members, lambda: sum(len(m.values) for m in members) >= 900, "900 records")
        for member in members:
            member.commit_positions()
        committed = members[0].consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=10
        )
        assert sum(tp.offset for tp in committed) == 900  # 100 per partition, all committed

        leaver, stayers = members[0], members[1:]
        kept = {m.name: set(m.owned) for m in stayers}
        revoked_before = {m.name: len(m.revoked) for m in stayers}
        left = set(leaver.owned)
        leaver.consumer.close()
        for partition in left:  # close() revoked them (without the callback)
            owners.pop(partition, None)
        poll_until(stayers, lambda: stable(client, group, stayers, partitions), "rebalance")
        assert sorted(len(m.owned) for m in stayers) == [4, 5]
        if assignor == "uniform":  # incremental and sticky: the stayers lost nothing
            for member in stayers:
                assert kept[member.name] <= member.owned
                assert len(member.revoked) == revoked_before[member.name]

        produce(group_broker.bootstrap, topic, range(900, 1200), partitions)
        poll_until(stayers, lambda: sum(len(m.values) for m in members) >= 1200, "300 more")
        time.sleep(0.3)  # nothing more may arrive
        for member in stayers:
            member.poll()
        values = sorted(v for m in members for v in m.values)
        if values != list(range(1200)):  # say who read what twice, from where
            twice = {v for v, n in Counter(values).items() if n > 1}
            for member in members:
                reads = [s for s in member.seen if s[2] in twice]
                print(member.name, "owned", sorted(member.owned), "twice:", reads[:5], len(reads))
        assert values == list(range(1200))  # every record exactly once
    finally:
        close_all(members[1:])


def test_silent_member_loses_its_partitions_after_the_session(
    group_broker: BrokerProcess, client: WireClient
) -> None:
    topic = create_topic(client, unique("kip848s"), 4)
    group = unique("g848s")
    silent = join(client, 1, group, (topic,))
    assert silent.error_code == E.none and sum(len(p) for p in owned_of(silent).values()) == 4
    owners: dict[int, str] = {}
    member = Member(group_broker.bootstrap, group, topic, owners)
    try:
        started = time.monotonic()
        poll_until([member], lambda: len(member.owned) == 4, "the silent member's partitions")
        assert time.monotonic() - started >= SESSION_MS / 1000 - 1  # only after its session
        after = heartbeat(client, 1, group, silent.member_id, silent.member_epoch, owned={})
        assert after.error_code == E.unknown_member_id
    finally:
        member.consumer.close()


def test_assigned_consumer_commits_with_the_member_id_it_made(
    group_broker: BrokerProcess, client: WireClient
) -> None:
    """librdkafka with group.protocol=consumer makes its member id before it joins, so an
    assign()-based consumer commits with that id and epoch -1 (OffsetCommit v9): Kafka
    accepts it for a group with no members, and so does odradek."""
    topic = create_topic(client, unique("kip848a"), 1)
    group = unique("g848a")
    produce(group_broker.bootstrap, topic, range(10), 1)
    consumer = Consumer(
        {
            "bootstrap.servers": group_broker.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 10:
            assert time.monotonic() < deadline, f"consumed only {len(got)} of 10"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message)
        (committed,) = consumer.commit(message=got[-1], asynchronous=False)
        assert committed.error is None and committed.offset == 10
        (stored,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert stored.offset == 10
    finally:
        consumer.close()


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_heartbeat_every_version(client: WireClient, version: int) -> None:
    topic = create_topic(client, unique("kip848h"), 2)
    tid = topic_id(client, topic)
    group = unique("g848h")
    first = join(client, version, group, (topic,), member_id="" if version == 0 else "m-1")
    assert first.error_code == E.none, first
    assert first.member_id and first.member_epoch == 1
    assert first.heartbeat_interval == datetime.timedelta(milliseconds=HEARTBEAT_MS)
    assert owned_of(first) == {tid: (0, 1)}
    if version == 0:
        assert first.member_id != ""  # named by the coordinator
    else:
        assert join(client, 1, group, (topic,), member_id="").error_code == E.invalid_request
    steady = heartbeat(client, version, group, first.member_id, 1, owned=owned_of(first))
    assert steady.error_code == E.none and steady.member_epoch == 1
    assert steady.assignment is None  # unchanged
    # A second member: the first must revoke one partition before it moves.
    second = join(client, version, group, (topic,), member_id="" if version == 0 else "m-2")
    assert second.member_epoch == 2 and owned_of(second) == {}
    revoke = heartbeat(client, version, group, first.member_id, 1)
    assert revoke.member_epoch == 1 and len(owned_of(revoke)[tid]) == 1
    acked = heartbeat(client, version, group, first.member_id, 1, owned=owned_of(revoke))
    assert acked.member_epoch == 2 and acked.assignment is None
    gets = heartbeat(client, version, group, second.member_id, 2, owned={})
    assert set(owned_of(gets)[tid]) | set(owned_of(revoke)[tid]) == {0, 1}
    # Errors.
    fenced = heartbeat(client, version, group, first.member_id, 7, owned={})
    assert fenced.error_code == E.fenced_member_epoch
    unknown = heartbeat(client, version, group, "nobody", 3, owned={})
    assert unknown.error_code == E.unknown_member_id
    bad = join(client, version, group, (topic,), assignor="sticky")
    assert bad.error_code == E.unsupported_assignor
    invalid = heartbeat(client, version, group, "m-x", 0, topics=(topic,))  # no timeout
    assert invalid.error_code == E.invalid_request and invalid.error_message
    left = heartbeat(client, version, group, second.member_id, -1)
    assert left.error_code == E.none and left.member_epoch == -1
    heartbeat(client, version, group, first.member_id, -1)
    (described,) = describe_consumer_groups(client, 1, [group])
    assert described.group_state == "Empty"


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_describe_every_version(client: WireClient, version: int) -> None:
    topic = create_topic(client, unique("kip848d"), 3)
    tid = topic_id(client, topic)
    group, classic = unique("g848d"), unique("classic")
    member = join(client, 1, group, (topic,), assignor="range", instance_id="inst-1")
    assert member.error_code == E.none
    commit(client, 9, classic, {(topic, 0): 1})  # a (standalone) classic group
    described = describe_consumer_groups(client, version, [group, classic, unique("nope"), ""])
    ours, not_consumer, missing, empty = described
    assert ours.error_code == E.none and ours.group_id == group
    assert (ours.group_state, ours.group_epoch, ours.assignment_epoch) == ("Stable", 1, 1)
    assert ours.assignor_name == "range"
    (m,) = ours.members
    assert (m.member_id, m.instance_id, m.member_epoch) == (member.member_id, "inst-1", 1)
    assert m.subscribed_topic_names == (topic,) and m.client_id == client.client_id
    for assignment in (m.assignment, m.target_assignment):
        (tps,) = assignment.topic_partitions
        assert (tps.topic_id, tps.topic_name, tuple(tps.partitions)) == (tid, topic, (0, 1, 2))
    if version >= 1:
        assert m.member_type == 1
    assert not_consumer.error_code == E.group_id_not_found
    assert missing.error_code == E.group_id_not_found
    assert empty.error_code == E.invalid_group_id


def test_consumer_groups_and_the_classic_apis(client: WireClient) -> None:
    topic = create_topic(client, unique("kip848c"), 2)
    group = unique("g848c")
    member = join(client, 1, group, (topic,))
    epoch = member.member_epoch
    # ListGroups shows its type and KIP-848 state; DescribeGroups shows it as Dead.
    listed = {g.group_id: g for g in list_groups(client, 5).groups}
    assert (listed[group].group_type, listed[group].group_state) == ("consumer", "Stable")
    assert listed[group].protocol_type == "consumer"
    assert group in {g.group_id for g in list_groups(client, 5, types=["consumer"]).groups}
    assert group not in {g.group_id for g in list_groups(client, 5, types=["classic"]).groups}
    assert group not in {g.group_id for g in list_groups(client, 5, states=["empty"]).groups}
    described = describe_one(client, group)
    assert described.group_state == "Dead" and described.error_code == E.none
    # The classic protocol may not use a consumer group with members, and vice versa.
    joined = client.request(join_request(9, group))
    assert joined.error_code == E.group_id_not_found
    classic = unique("classic")
    client.request(join_request(0, classic))  # v0: a member at once
    refused = join(client, 1, classic, (topic,))
    assert refused.error_code == E.group_id_not_found
    # Offsets: the member epoch is checked.
    tp = (topic, 0)
    assert commit(client, 9, group, {tp: 5}, generation=epoch, member_id=member.member_id) == {
        tp: E.none
    }
    stale = commit(client, 9, group, {tp: 6}, generation=epoch + 1, member_id=member.member_id)
    assert stale == {tp: E.stale_member_epoch}
    assert commit(client, 9, group, {tp: 6}) == {tp: E.unknown_member_id}
    module = nested(9, 9)
    for wanted in (
        None,
        (make(module.OffsetFetchRequestTopics, name=topic, partition_indexes=(0,)),),
    ):
        fetched = client.request(
            make(
                module.OffsetFetchRequest,
                groups=(
                    make(
                        module.OffsetFetchRequestGroup,
                        group_id=group,
                        member_id=member.member_id,
                        member_epoch=epoch + 1,
                        topics=wanted,
                    ),
                ),
                require_stable=True,
            )
        )
        assert fetched.groups[0].error_code == E.stale_member_epoch
        # No topics, not the partitions at offset -1: "nothing committed" to a client.
        assert fetched.groups[0].topics == ()
    error, found = fetch_offsets(client, 9, {group: None})[group]  # an admin: no member
    assert error == E.none and found[tp].offset == 5
    # DeleteGroups refuses a group with members; an empty one converts to classic.
    module = nested(42, 2)
    deleted = client.request(make(module.DeleteGroupsRequest, groups_names=(group,)))
    assert deleted.results[0].error_code == E.non_empty_group
    heartbeat(client, 1, group, member.member_id, epoch, owned={})
    assert heartbeat(client, 1, group, member.member_id, -1).error_code == E.none
    rejoined = client.request(join_request(0, group))
    assert rejoined.error_code == E.none  # the empty consumer group became classic
    assert fetch_offsets(client, 9, {group: None})[group][1][tp].offset == 5  # offsets stay


def test_regex_subscription_follows_new_topics_and_partitions(
    group_broker: BrokerProcess, client: WireClient
) -> None:
    prefix = unique("rx")
    create_topic(client, f"{prefix}-a", 2)
    create_topic(client, "not-" + prefix, 1)
    group = unique("g848rx")
    consumer = Consumer(
        {
            "bootstrap.servers": group_broker.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    consumer.subscribe([f"^{prefix}-.*"])

    def owns(expected: set[tuple[str, int]]) -> bool:
        consumer.poll(0.05)
        return {(tp.topic, tp.partition) for tp in consumer.assignment()} == expected

    try:
        wanted = {(f"{prefix}-a", 0), (f"{prefix}-a", 1)}
        poll_until([], lambda: owns(wanted), "the first matching topic")
        create_topic(client, f"{prefix}-b", 1)  # a new matching topic joins the subscription
        wanted.add((f"{prefix}-b", 0))
        poll_until([], lambda: owns(wanted), "the new matching topic")
        admin = AdminClient({"bootstrap.servers": group_broker.bootstrap})
        admin.create_partitions([NewPartitions(f"{prefix}-b", 2)])[f"{prefix}-b"].result(10)
        wanted.add((f"{prefix}-b", 1))
        poll_until([], lambda: owns(wanted), "the added partition")
        (described,) = describe_consumer_groups(client, 1, [group])
        assert f"^{prefix}-.*" in described.members[0].subscribed_topic_regex  # librdkafka: (…)
    finally:
        consumer.close()


def test_static_member_restart_keeps_its_partitions(
    group_broker: BrokerProcess, client: WireClient
) -> None:
    topic = create_topic(client, unique("kip848st"), 4)
    group = unique("g848st")
    owners: dict[int, str] = {}
    a = Member(group_broker.bootstrap, group, topic, owners, **{"group.instance.id": "a"})
    b = Member(group_broker.bootstrap, group, topic, owners, **{"group.instance.id": "b"})
    try:
        poll_until([a, b], lambda: stable(client, group, [a, b], 4), "stable group")
        kept, (before,) = set(a.owned), describe_consumer_groups(client, 1, [group])
        b_revoked = list(b.revoked)
        a.consumer.close()  # a static leave (epoch -2): its partitions wait for it
        for partition in kept:
            owners.pop(partition, None)
        a = Member(group_broker.bootstrap, group, topic, owners, **{"group.instance.id": "a"})
        poll_until([a, b], lambda: a.owned == kept, "the same partitions back")
        (after,) = describe_consumer_groups(client, 1, [group])
        assert after.group_epoch == before.group_epoch  # no rebalance
        assert {m.instance_id for m in after.members} == {"a", "b"}
        assert b.revoked == b_revoked  # b kept its partitions throughout
    finally:
        close_all([a, b])


def test_members_rejoin_after_a_broker_restart(tmp_path: Any) -> None:
    """Membership is not persisted: after a restart the members get UNKNOWN_MEMBER_ID,
    rejoin with epoch 0, and consume on from their committed offsets."""
    broker = group_broker_process(tmp_path / "data", *KIP848_ARGS).start()
    members: list[Member] = []
    try:
        with WireClient(broker.bootstrap) as wire:
            topic = create_topic(wire, unique("kip848r"), 4)
        group = unique("g848r")
        # Lost partitions move without a handover, so no shared ownership check here.
        members = [Member(broker.bootstrap, group, topic, {}) for _ in range(2)]
        produce(broker.bootstrap, topic, range(100), 4)
        poll_until(members, lambda: sum(len(m.values) for m in members) >= 100, "100 records")
        for member in members:
            member.commit_positions()
        assert broker.stop() == 0
        broker.start(listen=f"127.0.0.1:{broker.port}")
        produce(broker.bootstrap, topic, range(100, 200), 4)
        poll_until(members, lambda: sum(len(m.values) for m in members) >= 200, "100 more")
        with WireClient(broker.bootstrap) as wire:
            (described,) = describe_consumer_groups(wire, 1, [group])
        assert len(described.members) == 2
        assert sorted(v for m in members for v in m.values) == list(range(200))
    finally:
        close_all(members)
        gc.collect()
        try:
            broker.stop()
        finally:
            broker.kill()
