"""The consumer-group APIs of a real broker on the wire, every claimed version.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups, DeleteGroups, OffsetCommit, OffsetFetch and OffsetDelete: each
claimed version round-trips with kio, and each error a client can provoke comes back
as Kafka's code — the broker never closes the connection or logs a traceback
(conftest's log check). Groups are driven member by member over several connections:
a parked JoinGroup is sent, the other members rejoin, then the responses are read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.server.handlers import supported_versions
from tests.groups.wire import (
    GROUP_VERSIONS,
    OFFSETS_TOPIC,
    Member,
    assignment,
    commit,
    coordinator_partition,
    create_topic,
    delete_groups,
    describe,
    describe_one,
    fetch_offsets,
    fetch_one,
    find_coordinator,
    heartbeat,
    java_hash,
    join,
    join_new,
    leave,
    list_groups,
    metadata,
    offset_delete,
    send_join,
    send_join_new,
    send_sync,
    single_member_group,
    subscription,
    sync,
    unique,
    wait_for,
)
from tests.server.test_admin_configs import configs_of
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

E = ErrorCode
TOPIC_RESOURCE = 2


@pytest.fixture(scope="module", autouse=True)
def offsets_topic(group_broker: BrokerProcess) -> None:
    """Clients find the coordinator first, which creates __consumer_offsets."""
    with WireClient(group_broker.bootstrap) as wire:
        assert find_coordinator(wire, 6, ["warm-up"])[0][4] == E.none


@pytest.fixture
def client(group_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(group_broker.bootstrap) as wire:
        yield wire


@pytest.fixture(scope="module")
def topic(group_broker: BrokerProcess) -> str:
    """A 3-partition topic for offset commits."""
    with WireClient(group_broker.bootstrap) as wire:
        return create_topic(wire, unique("offsets"), 3)


def test_claimed_group_versions_are_the_tested_ones() -> None:
    claimed = supported_versions()
    for api_key, versions in GROUP_VERSIONS.items():
        assert claimed[api_key] == versions, api_key


def rebalance_in(
    members: list[Member],
    newcomers: list[WireClient],
    *,
    version: int = 9,
    protocols: dict[int, tuple[tuple[str, bytes], ...]] | None = None,
    instance_ids: dict[int, str] | None = None,
    rebalance_ms: int = 10_000,
) -> list[Member]:
    """Grow a Stable group: newcomers join (parked), every member rejoins, the leader
    assigns. ``protocols``/``instance_ids`` are keyed by position in members+newcomers."""
    protocols = protocols or {}
    instance_ids = instance_ids or {}
    group = members[0].group
    default = (("range", b"meta"),)
    pending = []
    for i, wire in enumerate(newcomers, start=len(members)):
        pending.append(
            (
                wire,
                send_join_new(
                    wire,
                    version,
                    group,
                    protocols=protocols.get(i, default),
                    instance_id=instance_ids.get(i),
                    rebalance_ms=rebalance_ms,
                ),
            )
        )
    for i, member in enumerate(members):
        # The newcomers' joins travel on other connections: wait until they are in.
        wait_for(partial(rebalancing, member), 10, "the rebalance")
        pending.insert(
            i,
            (
                member.client,
                send_join(
                    member.client,
                    version,
                    group,
                    member.member_id,
                    protocols=protocols.get(i, default),
                    instance_id=member.instance_id,
                    rebalance_ms=rebalance_ms,
                ),
            ),
        )
    results = [(wire, p.result()) for wire, p in pending]
    for _, r in results:
        assert r.error_code == E.none, r
    generation = results[0][1].generation_id
    assert all(r.generation_id == generation for _, r in results)
    (leader,) = [(w, r) for w, r in results if r.leader == r.member_id]
    assert len(leader[1].members) == len(results)
    followers = [
        send_sync(
            w,
            5,
            group,
            generation,
            r.member_id,
            instance_id=instance_ids.get(i),
            protocol_name=r.protocol_name,
        )
        for i, (w, r) in enumerate(results)
        if r is not leader[1]
    ]
    leader_index = results.index(leader)
    synced = sync(
        leader[0],
        5,
        group,
        generation,
        leader[1].member_id,
        {r.member_id: r.member_id.encode() for _, r in results},
        instance_id=instance_ids.get(leader_index),
        protocol_name=leader[1].protocol_name,
    )
    assert synced.error_code == E.none and synced.assignment == leader[1].member_id.encode()
    for pending_sync in followers:
        follower = pending_sync.result()
        assert follower.error_code == E.none, follower
    return [
        Member(w, group, r.member_id, generation, r.leader, instance_ids.get(i))
        for i, (w, r) in enumerate(results)
    ]


def rebalancing(member: Member) -> bool:
    error = heartbeat(
        member.client, 4, member.group, member.generation, member.member_id, member.instance_id
    )
    return error == E.rebalance_in_progress


# -- FindCoordinator -------------------------------------------------------------------
def test_offsets_topic_is_created_on_first_use(fresh_broker: BrokerProcess) -> None:
    with WireClient(fresh_broker.bootstrap) as wire:
        before = metadata(wire, None)
        assert OFFSETS_TOPIC not in {t.name for t in before.topics}
        ((_, node, host, port, error),) = find_coordinator(wire, 6, ["first-use"])
        assert error == E.none
        (broker,) = before.brokers
        assert (node, f"{host}:{port}") == (broker.node_id, fresh_broker.bootstrap)
        (offsets,) = metadata(wire, [OFFSETS_TOPIC]).topics
        assert offsets.error_code == E.none and offsets.is_internal
        assert len(offsets.partitions) == 50
        assert {p.leader_id for p in offsets.partitions} == {broker.node_id}
        configs = configs_of(wire, TOPIC_RESOURCE, OFFSETS_TOPIC)
        assert configs["cleanup.policy"].value == "compact"
        assert find_coordinator(wire, 6, ["again"])[0][4] == E.none  # created once
    dirs = sorted(p.name for p in fresh_broker.data_dir.glob(f"{OFFSETS_TOPIC}-*"))
    assert len(dirs) == 50


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_every_version(
    group_broker: BrokerProcess, client: WireClient, version: int
) -> None:
    keys = [unique("fc"), unique("fc-é")]
    (broker,) = metadata(client, []).brokers
    found = find_coordinator(client, version, keys)
    assert [k for k, *_ in found] == keys
    for _, node, host, port, error in found:
        assert error == E.none
        assert (node, f"{host}:{port}") == (broker.node_id, group_broker.bootstrap)


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_find_coordinator_transaction_and_empty_keys(client: WireClient, version: int) -> None:
    # A transactional id's coordinator: __transaction_state is created on first use
    # (COORDINATOR_NOT_AVAILABLE meanwhile, as Kafka), then its partition's leader.
    deadline = time.monotonic() + 30
    while True:
        ((_, node, _, _, error),) = find_coordinator(client, version, ["txn-id"], key_type=1)
        if error != E.coordinator_not_available or time.monotonic() > deadline:
            break
        assert node == -1
        time.sleep(0.1)
    assert error == E.none and node >= 0
    ((_, node, _, _, error),) = find_coordinator(client, version, [""])
    assert (error, node) == (E.invalid_request, -1)
    if version >= 4:  # per-key errors in one batch
        found = find_coordinator(client, version, ["ok-1", "", "ok-2"])
        assert [(k, e) for k, _, _, _, e in found] == [
            ("ok-1", E.none),
            ("", E.invalid_request),
            ("ok-2", E.none),
        ]


def test_find_coordinator_v0_empty_key(client: WireClient) -> None:
    ((_, node, _, _, error),) = find_coordinator(client, 0, [""])
    assert (error, node) == (E.invalid_request, -1)


def test_java_hash_reference_values() -> None:
    assert java_hash("") == 0
    assert java_hash("a") == 97
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    assert coordinator_partition("polygenelubricants") == 0


@pytest.mark.parametrize(
    "group", ["java-hash-1", "gröup-ü", "emoji-😀-group", "polygenelubricants"]
)
def test_coordinator_partition_is_java_hash(
    group_broker: BrokerProcess, client: WireClient, topic: str, group: str
) -> None:
    find_coordinator(client, 6, [group])

    def sizes() -> dict[str, int]:
        return {
            d.name: sum(f.stat().st_size for f in d.glob("*.log"))
            for d in group_broker.data_dir.glob(f"{OFFSETS_TOPIC}-*")
        }

    before = sizes()
    assert commit(client, 9, group, {(topic, 0): 5}) == {(topic, 0): E.none}
    after = sizes()
    grown = [name for name in after if after[name] != before.get(name, 0)]
    assert grown == [f"{OFFSETS_TOPIC}-{coordinator_partition(group)}"]


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup: every version -----------------------
@pytest.mark.parametrize("version", range(10))
def test_group_lifecycle_every_join_version(client: WireClient, version: int) -> None:
    sync_v, heartbeat_v, leave_v = min(version, 5), min(version, 4), min(version, 5)
    group = unique(f"life-v{version}")
    member_id = ""
    if version >= 4:  # KIP-394: a new dynamic member first gets its id
        first = join(client, version, group)
        assert first.error_code == E.member_id_required
        assert first.member_id.startswith("odradek-tests-")
        assert first.generation_id == -1
        member_id = first.member_id
    joined = join(
        client, version, group, member_id, protocols=(("range", b"r-meta"), ("rr", b"rr-meta"))
    )
    assert joined.error_code == E.none, joined
    if version >= 4:
        assert joined.member_id == member_id
    member_id = joined.member_id
    assert joined.generation_id == 1
    assert joined.protocol_name == "range"
    assert joined.leader == member_id
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member_id, b"r-meta")]
    if version >= 5:
        assert joined.members[0].group_instance_id is None
    if version >= 7:
        assert joined.protocol_type == "consumer"
    if version >= 9:
        assert joined.skip_assignment is False

    synced = sync(client, sync_v, group, 1, member_id, {member_id: b"my-partitions"})
    assert synced.error_code == E.none and synced.assignment == b"my-partitions"
    if sync_v >= 5:
        assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")
    assert heartbeat(client, heartbeat_v, group, 1, member_id) == E.none

    described = describe_one(client, group)
    assert (described.group_state, described.protocol_type, described.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    (member,) = described.members
    assert (member.member_id, member.member_metadata, member.member_assignment) == (
        member_id,
        b"r-meta",
        b"my-partitions",
    )

    left = leave(client, leave_v, group, [(member_id, None)])
    assert left.error_code == E.none
    if leave_v >= 3:
        assert [(m.member_id, m.error_code) for m in left.members] == [(member_id, E.none)]
    described = describe_one(client, group)
    assert (described.group_state, described.members) == ("Empty", ())
    assert heartbeat(client, heartbeat_v, group, 1, member_id) == E.unknown_member_id


def test_join_protocol_vote_and_leader_sees_all_members(group_broker: BrokerProcess) -> None:
    """Each member votes for its favourite protocol all members support; most votes win."""
    group = unique("vote")
    bootstrap = group_broker.bootstrap
    with WireClient(bootstrap) as a, WireClient(bootstrap) as b, WireClient(bootstrap) as c:
        first = single_member_group(a, group, protocols=(("range", b"a1"), ("rr", b"a2")))
        members = rebalance_in(
            [first],
            [b, c],
            protocols={
                0: (("range", b"a1"), ("rr", b"a2"), ("sticky", b"a3")),
                1: (("rr", b"b1"), ("range", b"b2")),
                2: (("sticky", b"c0"), ("rr", b"c1"), ("range", b"c2")),
            },
        )
        # Common: range, rr. Votes: a -> range, b -> rr, c -> rr.
        described = describe_one(a, group)
        assert described.protocol_data == "rr"
        metadata_by_member = {m.member_id: m.member_metadata for m in described.members}
        assert metadata_by_member == {
            members[0].member_id: b"a2",
            members[1].member_id: b"b1",
            members[2].member_id: b"c1",
        }
        assert len({m.generation for m in members}) == 1 and members[0].generation == 2
        for member in members:
            assert heartbeat(member.client, 4, group, member.generation, member.member_id) == E.none
        # A joiner sharing no protocol with the group is refused.
        with WireClient(bootstrap) as d:
            refused = join(d, 3, group, protocols=(("other", b""),))
            assert refused.error_code == E.inconsistent_group_protocol
            wrong_type = join(d, 3, group, protocol_type="connect")
            assert wrong_type.error_code == E.inconsistent_group_protocol
        assert describe_one(a, group).group_state == "Stable"
        leave(a, 5, group, [(m.member_id, None) for m in members])
        assert describe_one(a, group).group_state == "Empty"


def test_join_errors(client: WireClient) -> None:
    group = unique("join-errors")
    too_short = join(client, 9, group, session_ms=100)
    assert too_short.error_code == E.invalid_session_timeout
    too_long = join(client, 9, group, session_ms=1_800_001)
    assert too_long.error_code == E.invalid_session_timeout
    no_protocols = join(client, 9, group, protocols=())
    assert no_protocols.error_code == E.inconsistent_group_protocol
    unknown = join(client, 9, group, "not-a-member")
    assert unknown.error_code == E.unknown_member_id
    no_type = join(client, 3, group, protocol_type="")
    assert no_type.error_code == E.inconsistent_group_protocol
    # None of these made a member or left an empty group behind; a real member still
    # forms the group at generation 1.
    assert group not in {g.group_id for g in list_groups(client, 5).groups}
    assert describe_one(client, group).group_state == "Dead"
    member = single_member_group(client, group)
    assert member.generation == 1
    leave(client, 5, group, [(member.member_id, None)])


def test_join_with_member_id_to_unknown_group_leaves_no_group(client: WireClient) -> None:
    group = unique("ghost")
    assert join(client, 9, group, "made-up-member").error_code == E.unknown_member_id
    listed = {g.group_id for g in list_groups(client, 5).groups}
    assert group not in listed
    assert describe_one(client, group).group_state == "Dead"


def test_static_member_rejoin_keeps_generation(group_broker: BrokerProcess) -> None:
    """KIP-345: a static member that restarts (new connection, no member id) gets a new
    id and its old assignment without a rebalance; the old id is fenced."""
    group = unique("static")
    with WireClient(group_broker.bootstrap) as a, WireClient(group_broker.bootstrap) as b:
        first = single_member_group(a, group, instance_id="i-a")
        members = rebalance_in([first], [b], instance_ids={0: "i-a", 1: "i-b"})
        old_b = members[1]
        with WireClient(group_broker.bootstrap) as b2:
            rejoined = join(b2, 7, group, instance_id="i-b")  # v7: no skip_assignment
            assert rejoined.error_code == E.none
            assert rejoined.member_id != old_b.member_id
            assert rejoined.generation_id == old_b.generation
            assert rejoined.leader == members[0].member_id
            assert rejoined.members == ()
            synced = sync(
                b2, 5, group, rejoined.generation_id, rejoined.member_id, instance_id="i-b"
            )
            assert synced.error_code == E.none
            assert synced.assignment == old_b.member_id.encode()
            assert describe_one(a, group).group_state == "Stable"
            # The other member noticed nothing; the old incarnation is fenced.
            assert (
                heartbeat(a, 4, group, members[0].generation, members[0].member_id, "i-a") == E.none
            )
            assert (
                heartbeat(b, 4, group, old_b.generation, old_b.member_id, "i-b")
                == E.fenced_instance_id
            )
            left = leave(a, 5, group, [(members[0].member_id, "i-a"), ("", "i-b")])
            assert [m.error_code for m in left.members] == [E.none, E.none]
    assert describe_one_via(group_broker, group).group_state == "Empty"


def wait_state(client: WireClient, group: str, state: str) -> None:
    wait_for(lambda: describe_one(client, group).group_state == state, 10, state)


def describe_one_via(broker: BrokerProcess, group: str) -> Any:
    with WireClient(broker.bootstrap) as wire:
        return describe_one(wire, group)


# -- SyncGroup errors --------------------------------------------------------------------
def test_sync_group_errors(group_broker: BrokerProcess) -> None:
    group = unique("sync-errors")
    with WireClient(group_broker.bootstrap) as a, WireClient(group_broker.bootstrap) as b:
        m = single_member_group(a, group)
        gen = m.generation
        assert sync(a, 5, group, gen, "who").error_code == E.unknown_member_id
        assert sync(a, 5, group, gen + 1, m.member_id).error_code == E.illegal_generation
        assert (
            sync(a, 5, group, gen, m.member_id, protocol_name="roundrobin").error_code
            == E.inconsistent_group_protocol
        )
        assert (
            sync(a, 5, group, gen, m.member_id, protocol_type="connect").error_code
            == E.inconsistent_group_protocol
        )
        assert sync(a, 5, unique("nogroup"), 1, "x").error_code == E.unknown_member_id
        # A Stable member's repeated sync gets its assignment again.
        again = sync(a, 5, group, gen, m.member_id)
        assert (again.error_code, again.assignment) == (E.none, b"assigned")
        # A newcomer's join starts a rebalance: the old generation's sync is refused.
        parked = send_join_new(b, 9, group)
        wait_state(a, group, "PreparingRebalance")
        assert sync(a, 3, group, gen, m.member_id).error_code == E.rebalance_in_progress
        assert heartbeat(a, 4, group, gen, m.member_id) == E.rebalance_in_progress
        assert describe_one(a, group).group_state == "PreparingRebalance"
        leader = join(a, 9, group, m.member_id)
        follower = parked.result()
        assert leader.error_code == follower.error_code == E.none
        assert leader.generation_id == follower.generation_id == gen + 1
        assert describe_one(a, group).group_state == "CompletingRebalance"
        # The follower's sync waits for the leader's assignment.
        waiting = send_sync(b, 5, group, gen + 1, follower.member_id)
        assert heartbeat(a, 4, group, gen + 1, leader.member_id) == E.none
        done = sync(
            a,
            5,
            group,
            gen + 1,
            leader.member_id,
            {leader.member_id: b"L", follower.member_id: b"F"},
        )
        assert (done.error_code, done.assignment) == (E.none, b"L")
        got = waiting.result()
        assert (got.error_code, got.assignment) == (E.none, b"F")
        leave(a, 5, group, [(leader.member_id, None), (follower.member_id, None)])


def test_leader_rejoin_during_completing_voids_follower_sync(group_broker: BrokerProcess) -> None:
    group = unique("sync-void")
    with WireClient(group_broker.bootstrap) as a, WireClient(group_broker.bootstrap) as b:
        m = single_member_group(a, group)
        parked = send_join_new(b, 9, group)
        leader = join(a, 9, group, m.member_id)
        follower = parked.result()
        waiting = send_sync(b, 5, group, follower.generation_id, follower.member_id)
        rejoin = send_join(a, 9, group, leader.member_id, protocols=(("range", b"changed"),))
        assert waiting.result().error_code == E.rebalance_in_progress
        again = join(b, 9, group, follower.member_id)
        assert again.error_code == E.none
        assert rejoin.result().generation_id == again.generation_id == leader.generation_id + 1
        leave(a, 5, group, [(leader.member_id, None), (follower.member_id, None)])


# -- Heartbeat errors --------------------------------------------------------------------
@pytest.mark.parametrize("version", range(5))
def test_heartbeat_errors(client: WireClient, version: int) -> None:
    group = unique("hb")
    m = single_member_group(client, group)
    assert heartbeat(client, version, group, m.generation, m.member_id) == E.none
    assert heartbeat(client, version, group, m.generation, "who") == E.unknown_member_id
    assert heartbeat(client, version, group, m.generation + 1, m.member_id) == E.illegal_generation
    assert heartbeat(client, version, group, m.generation - 1, m.member_id) == E.illegal_generation
    assert heartbeat(client, version, unique("nogroup"), 1, "who") == E.unknown_member_id
    leave(client, 5, group, [(m.member_id, None)])


def test_heartbeat_static_member_fenced(client: WireClient) -> None:
    group = unique("hb-static")
    m = single_member_group(client, group, instance_id="inst")
    assert heartbeat(client, 3, group, m.generation, m.member_id, "inst") == E.none
    assert heartbeat(client, 3, group, m.generation, "other", "inst") == E.fenced_instance_id
    assert heartbeat(client, 3, group, m.generation, m.member_id, "nope") == E.unknown_member_id
    leave(client, 5, group, [(m.member_id, "inst")])


def test_session_expiry_removes_the_member(client: WireClient) -> None:
    group = unique("expiry")
    m = single_member_group(client, group, session_ms=600)
    wait_for(lambda: describe_one(client, group).group_state == "Empty", 10, "session expiry")
    assert describe_one(client, group).members == ()
    assert heartbeat(client, 4, group, m.generation, m.member_id) == E.unknown_member_id


def test_pending_member_id_expires(client: WireClient) -> None:
    """A MEMBER_ID_REQUIRED id that never rejoins is forgotten after its session."""
    group = unique("pending")
    m = single_member_group(client, group)
    first = join(client, 9, group, session_ms=600)
    assert first.error_code == E.member_id_required
    # The pending id keeps the group Stable (no rebalance until it rejoins) ...
    assert describe_one(client, group).group_state == "Stable"
    # ... and expires: joining with it once its session has passed is refused. (No
    # request can observe a pending id without consuming it, hence the wait.)
    time.sleep(1.2)
    assert join(client, 9, group, first.member_id).error_code == E.unknown_member_id
    assert heartbeat(client, 4, group, m.generation, m.member_id) == E.none
    leave(client, 5, group, [(m.member_id, None)])


# -- LeaveGroup ----------------------------------------------------------------------------
@pytest.mark.parametrize("version", [3, 4, 5])
def test_leave_group_batch(group_broker: BrokerProcess, version: int) -> None:
    group = unique("leave-batch")
    with (
        WireClient(group_broker.bootstrap) as a,
        WireClient(group_broker.bootstrap) as b,
        WireClient(group_broker.bootstrap) as c,
    ):
        first = single_member_group(a, group, instance_id="i-0")
        members = rebalance_in([first], [b, c], instance_ids={0: "i-0", 1: "i-1"})
        dynamic = members[2]
        left = leave(
            a,
            version,
            group,
            [
                (members[0].member_id, "i-0"),
                ("", "i-1"),  # by instance id alone (the admin client's removal)
                ("not-a-member", None),
                ("", "no-such-instance"),
                ("wrong-id", "i-0"),  # i-0 is already gone
            ],
        )
        assert left.error_code == E.none
        assert [m.error_code for m in left.members] == [
            E.none,
            E.none,
            E.unknown_member_id,
            E.unknown_member_id,
            E.unknown_member_id,
        ]
        described = describe_one(a, group)
        assert described.group_state == "PreparingRebalance"
        assert [m.member_id for m in described.members] == [dynamic.member_id]
        # The remaining member rejoins alone and leads the next generation.
        rejoined = join(c, 9, group, dynamic.member_id)
        assert rejoined.error_code == E.none and rejoined.leader == dynamic.member_id
        left = leave(a, version, group, [(dynamic.member_id, None)])
        assert [m.error_code for m in left.members] == [E.none]
        assert describe_one(a, group).group_state == "Empty"


def test_leave_group_fenced_static_member(client: WireClient) -> None:
    group = unique("leave-fenced")
    m = single_member_group(client, group, instance_id="stat")
    left = leave(client, 5, group, [("someone-else", "stat")])
    assert [x.error_code for x in left.members] == [E.fenced_instance_id]
    left = leave(client, 5, unique("nogroup"), [("x", None)])
    assert [x.error_code for x in left.members] == [E.unknown_member_id]
    assert leave(client, 0, unique("nogroup"), [("x", None)]).error_code == E.unknown_member_id
    leave(client, 5, group, [(m.member_id, "stat")])


# -- ListGroups / DescribeGroups / DeleteGroups ---------------------------------------------
@pytest.mark.parametrize("version", range(6))
def test_list_groups_every_version(client: WireClient, topic: str, version: int) -> None:
    stable_group, empty_group = unique("list-stable"), unique("list-empty")
    m = single_member_group(client, stable_group)
    assert commit(client, 9, empty_group, {(topic, 0): 1}) == {(topic, 0): E.none}
    response = list_groups(client, version)
    assert response.error_code == E.none
    listed = {g.group_id: g for g in response.groups}
    assert listed[stable_group].protocol_type == "consumer"
    assert listed[empty_group].protocol_type == ""
    if version >= 4:
        assert listed[stable_group].group_state == "Stable"
        assert listed[empty_group].group_state == "Empty"
        stable_only = {g.group_id for g in list_groups(client, version, ["Stable"]).groups}
        assert stable_group in stable_only and empty_group not in stable_only
        empty_only = {g.group_id for g in list_groups(client, version, ["empty"]).groups}
        assert empty_group in empty_only and stable_group not in empty_only
        both = {g.group_id for g in list_groups(client, version, ["Empty", "Stable"]).groups}
        assert {stable_group, empty_group} <= both
        assert not {g.group_id for g in list_groups(client, version, ["Dead"]).groups} & {
            stable_group,
            empty_group,
        }
    if version >= 5:
        assert listed[stable_group].group_type == "classic"
        classic = {g.group_id for g in list_groups(client, version, types=["Classic"]).groups}
        assert {stable_group, empty_group} <= classic
        assert list_groups(client, version, types=["consumer"]).groups == ()
        filtered = list_groups(client, version, ["Stable"], ["classic"]).groups
        assert stable_group in {g.group_id for g in filtered}
    leave(client, 5, stable_group, [(m.member_id, None)])
    delete_groups(client, 2, [empty_group, stable_group])


@pytest.mark.parametrize("version", range(6))
def test_describe_groups_every_version(group_broker: BrokerProcess, version: int) -> None:
    group = unique(f"describe-v{version}")
    with (
        WireClient(group_broker.bootstrap, client_id="alpha") as a,
        WireClient(group_broker.bootstrap, client_id="beta") as b,
    ):
        first = single_member_group(
            a, group, instance_id="inst-a", protocols=(("range", b"meta-a"),)
        )
        members = rebalance_in(
            [first],
            [b],
            instance_ids={0: "inst-a"},
            protocols={0: (("range", b"meta-a"),), 1: (("range", b"meta-b"),)},
        )
        unknown = unique("unknown")
        described = describe(a, version, [group, unknown])
        assert [d.group_id for d in described] == [group, unknown]
        stable, dead = described
        assert stable.error_code == E.none
        assert (stable.group_state, stable.protocol_type, stable.protocol_data) == (
            "Stable",
            "consumer",
            "range",
        )
        by_id = {m.member_id: m for m in stable.members}
        assert set(by_id) == {members[0].member_id, members[1].member_id}
        ma, mb = by_id[members[0].member_id], by_id[members[1].member_id]
        assert (ma.client_id, ma.member_metadata, ma.member_assignment) == (
            "alpha",
            b"meta-a",
            members[0].member_id.encode(),
        )
        assert (mb.client_id, mb.member_metadata, mb.member_assignment) == (
            "beta",
            b"meta-b",
            members[1].member_id.encode(),
        )
        assert ma.client_host == mb.client_host == "/127.0.0.1"
        if version >= 5:
            assert (ma.group_instance_id, mb.group_instance_id) == ("inst-a", None)
        if version >= 3:
            assert stable.authorized_operations == -(2**31)
        assert (dead.error_code, dead.group_state, dead.members) == (E.none, "Dead", ())
        # During a rebalance: members listed, no metadata or assignment (as Kafka).
        parked = send_join(a, 9, group, members[0].member_id, instance_id="inst-a")
        wait_state(b, group, "PreparingRebalance")
        (rebalancing,) = describe(b, version, [group])
        assert rebalancing.group_state == "PreparingRebalance"
        assert rebalancing.protocol_data == ""
        assert all(m.member_assignment == b"" for m in rebalancing.members)
        join(b, 9, group, members[1].member_id)
        parked.result()
        leave(a, 5, group, [(members[0].member_id, "inst-a"), (members[1].member_id, None)])


@pytest.mark.parametrize("version", range(3))
def test_delete_groups_every_version(client: WireClient, topic: str, version: int) -> None:
    active, offsets_only, unknown = unique("del-active"), unique("del-offsets"), unique("del-no")
    m = single_member_group(client, active)
    assert commit(client, 9, offsets_only, {(topic, 0): 7, (topic, 1): 8})[(topic, 1)] == E.none
    assert commit(
        client, 9, active, {(topic, 2): 3}, generation=m.generation, member_id=m.member_id
    ) == {(topic, 2): E.none}
    results = delete_groups(client, version, [active, offsets_only, unknown])
    assert results == {
        active: E.non_empty_group,
        offsets_only: E.none,
        unknown: E.group_id_not_found,
    }
    found = fetch_one(client, offsets_only, [(topic, 0), (topic, 1)])
    assert {tp: f.offset for tp, f in found.items()} == {(topic, 0): -1, (topic, 1): -1}
    assert fetch_one(client, offsets_only, None) == {}
    assert describe_one(client, offsets_only).group_state == "Dead"
    assert offsets_only not in {g.group_id for g in list_groups(client, 5).groups}
    # Once its member leaves, the group and its offsets can be deleted.
    leave(client, 5, active, [(m.member_id, None)])
    assert delete_groups(client, version, [active]) == {active: E.none}
    assert fetch_one(client, active, [(topic, 2)])[(topic, 2)].offset == -1
    assert delete_groups(client, version, [active]) == {active: E.group_id_not_found}
    # A deleted group can be used again from scratch.
    again = single_member_group(client, active)
    assert again.generation == 1
    leave(client, 5, active, [(again.member_id, None)])


# -- OffsetCommit / OffsetFetch / OffsetDelete ------------------------------------------
@pytest.mark.parametrize("version", range(2, 10))
def test_offset_commit_every_version_standalone(
    client: WireClient, topic: str, version: int
) -> None:
    group = unique(f"commit-v{version}")
    result = commit(
        client,
        version,
        group,
        {(topic, 0): 10, (topic, 2): 12},
        metadata=f"v{version}",
        leader_epoch=4,
    )
    assert result == {(topic, 0): E.none, (topic, 2): E.none}
    found = fetch_one(client, group, [(topic, 0), (topic, 1), (topic, 2)])
    assert found[(topic, 0)].offset == 10 and found[(topic, 2)].offset == 12
    assert found[(topic, 0)].metadata == f"v{version}"
    assert found[(topic, 0)].leader_epoch == (4 if version >= 6 else -1)
    assert found[(topic, 1)].offset == -1 and found[(topic, 1)].error == E.none
    # A second commit overwrites; null metadata reads back as "".
    commit(client, version, group, {(topic, 0): 11}, metadata=None)
    found = fetch_one(client, group, [(topic, 0)])
    assert (found[(topic, 0)].offset, found[(topic, 0)].metadata) == (11, "")


@pytest.mark.parametrize("version", range(1, 10))
def test_offset_fetch_every_version(client: WireClient, topic: str, version: int) -> None:
    group, other, unknown = unique("fetch"), unique("fetch-other"), unique("fetch-unknown")
    commit(client, 9, group, {(topic, 0): 100, (topic, 1): 101}, leader_epoch=2)
    commit(client, 9, other, {(topic, 2): 200})
    wanted = [(topic, 0), (topic, 1), (topic, 2), ("no-such-topic", 0)]
    error, found = fetch_offsets(client, version, {group: wanted})[group]
    assert error == E.none
    assert {tp: f.offset for tp, f in found.items()} == {
        (topic, 0): 100,
        (topic, 1): 101,
        (topic, 2): -1,
        ("no-such-topic", 0): -1,
    }
    assert all(f.error == E.none for f in found.values())
    if version >= 5:
        assert found[(topic, 0)].leader_epoch == 2 and found[(topic, 2)].leader_epoch == -1
    # An unknown group has no offsets (not an error).
    error, found = fetch_offsets(client, version, {unknown: [(topic, 0)]})[unknown]
    assert (error, found[(topic, 0)].offset) == (E.none, -1)
    if version >= 2:  # null topics: every committed partition of the group
        error, found = fetch_offsets(client, version, {group: None})[group]
        assert {tp: f.offset for tp, f in found.items()} == {(topic, 0): 100, (topic, 1): 101}
        assert fetch_offsets(client, version, {unknown: None})[unknown] == (E.none, {})
    if version >= 8:  # several groups in one request
        answer = fetch_offsets(
            client, version, {group: [(topic, 1)], other: None, unknown: [(topic, 0)]}
        )
        assert list(answer) == [group, other, unknown]
        assert answer[group][1][(topic, 1)].offset == 101
        assert {tp: f.offset for tp, f in answer[other][1].items()} == {(topic, 2): 200}
        assert answer[unknown][1][(topic, 0)].offset == -1


def test_offset_commit_member_errors(group_broker: BrokerProcess, topic: str) -> None:
    group = unique("commit-errors")
    with WireClient(group_broker.bootstrap) as a, WireClient(group_broker.bootstrap) as b:
        m = single_member_group(a, group)
        gen, mid = m.generation, m.member_id
        tp = (topic, 0)
        assert commit(a, 9, group, {tp: 1}, generation=gen, member_id=mid) == {tp: E.none}
        assert commit(a, 9, group, {tp: 2}, generation=gen + 1, member_id=mid) == {
            tp: E.illegal_generation
        }
        assert commit(a, 9, group, {tp: 2}, generation=gen, member_id="who") == {
            tp: E.unknown_member_id
        }
        # A standalone commit into a group with members is refused.
        assert commit(a, 9, group, {tp: 2}) == {tp: E.unknown_member_id}
        # A commit with a generation to a group that does not exist.
        assert commit(a, 9, unique("nogroup"), {tp: 2}, generation=3, member_id="x") in (
            {tp: E.unknown_member_id},
            {tp: E.illegal_generation},
            {tp: E.group_id_not_found},
        )
        # Per partition: too-large metadata and unknown partitions fail, the rest commit.
        result = commit(
            a, 9, group, {(topic, 1): 5}, generation=gen, member_id=mid, metadata="x" * 4097
        )
        assert result == {(topic, 1): E.offset_metadata_too_large}
        assert commit(
            a, 9, group, {(topic, 1): 5}, generation=gen, member_id=mid, metadata="x" * 4096
        ) == {(topic, 1): E.none}
        result = commit(
            a,
            9,
            group,
            {(topic, 2): 6, (topic, 99): 1, ("no-such-topic", 0): 1},
            generation=gen,
            member_id=mid,
        )
        assert result == {
            (topic, 2): E.none,
            (topic, 99): E.unknown_topic_or_partition,
            ("no-such-topic", 0): E.unknown_topic_or_partition,
        }
        found = fetch_one(a, group, None)
        assert {tp: f.offset for tp, f in found.items()} == {
            (topic, 0): 1,
            (topic, 1): 5,
            (topic, 2): 6,
        }
        # Commits while the group rebalances: accepted in PreparingRebalance (members
        # commit as they revoke), refused in CompletingRebalance.
        parked = send_join_new(b, 9, group)
        assert commit(a, 9, group, {tp: 3}, generation=gen, member_id=mid) == {tp: E.none}
        rejoined = join(a, 9, group, mid)
        follower = parked.result()
        assert describe_one(a, group).group_state == "CompletingRebalance"
        assert commit(a, 9, group, {tp: 4}, generation=rejoined.generation_id, member_id=mid) == {
            tp: E.rebalance_in_progress
        }
        assert commit(a, 9, group, {tp: 4}, generation=gen, member_id=mid) == {
            tp: E.illegal_generation
        }
        sync(a, 5, group, rejoined.generation_id, mid, {mid: b"", follower.member_id: b""})
        assert commit(a, 9, group, {tp: 4}, generation=rejoined.generation_id, member_id=mid) == {
            tp: E.none
        }
        assert fetch_one(a, group, [tp])[tp].offset == 4
        leave(a, 5, group, [(mid, None), (follower.member_id, None)])
        # Empty again: standalone commits are accepted.
        assert commit(a, 9, group, {tp: 9}) == {tp: E.none}


@pytest.mark.parametrize("version", [7, 8, 9])
def test_offset_commit_fenced_instance(client: WireClient, topic: str, version: int) -> None:
    group = unique("commit-fenced")
    m = single_member_group(client, group, instance_id="static-1")
    tp = (topic, 0)
    assert commit(
        client,
        version,
        group,
        {tp: 1},
        generation=m.generation,
        member_id=m.member_id,
        instance_id="static-1",
    ) == {tp: E.none}
    assert commit(
        client,
        version,
        group,
        {tp: 2},
        generation=m.generation,
        member_id="stale",
        instance_id="static-1",
    ) == {tp: E.fenced_instance_id}
    assert fetch_one(client, group, [tp])[tp].offset == 1
    leave(client, 5, group, [(m.member_id, "static-1")])


def test_offset_delete(group_broker: BrokerProcess, topic: str) -> None:
    group = unique("offset-delete")
    with WireClient(group_broker.bootstrap) as wire:
        other = create_topic(wire, unique("other"), 2)
        meta = subscription([topic])
        m = single_member_group(
            wire,
            group,
            protocols=(("range", meta),),
            assignment_bytes=assignment({topic: [0, 1, 2]}),
        )
        commit(
            wire,
            9,
            group,
            {(topic, 0): 1, (other, 0): 2, (other, 1): 3},
            generation=m.generation,
            member_id=m.member_id,
        )
        error, results = offset_delete(
            wire, group, [(topic, 0), (other, 0), (other, 5), ("no-such-topic", 0)]
        )
        assert error == E.none
        assert results == {
            (topic, 0): E.group_subscribed_to_topic,
            (other, 0): E.none,
            (other, 5): E.unknown_topic_or_partition,
            ("no-such-topic", 0): E.unknown_topic_or_partition,
        }
        found = fetch_one(wire, group, None)
        assert {tp: f.offset for tp, f in found.items()} == {(topic, 0): 1, (other, 1): 3}
        # Once the group is empty, its offsets of subscribed topics can go too.
        leave(wire, 5, group, [(m.member_id, None)])
        error, results = offset_delete(wire, group, [(topic, 0)])
        assert (error, results) == (E.none, {(topic, 0): E.none})
        assert {tp for tp in fetch_one(wire, group, None)} == {(other, 1)}
        error, results = offset_delete(wire, unique("nogroup"), [(topic, 0)])
        assert (error, results) == (E.group_id_not_found, {})


# -- bad input -----------------------------------------------------------------------------
def test_huge_member_metadata(group_broker: BrokerProcess) -> None:
    """1 MiB of protocol metadata: the group works or fails cleanly, the broker lives."""
    group = unique("huge")
    big = b"m" * (1 << 20)
    with WireClient(group_broker.bootstrap) as wire:
        joined = join_new(wire, 9, group, protocols=(("range", big),))
        assert joined.error_code == E.none
        assert joined.members[0].metadata == big
        synced = sync(
            wire, 5, group, joined.generation_id, joined.member_id, {joined.member_id: big}
        )
        assert synced.error_code == E.none and synced.assignment == big
        described = describe_one(wire, group)
        assert described.members[0].member_metadata == big
        assert heartbeat(wire, 4, group, joined.generation_id, joined.member_id) == E.none
        leave(wire, 5, group, [(joined.member_id, None)])
    with WireClient(group_broker.bootstrap) as wire:  # still serving
        assert describe_one(wire, group).group_state == "Empty"


def test_bad_group_ids(client: WireClient, topic: str) -> None:
    assert join(client, 9, "").error_code == E.invalid_group_id
    assert sync(client, 5, "", 1, "m").error_code == E.invalid_group_id
    assert heartbeat(client, 4, "", 1, "m") == E.invalid_group_id
    assert leave(client, 5, "", [("m", None)]).error_code == E.invalid_group_id
    assert commit(client, 9, "", {(topic, 0): 1}) == {(topic, 0): E.invalid_group_id}
    (d,) = describe(client, 5, [""])
    assert d.error_code == E.invalid_group_id
    assert delete_groups(client, 2, [""]) == {"": E.invalid_group_id}
    assert fetch_offsets(client, 9, {"": [(topic, 0)]})[""][0] == E.invalid_group_id


# -- timeouts of the join and sync phases ----------------------------------------------
def test_member_not_rejoining_is_dropped_after_the_rebalance_timeout(
    group_broker: BrokerProcess,
) -> None:
    """A rebalance waits for every member at most the rebalance timeout; a dynamic
    member that did not rejoin by then leaves the group (its session is still alive)."""
    group = unique("rebalance-timeout")
    with WireClient(group_broker.bootstrap) as a, WireClient(group_broker.bootstrap) as b:
        first = join_new(a, 9, group, rebalance_ms=800)
        sync(a, 5, group, first.generation_id, first.member_id, {first.member_id: b"a"})
        members = rebalance_in(
            [Member(a, group, first.member_id, first.generation_id, first.member_id)],
            [b],
            rebalance_ms=800,
        )
        # a starts a rebalance by rejoining with new metadata; b never rejoins.
        parked = send_join(
            a, 9, group, members[0].member_id, protocols=(("range", b"new"),), rebalance_ms=800
        )
        result = parked.result()  # answered once b is dropped, ~0.8 s later
        assert result.error_code == E.none
        assert [m.member_id for m in result.members] == [members[0].member_id]
        assert (
            heartbeat(b, 4, group, members[1].generation, members[1].member_id)
            == E.unknown_member_id
        )
        leave(a, 5, group, [(members[0].member_id, None)])


def test_member_not_syncing_is_dropped_after_the_rebalance_timeout(client: WireClient) -> None:
    group = unique("sync-timeout")
    joined = join_new(client, 9, group, rebalance_ms=600, session_ms=10_000)
    assert joined.error_code == E.none
    # No SyncGroup: the member is removed once the rebalance timeout passes.
    wait_for(lambda: describe_one(client, group).group_state == "Empty", 10, "sync timeout")
    late = sync(client, 5, group, joined.generation_id, joined.member_id)
    assert late.error_code == E.unknown_member_id


def test_broker_group_settings(tmp_path: Path) -> None:
    """group.max.size, group.max.session.timeout.ms, offset.metadata.max.bytes,
    offsets.topic.num.partitions and group.initial.rebalance.delay.ms from the broker's
    configuration."""
    from tests.groups.conftest import group_broker_process

    broker = group_broker_process(
        tmp_path / "data",
        "--override",
        "group.max.size=2",
        "--override",
        "group.max.session.timeout.ms=20000",
        "--override",
        "offset.metadata.max.bytes=16",
        "--override",
        "offsets.topic.num.partitions=7",
        "--override",
        "group.initial.rebalance.delay.ms=400",  # after GROUP_ARGS' 0: the last one counts
    ).start()
    try:
        group = unique("settings")
        with (
            WireClient(broker.bootstrap) as a,
            WireClient(broker.bootstrap) as b,
            WireClient(broker.bootstrap) as c,
        ):
            assert find_coordinator(a, 6, [group])[0][4] == E.none
            (offsets,) = metadata(a, [OFFSETS_TOPIC]).topics
            assert len(offsets.partitions) == 7
            topic = create_topic(a, unique("t"), 1)
            assert join(a, 9, group, session_ms=20_001).error_code == E.invalid_session_timeout
            first = single_member_group(a, group, session_ms=20_000)
            members = rebalance_in([first], [b])
            refused = join(c, 9, group)  # before any MEMBER_ID_REQUIRED step, as Kafka
            assert refused.error_code == E.group_max_size_reached
            m = members[0]
            ok = commit(
                a,
                9,
                group,
                {(topic, 0): 1},
                generation=m.generation,
                member_id=m.member_id,
                metadata="x" * 16,
            )
            assert ok == {(topic, 0): E.none}
            big = commit(
                a,
                9,
                group,
                {(topic, 0): 2},
                generation=m.generation,
                member_id=m.member_id,
                metadata="x" * 17,
            )
            assert big == {(topic, 0): E.offset_metadata_too_large}
            leave(a, 5, group, [(x.member_id, None) for x in members])
            # Members joining a new group within the initial delay form its first
            # generation together (Kafka's InitialDelayedJoin).
            starting = unique("initial-delay")
            started = time.monotonic()
            first_join, second_join = send_join(a, 3, starting), send_join(b, 3, starting)
            results = [first_join.result(), second_join.result()]
            assert time.monotonic() - started >= 0.35
            assert [r.generation_id for r in results] == [1, 1]
            assert sorted(len(r.members) for r in results) == [0, 2]
            leave(a, 5, starting, [(r.member_id, None) for r in results])
        sizes = {
            d.name: sum(f.stat().st_size for f in d.glob("*.log"))
            for d in broker.data_dir.glob(f"{OFFSETS_TOPIC}-*")
        }
        assert len(sizes) == 7
        assert {n for n, s in sizes.items() if s} == {
            f"{OFFSETS_TOPIC}-{coordinator_partition(g, 7)}" for g in (group, starting)
        }
        assert "Traceback" not in broker.log()
    finally:
        try:
            broker.stop()
        finally:
            broker.kill()


def test_offsets_of_a_deleted_topic_go_with_it(client: WireClient) -> None:
    """As Kafka (onPartitionsDeleted): a deleted topic's committed offsets are removed, so
    a topic re-created under the same name does not inherit them."""
    from tests.server.test_admin import delete_topics

    group, name = unique("deleted-topic"), unique("short-lived")
    create_topic(client, name, 2)
    keep = create_topic(client, unique("kept"), 1)
    assert commit(client, 9, group, {(name, 0): 5, (name, 1): 6, (keep, 0): 7}) == {
        (name, 0): E.none,
        (name, 1): E.none,
        (keep, 0): E.none,
    }
    assert delete_topics(client, 6, [name])[name].error_code == E.none

    def offsets() -> dict[tuple[str, int], int]:
        return {tp: f.offset for tp, f in fetch_one(client, group, None).items()}

    wait_for(lambda: offsets() == {(keep, 0): 7}, 10, "the deleted topic's offsets gone")
    create_topic(client, name, 2)
    found = fetch_one(client, group, [(name, 0), (name, 1)])
    assert {tp: f.offset for tp, f in found.items()} == {(name, 0): -1, (name, 1): -1}
