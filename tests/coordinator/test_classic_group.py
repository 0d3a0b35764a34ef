"""ClassicGroup, the classic group protocol, driven with a fake clock (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordinator.group.classic import (
    ClassicGroup,
    ErrorName,
    GroupState,
    JoinRequest,
    JoinResult,
)
from odradek.coordinator.group.classic_model import (
    LEGAL_TRANSITIONS,
    Member,
    consumer_subscription_topics,
    select_protocol,
)
from tests.coordinator.classic_support import (
    RANGE,
    REBALANCE_MS,
    ROUNDROBIN,
    SESSION_MS,
    STICKY,
    Harness,
    consumer_subscription,
    request,
)

S = GroupState


def two_member_group(session_ms: int = SESSION_MS, **settings: int) -> tuple[Harness, str, str]:
    """A Stable group of a (leader) and b, both dynamic."""
    h = Harness(**settings)
    a, b = h.form(
        request(client_id="a", session_ms=session_ms), request(client_id="b", session_ms=session_ms)
    )
    assert a.leader_id == a.member_id
    return h, a.member_id, b.member_id


def test_error_names_are_kafka_error_codes() -> None:
    for name, value in vars(ErrorName).items():
        if name.isupper():
            assert ErrorCode[value.lower()].name == value.lower()


# -- state transitions ------------------------------------------------------------------
def test_legal_transitions_are_kafkas() -> None:
    expected = {
        S.EMPTY: {S.PREPARING_REBALANCE, S.DEAD},
        S.PREPARING_REBALANCE: {S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
        S.COMPLETING_REBALANCE: {S.STABLE, S.PREPARING_REBALANCE, S.DEAD},
        S.STABLE: {S.PREPARING_REBALANCE, S.DEAD},
        S.DEAD: set(),
    }
    assert expected == LEGAL_TRANSITIONS


@pytest.mark.parametrize(
    ("start", "to"),
    [
        (S.EMPTY, S.STABLE),
        (S.EMPTY, S.COMPLETING_REBALANCE),
        (S.STABLE, S.EMPTY),
        (S.STABLE, S.COMPLETING_REBALANCE),
        (S.PREPARING_REBALANCE, S.STABLE),
        (S.COMPLETING_REBALANCE, S.EMPTY),
        (S.DEAD, S.EMPTY),
        (S.DEAD, S.PREPARING_REBALANCE),
    ],
)
def test_illegal_transition_asserts(start: GroupState, to: GroupState) -> None:
    group = Harness().group
    group.state = start
    with pytest.raises(AssertionError, match="illegal transition"):
        group._transition(to)


def test_transition_records_time_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    h.now = 5_000
    with caplog.at_level("INFO"):
        h.group._transition(S.PREPARING_REBALANCE, "test")
    assert h.group.state_timestamp_ms == 5_000
    assert "Empty -> PreparingRebalance" in caplog.text


def test_full_cycle_empty_to_stable_to_empty() -> None:
    h = Harness()
    assert h.group.state is S.EMPTY and h.group.generation_id == 0
    waiter = h.join(request(client_id="a"))
    assert h.group.state is S.PREPARING_REBALANCE
    h.advance(3_000)
    joined = h.join_result(waiter)
    assert h.group.state is S.COMPLETING_REBALANCE
    assert (joined.error, joined.generation_id, joined.protocol_name) == ("NONE", 1, "range")
    assert joined.leader_id == joined.member_id == "a-1"
    assert joined.members[0].metadata == RANGE[1]
    synced = h.sync_result(h.sync("a-1", 1, {"a-1": b"p0"}))
    assert (synced.error, synced.assignment, synced.protocol_type) == ("NONE", b"p0", "consumer")
    assert h.group.state is S.STABLE and h.group.take_persist_request()
    assert not h.group.take_persist_request()  # once
    assert h.group.leave("a-1", None) == "NONE"
    assert h.group.state is S.EMPTY and h.group.generation_id == 2
    assert h.group.leader_id == "" and h.group.protocol_name is None
    assert h.group.protocol_type == "consumer"  # kept, as Kafka does
    assert h.group.take_persist_request()


# -- JoinGroup validation ---------------------------------------------------------------
@pytest.mark.parametrize("session_ms", [5_999, 1_800_001, 0, -1])
def test_join_session_timeout_out_of_range(session_ms: int) -> None:
    h = Harness()
    result = h.join(request(session_ms=session_ms))
    assert isinstance(result, JoinResult) and result.error == "INVALID_SESSION_TIMEOUT"
    assert h.group.state is S.EMPTY and not h.group.members


@pytest.mark.parametrize(
    "req",
    [request(protocol_type=""), request(protocols=())],
    ids=["no protocol type", "no protocols"],
)
def test_join_without_protocols_is_inconsistent(req: JoinRequest) -> None:
    h = Harness()
    result = h.join(req)
    assert isinstance(result, JoinResult) and result.error == "INCONSISTENT_GROUP_PROTOCOL"


def test_join_with_another_protocol_type_or_no_common_protocol() -> None:
    h, _, _ = two_member_group()
    other_type = h.join(request(protocol_type="connect"))
    assert isinstance(other_type, JoinResult) and other_type.error == "INCONSISTENT_GROUP_PROTOCOL"
    disjoint = h.join(request(protocols=(STICKY,)))
    assert isinstance(disjoint, JoinResult) and disjoint.error == "INCONSISTENT_GROUP_PROTOCOL"
    assert h.group.state is S.STABLE and len(h.group.members) == 2


def test_join_of_a_dead_group() -> None:
    h = Harness()
    h.group.mark_dead()
    result = h.join(request())
    assert isinstance(result, JoinResult) and result.error == "COORDINATOR_NOT_AVAILABLE"


def test_join_with_unknown_member_id() -> None:
    h, _, _ = two_member_group()
    result = h.join(request("nobody"))
    assert isinstance(result, JoinResult)
    assert (result.error, result.member_id) == ("UNKNOWN_MEMBER_ID", "nobody")
    empty = Harness()
    result = empty.join(request("nobody"))
    assert isinstance(result, JoinResult) and result.error == "UNKNOWN_MEMBER_ID"


def test_group_max_size() -> None:
    h = Harness(max_size=2)
    a = h.join(request(client_id="a"))
    b = h.join(request(client_id="b"))
    refused = h.join(request(client_id="c"))
    assert isinstance(refused, JoinResult) and refused.error == "GROUP_MAX_SIZE_REACHED"
    h.advance(3_000)
    h.advance(3_000)
    results = [h.join_result(a), h.join_result(b)]
    h.stabilize(results)
    refused = h.join(request(client_id="c", require_known=True))
    assert isinstance(refused, JoinResult) and refused.error == "GROUP_MAX_SIZE_REACHED"
    # members already in the group may still rejoin
    assert isinstance(h.join(request(results[1].member_id)), JoinResult)


# -- KIP-394: member id required --------------------------------------------------------
def test_member_id_required_two_step_join() -> None:
    h = Harness()
    first = h.join(request(require_known=True, client_id="app"))
    assert isinstance(first, JoinResult)
    assert (first.error, first.member_id, first.generation_id) == (
        "MEMBER_ID_REQUIRED",
        "app-1",
        -1,
    )
    assert h.group.state is S.EMPTY and not h.group.members
    assert h.group.pending_member_ids == {"app-1"}
    waiter = h.join(request("app-1", require_known=True, client_id="app"))
    assert h.group.pending_member_ids == frozenset() and "app-1" in h.group.members
    h.advance(3_000)
    joined = h.join_result(waiter)
    assert (joined.error, joined.member_id, joined.leader_id) == ("NONE", "app-1", "app-1")


def test_pending_member_expires_after_its_session_timeout() -> None:
    h = Harness()
    member_id = h.new_member()
    assert h.group.next_deadline_ms() == h.now + SESSION_MS
    h.advance(SESSION_MS)
    assert h.group.pending_member_ids == frozenset()
    late = h.join(request(member_id))
    assert isinstance(late, JoinResult) and late.error == "UNKNOWN_MEMBER_ID"


def test_pending_member_holds_a_rebalance_until_it_joins_or_expires() -> None:
    h, a, b = two_member_group()
    pending = h.new_member(client_id="c")
    wa = h.join(request(a))  # the leader rejoins: rebalance
    wb = h.join(request(b))
    assert h.group.state is S.PREPARING_REBALANCE  # all members in, but c is pending
    wc = h.join(request(pending, client_id="c"))
    assert h.group.state is S.COMPLETING_REBALANCE
    assert [h.join_result(w).generation_id for w in (wa, wb, wc)] == [2, 2, 2]
    assert len(h.group.members) == 3


def test_pending_member_may_leave() -> None:
    h = Harness()
    member_id = h.new_member()
    assert h.group.leave(member_id, None) == "NONE"
    assert h.group.pending_member_ids == frozenset()


# -- the initial rebalance delay ------------------------------------------------------
def test_initial_delay_waits_even_when_everyone_joined() -> None:
    h = Harness()
    waiter = h.join(request())
    assert h.group.next_deadline_ms() == h.now + 3_000
    h.advance(2_999)
    assert h.group.state is S.PREPARING_REBALANCE and waiter not in h.done
    h.advance(1)
    assert h.join_result(waiter).error == "NONE"


def test_initial_delay_is_extended_while_members_arrive() -> None:
    h = Harness()
    start = h.now
    wa = h.join(request(client_id="a"))
    h.advance(2_000)
    wb = h.join(request(client_id="b"))
    h.advance(1_000)  # start + 3000: b arrived during the delay -> another delay
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.group.next_deadline_ms() == start + 6_000
    h.advance(3_000)  # nobody new since: the phase ends
    assert h.group.state is S.COMPLETING_REBALANCE
    assert {h.join_result(wa).generation_id, h.join_result(wb).generation_id} == {1}


def test_initial_delay_never_exceeds_the_rebalance_timeout() -> None:
    h = Harness()
    start = h.now
    waiters = [h.join(request(client_id="m0", rebalance_ms=10_000))]
    for i in range(1, 8):  # a new member every 2.5 s, forever
        h.advance(2_500)
        if h.group.state is not S.PREPARING_REBALANCE:
            break
        waiters.append(h.join(request(client_id=f"m{i}", rebalance_ms=10_000)))
    assert h.group.state is S.COMPLETING_REBALANCE
    assert h.group.state_timestamp_ms == start + 10_000
    assert all(h.join_result(w).generation_id == 1 for w in waiters)


def test_rebalance_of_a_non_empty_group_ends_when_everyone_rejoined() -> None:
    h, a, b = two_member_group()
    wa = h.join(request(a))
    assert h.group.state is S.PREPARING_REBALANCE and wa not in h.done
    wb = h.join(request(b))
    assert h.group.state is S.COMPLETING_REBALANCE  # no delay, no tick needed
    assert h.join_result(wa).generation_id == h.join_result(wb).generation_id == 2


# -- the join phase ---------------------------------------------------------------------
def test_join_phase_timeout_removes_a_silent_member() -> None:
    h, a, b = two_member_group()
    wa = h.join(request(a))
    for _ in range(3):
        h.advance(REBALANCE_MS // 4)
        assert h.group.heartbeat(1, b, None) == "REBALANCE_IN_PROGRESS"  # alive, not rejoining
    h.advance(REBALANCE_MS // 4)
    joined = h.join_result(wa)
    assert (joined.error, joined.generation_id, joined.leader_id) == ("NONE", 2, a)
    assert [m.member_id for m in joined.members] == [a]
    assert b not in h.group.members and h.group.state is S.COMPLETING_REBALANCE
    assert h.group.heartbeat(1, b, None) == "UNKNOWN_MEMBER_ID"


def test_join_deadline_is_the_largest_rebalance_timeout() -> None:
    h = Harness()
    a, _ = h.form(
        request(client_id="a", rebalance_ms=5_000, session_ms=60_000),
        request(client_id="b", rebalance_ms=30_000, session_ms=60_000),
    )
    h.join(request(a.member_id, rebalance_ms=5_000, session_ms=60_000))
    assert h.group.next_deadline_ms() == h.now + 30_000


def test_leader_is_the_first_member_and_gets_all_metadata() -> None:
    h = Harness()
    results = h.form(
        request(client_id="a", protocols=(RANGE,)),
        request(client_id="b", protocols=(("range", b"b!"),)),
    )
    leader, follower = results
    assert leader.leader_id == follower.leader_id == leader.member_id
    assert [(m.member_id, m.metadata) for m in leader.members] == [
        (leader.member_id, RANGE[1]),
        (follower.member_id, b"b!"),
    ]
    assert follower.members == ()


def test_leader_leaving_mid_rebalance_elects_a_joined_member() -> None:
    h, a, b = two_member_group()
    wc = h.join(request(client_id="c"))  # a new member: rebalance
    wa = h.join(request(a))
    assert h.group.leave(a, None) == "NONE"
    assert h.join_result(wa).error == "UNKNOWN_MEMBER_ID"  # its parked join is answered
    assert h.group.state is S.PREPARING_REBALANCE
    wb = h.join(request(b))
    assert h.group.state is S.COMPLETING_REBALANCE
    rb, rc = h.join_result(wb), h.join_result(wc)
    assert rb.leader_id == rc.leader_id == b  # first in join order of those that joined
    assert [m.member_id for m in rb.members] == [b, rc.member_id]


def test_old_leader_keeps_leading_if_it_rejoined() -> None:
    h, a, b = two_member_group()
    wb = h.join(request(b, protocols=(RANGE, ROUNDROBIN)))  # b changes its metadata
    wa = h.join(request(a))
    assert h.join_result(wa).leader_id == h.join_result(wb).leader_id == a


def test_leader_not_rejoining_is_replaced() -> None:
    h, a, b = two_member_group()
    wb = h.join(request(b, protocols=(RANGE, ROUNDROBIN)))
    h.advance(REBALANCE_MS)
    joined = h.join_result(wb)
    assert joined.leader_id == b and a not in h.group.members


# -- protocol vote ----------------------------------------------------------------------
def member(member_id: str, *protocols: tuple[str, bytes]) -> Member:
    return Member(member_id, None, "c", "h", SESSION_MS, REBALANCE_MS, "consumer", protocols)


def test_protocol_vote_majority() -> None:
    members = [
        member("a", RANGE, ROUNDROBIN),
        member("b", ROUNDROBIN, RANGE),
        member("c", ROUNDROBIN, RANGE),
    ]
    assert select_protocol(members) == "roundrobin"


def test_protocol_vote_only_counts_protocols_everyone_supports() -> None:
    members = [member("a", STICKY, RANGE), member("b", RANGE), member("c", STICKY, RANGE)]
    assert select_protocol(members) == "range"


def test_protocol_vote_tie_goes_to_the_first_vote() -> None:
    assert (
        select_protocol([member("a", RANGE, ROUNDROBIN), member("b", ROUNDROBIN, RANGE)]) == "range"
    )
    assert (
        select_protocol([member("b", ROUNDROBIN, RANGE), member("a", RANGE, ROUNDROBIN)])
        == "roundrobin"
    )


def test_group_votes_at_the_end_of_the_join_phase() -> None:
    h = Harness()
    results = h.form(
        request(client_id="a", protocols=(STICKY, ROUNDROBIN, RANGE)),
        request(client_id="b", protocols=(RANGE, ROUNDROBIN)),
        request(client_id="c", protocols=(ROUNDROBIN,)),
    )
    assert {r.protocol_name for r in results} == {"roundrobin"}
    assert results[0].members[2].metadata == ROUNDROBIN[1]


def test_member_may_switch_to_a_protocol_every_other_member_supports() -> None:
    h = Harness()
    a, b = h.form(
        request(client_id="a", protocols=(RANGE,)),
        request(client_id="b", protocols=(RANGE, STICKY)),
    )
    wa = h.join(request(a.member_id, protocols=(STICKY,)))
    wb = h.join(request(b.member_id, protocols=(RANGE, STICKY)))
    assert h.join_result(wa).protocol_name == h.join_result(wb).protocol_name == "sticky"


# -- known members rejoining ------------------------------------------------------------
def test_follower_rejoin_in_stable_with_same_metadata_gets_the_generation() -> None:
    h, a, b = two_member_group()
    result = h.join(request(b))
    assert isinstance(result, JoinResult)
    assert (result.error, result.generation_id, result.leader_id, result.members) == (
        "NONE",
        1,
        a,
        (),
    )
    assert h.group.state is S.STABLE


def test_follower_rejoin_in_stable_with_new_metadata_rebalances() -> None:
    h, _, b = two_member_group()
    waiter = h.join(request(b, protocols=(RANGE, STICKY)))
    assert h.group.state is S.PREPARING_REBALANCE and waiter not in h.done
    assert h.group.members[b].protocols == (RANGE, STICKY)


def test_leader_rejoin_in_stable_rebalances() -> None:
    h, a, _ = two_member_group()
    h.join(request(a))
    assert h.group.state is S.PREPARING_REBALANCE


def test_rejoin_in_completing_rebalance() -> None:
    h, a, b = two_member_group()
    wa, wb = h.join(request(a)), h.join(request(b))
    ra, rb = h.join_result(wa), h.join_result(wb)
    assert h.group.state is S.COMPLETING_REBALANCE
    again = h.join(request(a))  # a lost its response: same answer, leader with members
    assert isinstance(again, JoinResult)
    assert (again.generation_id, again.members) == (ra.generation_id, ra.members)
    again_b = h.join(request(b))
    assert again_b == rb
    assert h.group.state is S.COMPLETING_REBALANCE
    waiter = h.join(request(b, protocols=(ROUNDROBIN, RANGE)))  # changed: rebalance
    assert h.group.state is S.PREPARING_REBALANCE and waiter not in h.done


def test_rejoin_in_preparing_rebalance_updates_and_parks() -> None:
    h, a, b = two_member_group()
    h.join(request(a))
    waiter = h.join(request(b, protocols=(RANGE, STICKY), session_ms=7_000))
    assert h.group.members[b].protocols == (RANGE, STICKY)
    assert h.group.members[b].session_timeout_ms == 7_000
    assert h.join_result(waiter).error == "NONE"


def test_retried_join_supersedes_the_parked_one() -> None:
    h, a, b = two_member_group()
    first = h.join(request(a))
    second = h.join(request(a))
    assert h.join_result(first).error == "REBALANCE_IN_PROGRESS"
    h.join(request(b))
    assert h.join_result(second).error == "NONE"


# -- KIP-345 static membership -----------------------------------------------------------
STATIC_SESSION_MS = 60_000  # static members use long sessions: restarts fit in them


def static_group(**settings: int) -> tuple[Harness, str, str, dict[str, bytes]]:
    """Stable: a (static "ia", leader) and b (static "ib")."""
    h = Harness(**settings)
    waiters = [
        h.join(request(instance="ia", session_ms=STATIC_SESSION_MS)),
        h.join(request(instance="ib", session_ms=STATIC_SESSION_MS)),
    ]
    h.advance(3_000)
    h.advance(3_000)
    results = [h.join_result(w) for w in waiters]
    assignment = h.stabilize(results)
    h.group.take_persist_request()
    return h, results[0].member_id, results[1].member_id, assignment


def test_static_members_join_without_member_id_required() -> None:
    h = Harness()
    waiter = h.join(request(instance="i", require_known=True))
    assert h.group.pending_member_ids == frozenset()
    assert h.group.static_member_id("i") == "i-1"  # ids of static members start with the instance
    h.advance(3_000)
    assert h.join_result(waiter).member_id == "i-1"


def test_static_follower_restart_in_stable_needs_no_rebalance() -> None:
    h, a, b, assignment = static_group()
    restarted = h.join_now(request(instance="ib"))
    assert restarted.error == "NONE" and restarted.member_id not in (a, b)
    assert (restarted.generation_id, restarted.leader_id, restarted.members) == (1, a, ())
    assert not restarted.skip_assignment
    assert h.group.state is S.STABLE and h.group.generation_id == 1
    assert h.group.take_persist_request()  # the new member id must be persisted
    new_b = restarted.member_id
    assert h.sync_now(new_b, 1, instance="ib").assignment == assignment[b]  # its old one
    # the old id is fenced everywhere
    assert h.group.heartbeat(1, b, "ib") == "FENCED_INSTANCE_ID"
    assert h.sync_now(b, 1, instance="ib").error == "FENCED_INSTANCE_ID"
    old_join = h.join(request(b, instance="ib"))
    assert isinstance(old_join, JoinResult) and old_join.error == "FENCED_INSTANCE_ID"
    assert h.group.validate_offset_commit(1, b, "ib") == "FENCED_INSTANCE_ID"
    assert h.group.leave(b, "ib") == "FENCED_INSTANCE_ID"
    assert h.group.heartbeat(1, new_b, "ib") == "NONE"


def test_static_leader_restart_without_skip_assignment_support() -> None:
    h, a, _, _ = static_group()
    restarted = h.join(request(instance="ia"))
    assert isinstance(restarted, JoinResult)
    # the old leader id, so the restarted client does not think it leads (Kafka < KIP-814)
    assert (restarted.leader_id, restarted.members, restarted.skip_assignment) == (a, (), False)
    assert h.group.leader_id == restarted.member_id
    assert h.group.state is S.STABLE


def test_static_leader_restart_with_skip_assignment() -> None:
    h, _, b, _ = static_group()
    restarted = h.join(request(instance="ia", skip_assignment=True))
    assert isinstance(restarted, JoinResult)
    assert restarted.leader_id == restarted.member_id and restarted.skip_assignment
    assert [m.member_id for m in restarted.members] == [restarted.member_id, b]
    assert h.group.state is S.STABLE


def test_static_restart_with_a_protocol_change_rebalances() -> None:
    h = Harness()
    results = h.form(
        request(instance="i1", protocols=(RANGE, STICKY)),
        request(instance="i2", protocols=(STICKY, RANGE)),
        request(instance="i3", protocols=(RANGE, STICKY)),
    )
    assert results[0].protocol_name == "range"  # 2 votes to 1
    moved = h.join(request(instance="i3", protocols=(STICKY, RANGE)))  # now 2 to 1 for sticky
    assert h.group.state is S.PREPARING_REBALANCE and moved not in h.done
    h.join(request(results[0].member_id, instance="i1", protocols=(RANGE, STICKY)))
    h.join(request(results[1].member_id, instance="i2", protocols=(STICKY, RANGE)))
    assert h.join_result(moved).protocol_name == "sticky"


def test_static_restart_in_completing_rebalance_rebalances() -> None:
    h, a, b, _ = static_group()
    wa, wb = h.join(request(a, instance="ia")), h.join(request(b, instance="ib"))
    h.collect()
    assert h.group.state is S.COMPLETING_REBALANCE
    h.join_result(wa), h.join_result(wb)
    waiter = h.join(request(instance="ib"))
    assert h.group.state is S.PREPARING_REBALANCE and waiter not in h.done


def test_static_restart_while_the_old_instance_is_parked_fences_it() -> None:
    h, a, b, _ = static_group()
    h.join(request(a, instance="ia"))  # rebalance
    old = h.join(request(b, instance="ib"))
    assert h.group.state is S.COMPLETING_REBALANCE
    h.join_result(old)
    old_sync = h.sync(b, 2, instance="ib")
    new = h.join(request(instance="ib"))  # a duplicate instance starts
    assert h.sync_result(old_sync).error == "FENCED_INSTANCE_ID"
    assert h.group.state is S.PREPARING_REBALANCE
    h.join(request(a, instance="ia"))
    joined = h.join_result(new)
    assert joined.error == "NONE" and joined.member_id != b


def test_static_member_not_rejoining_keeps_its_place_in_the_rebalance() -> None:
    h, a, b, _ = static_group()
    wa = h.join(request(a, instance="ia"))
    h.advance(REBALANCE_MS)
    joined = h.join_result(wa)
    assert b in h.group.members  # absent static member kept (Kafka), the leader assigns it
    assert [m.member_id for m in joined.members] == [a, b]
    restarted = h.join(request(instance="ib"))  # it comes back during the sync phase
    assert h.group.state is S.PREPARING_REBALANCE and restarted not in h.done


def test_rebalance_waits_when_only_absent_static_members_remain() -> None:
    h, a, b, _ = static_group()
    wc = h.join(request(client_id="c"))  # a new dynamic member: rebalance
    assert h.group.leave("c-3", None) == "NONE"
    assert h.join_result(wc).error == "UNKNOWN_MEMBER_ID"
    h.advance(REBALANCE_MS)  # the deadline: nobody rejoined, a and b are static
    assert h.group.state is S.PREPARING_REBALANCE and set(h.group.members) == {a, b}
    assert h.group.generation_id == 1
    assert h.group.next_deadline_ms() == h.now + REBALANCE_MS  # waits another timeout
    wa, wb = h.join(request(a, instance="ia")), h.join(request(b, instance="ib"))
    assert h.join_result(wa).generation_id == h.join_result(wb).generation_id == 2


def test_absent_static_members_expire_with_their_sessions() -> None:
    h, a, b, _ = static_group()
    h.join(request(client_id="c"))
    h.group.leave("c-3", None)
    for _ in range(STATIC_SESSION_MS // REBALANCE_MS):
        h.advance(REBALANCE_MS)
    assert h.group.state is S.EMPTY and not h.group.members
    assert a and b


def test_pending_member_id_with_an_instance_id_is_unknown() -> None:
    h = Harness()
    pending = h.new_member()
    result = h.join_now(request(pending, instance="i"))
    assert result.error == "UNKNOWN_MEMBER_ID"


def test_everyone_leaving_mid_rebalance_empties_the_group() -> None:
    h, a, b = two_member_group()
    wa = h.join(request(a))
    h.group.leave(a, None)
    assert h.join_result(wa).error == "UNKNOWN_MEMBER_ID"
    assert h.group.state is S.PREPARING_REBALANCE  # b has not rejoined
    h.group.take_persist_request()
    h.group.leave(b, None)
    assert h.group.state is S.EMPTY and h.group.take_persist_request()


def test_static_instance_with_another_member_id() -> None:
    h, a, _, _ = static_group()
    crossed = h.join(request(a, instance="ib"))
    assert isinstance(crossed, JoinResult) and crossed.error == "FENCED_INSTANCE_ID"
    unknown_instance = h.join(request(a, instance="nope"))
    assert (
        isinstance(unknown_instance, JoinResult) and unknown_instance.error == "UNKNOWN_MEMBER_ID"
    )
    assert h.group.heartbeat(1, a, "ib") == "FENCED_INSTANCE_ID"
    assert h.group.heartbeat(1, a, None) == "NONE"  # the id alone is enough


def test_static_member_leave_by_instance_id_only() -> None:
    h, a, b, _ = static_group()
    assert h.group.leave("", "ib") == "NONE"  # KIP-345 admin removal
    assert b not in h.group.members and h.group.static_member_id("ib") is None
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.group.leave("", "ib") == "UNKNOWN_MEMBER_ID"
    assert h.group.leave("", None) == "UNKNOWN_MEMBER_ID"
    assert a in h.group.members


# -- SyncGroup ----------------------------------------------------------------------------
def test_sync_errors() -> None:
    h, a, b = two_member_group()
    assert h.sync_now("nobody", 1).error == "UNKNOWN_MEMBER_ID"
    assert h.sync_now(a, 0).error == "ILLEGAL_GENERATION"
    assert h.sync_now(a, 1, protocol_type="connect").error == "INCONSISTENT_GROUP_PROTOCOL"
    assert h.sync_now(a, 1, protocol_name="sticky").error == "INCONSISTENT_GROUP_PROTOCOL"
    assert h.sync_now(a, 1, protocol_type="consumer", protocol_name="range").error == "NONE"
    h.join(request(a))
    assert h.sync_now(b, 1).error == "REBALANCE_IN_PROGRESS"
    h.group.mark_dead()
    assert h.sync_now(b, 1).error == "COORDINATOR_NOT_AVAILABLE"


def test_sync_waits_for_the_leader_and_fills_missing_assignments() -> None:
    h = Harness()
    results = h.form(request(client_id="a"), request(client_id="b"))
    a, b = (r.member_id for r in results)
    wa, wb = h.join(request(a)), h.join(request(b))
    h.join_result(wa), h.join_result(wb)
    h.group.take_persist_request()
    follower = h.sync(b, 2)
    assert h.group.state is S.COMPLETING_REBALANCE and follower not in h.done
    assert not h.group.take_persist_request()
    leader = h.sync(a, 2, {a: b"mine", "stranger": b"x"})  # b missing
    assert h.group.state is S.STABLE and h.group.take_persist_request()
    assert list(h.done) == [leader, follower]  # completion order: member order
    assert h.sync_result(leader).assignment == b"mine"
    assert h.sync_result(follower).assignment == b""
    assert h.sync_now(b, 2).assignment == b""


def test_sync_in_stable_returns_the_current_assignment() -> None:
    h, _, b = two_member_group()
    assert h.sync_now(b, 1, {b: b"ignored"}).assignment == f"a:{b}".encode()


def test_retried_sync_supersedes_the_parked_one() -> None:
    h, a, b = two_member_group()
    wa, wb = h.join(request(a)), h.join(request(b))
    h.join_result(wa), h.join_result(wb)
    first, second = h.sync(b), h.sync(b)
    assert h.sync_result(first).error == "REBALANCE_IN_PROGRESS"
    h.sync(a, None, {a: b"1", b: b"2"})
    assert h.sync_result(second).assignment == b"2"


def test_sync_phase_timeout_removes_members_that_did_not_sync() -> None:
    h, a, b = two_member_group(session_ms=60_000)
    wa = h.join(request(a, session_ms=60_000))
    wb = h.join(request(b, session_ms=60_000))
    h.join_result(wa), h.join_result(wb)
    follower = h.sync(b, 2)
    assert h.group.next_deadline_ms() == h.now + REBALANCE_MS
    h.advance(REBALANCE_MS)  # the leader never syncs
    assert h.sync_result(follower).error == "REBALANCE_IN_PROGRESS"
    assert a not in h.group.members and h.group.state is S.PREPARING_REBALANCE
    assert h.group.members[b].assignment == b""
    rejoined = h.join(request(b, session_ms=60_000))
    assert h.join_result(rejoined).leader_id == b


def test_sync_phase_timeout_also_applies_in_stable() -> None:
    h, a, b = two_member_group()
    wa, wb = h.join(request(a)), h.join(request(b))
    h.join_result(wa), h.join_result(wb)
    h.sync_result(h.sync(a, 2, {a: b"1", b: b"2"}))
    assert h.group.state is S.STABLE
    for _ in range(4):  # b never fetches its assignment, though both heartbeat
        h.group.heartbeat(2, a, None), h.group.heartbeat(2, b, None)
        h.advance(REBALANCE_MS // 4)
    assert b not in h.group.members and h.group.state is S.PREPARING_REBALANCE


def test_sync_phase_deadline_is_cleared_when_everyone_synced() -> None:
    h, _, _ = two_member_group()
    assert h.group.next_deadline_ms() == h.now + SESSION_MS  # only sessions remain


# -- Heartbeat ----------------------------------------------------------------------------
def test_heartbeat_errors_and_states() -> None:
    h = Harness()
    assert h.group.heartbeat(0, "x", None) == "UNKNOWN_MEMBER_ID"  # Empty
    h, a, b = two_member_group()
    assert h.group.heartbeat(1, a, None) == "NONE"
    assert h.group.heartbeat(0, a, None) == "ILLEGAL_GENERATION"
    assert h.group.heartbeat(1, "x", None) == "UNKNOWN_MEMBER_ID"
    h.join(request(a))
    assert h.group.heartbeat(1, b, None) == "REBALANCE_IN_PROGRESS"
    h.join(request(b))
    assert h.group.state is S.COMPLETING_REBALANCE
    assert h.group.heartbeat(2, b, None) == "NONE"
    h.group.mark_dead()
    assert h.group.heartbeat(2, b, None) == "COORDINATOR_NOT_AVAILABLE"


def test_heartbeat_during_rebalance_keeps_the_member_alive() -> None:
    h, a, b = two_member_group()
    h.join(request(a, rebalance_ms=60_000))
    for _ in range(5):
        h.advance(SESSION_MS - 1)
        assert h.group.heartbeat(1, b, None) == "REBALANCE_IN_PROGRESS"
    assert b in h.group.members and h.group.state is S.PREPARING_REBALANCE


# -- session expiry ---------------------------------------------------------------------
def test_session_expiry_removes_the_member_and_rebalances() -> None:
    h, a, b = two_member_group()
    h.advance(SESSION_MS - 1)
    assert h.group.heartbeat(1, a, None) == "NONE"
    h.advance(1)
    assert b not in h.group.members and h.group.state is S.PREPARING_REBALANCE
    assert h.group.heartbeat(1, a, None) == "REBALANCE_IN_PROGRESS"


def test_session_expiry_of_the_last_member_empties_the_group() -> None:
    h = Harness()
    h.form(request())
    h.group.take_persist_request()
    h.advance(SESSION_MS)
    assert h.group.state is S.EMPTY and not h.group.members
    assert h.group.take_persist_request() and h.group.generation_id == 2
    assert h.group.next_deadline_ms() is None


def test_no_session_expiry_while_parked_in_join() -> None:
    h, a, b = two_member_group()
    h.join(request(a, rebalance_ms=100_000))
    h.advance(SESSION_MS * 3)
    assert a in h.group.members  # its parked JoinGroup proves it is alive
    assert b not in h.group.members  # b neither rejoined nor heartbeated: expired
    assert h.group.state is S.COMPLETING_REBALANCE  # and the join phase ended without it


def test_no_session_expiry_while_parked_in_sync() -> None:
    h, a, b = two_member_group()
    wa, wb = h.join(request(a, rebalance_ms=100_000)), h.join(request(b))
    h.join_result(wa), h.join_result(wb)
    follower = h.sync(b, 2)
    for _ in range(6):  # the leader is slow computing the assignment, but heartbeats
        h.advance(SESSION_MS // 2)
        assert h.group.heartbeat(2, a, None) == "NONE"
    assert b in h.group.members and follower not in h.done


def test_new_member_parked_too_long_is_dropped() -> None:
    h, a, b = two_member_group(new_member_join_timeout_ms=60_000)
    h.group.members[a].rebalance_timeout_ms = 1_000_000
    waiter = h.join(request(client_id="c", rebalance_ms=1_000_000))
    for _ in range(40):  # a and b heartbeat but never rejoin
        h.advance(SESSION_MS // 2)
        h.group.heartbeat(1, a, None), h.group.heartbeat(1, b, None)
        if waiter in h.done:
            break
    result = h.join_result(waiter)
    assert result.error == "UNKNOWN_MEMBER_ID"
    assert h.now - 1_000 >= h.settings.new_member_join_timeout_ms
    assert len(h.group.members) == 2


def test_tick_applies_everything_due_in_deadline_order() -> None:
    h = Harness()
    results = h.form(request(client_id="a"), request(client_id="b"), request(client_id="c"))
    h.advance(SESSION_MS * 10)  # everyone silent: all expire in one tick
    assert h.group.state is S.EMPTY and not h.group.members
    assert results


# -- LeaveGroup ---------------------------------------------------------------------------
def test_leave_errors() -> None:
    h, a, _ = two_member_group()
    assert h.group.leave("nobody", None) == "UNKNOWN_MEMBER_ID"
    assert h.group.leave(a, "some-instance") == "UNKNOWN_MEMBER_ID"
    h.group.mark_dead()
    assert h.group.leave(a, None) == "COORDINATOR_NOT_AVAILABLE"


def test_leave_triggers_a_rebalance_and_answers_a_parked_join() -> None:
    h, a, b = two_member_group()
    assert h.group.leave(b, None) == "NONE"
    assert h.group.state is S.PREPARING_REBALANCE
    wa = h.join(request(a))
    assert h.join_result(wa).members[0].member_id == a


def test_leave_of_the_last_member_empties_the_group_and_persists() -> None:
    h, a, b = two_member_group()
    h.group.take_persist_request()
    h.group.leave(a, None)
    wb = h.join(request(b))
    assert h.join_result(wb).generation_id == 2
    h.sync_result(h.sync(b, 2, {b: b"x"}))
    h.group.take_persist_request()
    assert h.group.leave(b, None) == "NONE"
    assert h.group.state is S.EMPTY and h.group.take_persist_request()


def test_leave_of_a_member_parked_in_sync_answers_it() -> None:
    h, a, b = two_member_group()
    wa, wb = h.join(request(a)), h.join(request(b))
    h.join_result(wa), h.join_result(wb)
    parked = h.sync(b, 2)
    h.group.leave(b, None)
    assert h.sync_result(parked).error == "UNKNOWN_MEMBER_ID"


# -- OffsetCommit -----------------------------------------------------------------------
def test_offset_commit_rules() -> None:
    h = Harness()
    v = h.group.validate_offset_commit
    assert v(-1, "", None) == "NONE"  # standalone consumer, Empty group
    # Generation < 0 to an Empty group is accepted whatever member id comes with it
    # (librdkafka's KIP-848 consumer sends the id it made before joining).
    assert v(-1, "made-up-id", None) == "NONE"
    assert v(-1, "made-up-id", "instance") == "NONE"
    assert v(1, "x", None) == "UNKNOWN_MEMBER_ID"
    h, a, b = two_member_group()
    v = h.group.validate_offset_commit
    assert v(-1, "", None) == "UNKNOWN_MEMBER_ID"  # only members commit to a live group
    assert v(-1, "made-up-id", None) == "UNKNOWN_MEMBER_ID"
    assert v(-1, a, None) == "ILLEGAL_GENERATION"
    assert v(-1, "", None, transactional=True) == "NONE"
    assert v(1, "x", None) == "UNKNOWN_MEMBER_ID"
    assert v(0, a, None) == "ILLEGAL_GENERATION"
    assert v(1, a, None) == "NONE"
    h.join(request(a))  # PreparingRebalance: members commit while they revoke
    assert v(1, b, None) == "NONE"
    h.join(request(b))
    assert h.group.state is S.COMPLETING_REBALANCE
    assert v(2, b, None) == "REBALANCE_IN_PROGRESS"
    assert v(2, b, None, transactional=True) == "NONE"
    h.group.mark_dead()
    assert v(2, b, None) == "COORDINATOR_NOT_AVAILABLE"


def test_offset_commit_counts_as_heartbeat() -> None:
    h, a, b = two_member_group()
    h.advance(SESSION_MS - 1)
    assert h.group.validate_offset_commit(1, b, None) == "NONE"
    h.group.heartbeat(1, a, None)
    h.advance(SESSION_MS - 1)
    assert b in h.group.members


# -- completion, drain, death -----------------------------------------------------------
def test_drain_returns_each_waiter_once() -> None:
    h = Harness()
    waiter = object()
    assert h.group.join(request(), waiter) is None
    assert h.group.drain() == []
    h.now += 3_000
    h.group.tick()
    completed = h.group.drain()
    assert [w for w, _ in completed] == [waiter]
    assert h.group.drain() == []
    h.group.tick()
    assert h.group.drain() == []


def test_mark_dead_answers_parked_requests() -> None:
    h, a, b = two_member_group()
    wa, wb = h.join(request(a)), h.join(request(b))
    h.join_result(wa), h.join_result(wb)
    parked_sync = h.sync(b, 2)
    wc = h.join(request(client_id="c"))  # rebalance: b's sync is answered, c parks
    assert h.sync_result(parked_sync).error == "REBALANCE_IN_PROGRESS"
    wa = h.join(request(a))
    h.group.mark_dead("NOT_COORDINATOR")
    h.collect()
    assert h.join_result(wa).error == h.join_result(wc).error == "NOT_COORDINATOR"
    assert h.group.state is S.DEAD and h.group.next_deadline_ms() is None
    h.group.mark_dead()  # idempotent
    assert h.group.describe()["members"] == []


def test_mark_dead_answers_parked_syncs() -> None:
    h, a, b = two_member_group()
    wa, wb = h.join(request(a)), h.join(request(b))
    h.join_result(wa), h.join_result(wb)
    parked = h.sync(b, 2)
    h.group.mark_dead()
    h.collect()
    assert h.sync_result(parked).error == "COORDINATOR_NOT_AVAILABLE"


# -- restore, describe, subscriptions -----------------------------------------------------
@dataclass(frozen=True)
class StoredMember:  # the shape of records.MemberValue
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


def restored(members: list[StoredMember], leader: str = "m1") -> Harness:
    h = Harness()
    h.group = ClassicGroup.restore(
        "g",
        h.settings,
        clock=lambda: h.now,
        new_member_id=lambda prefix: f"{prefix}-new",
        protocol_type="consumer",
        generation_id=7,
        protocol_name="range",
        leader_id=leader,
        members=members,
        state_timestamp_ms=123,
    )
    return h


def test_restore_a_stable_group() -> None:
    stored = [
        StoredMember("m1", None, "c1", "h1", REBALANCE_MS, SESSION_MS, b"s1", b"a1"),
        StoredMember("m2", "i2", "c2", "h2", REBALANCE_MS, SESSION_MS * 2, b"s2", b"a2"),
    ]
    h = restored(stored)
    group = h.group
    assert (group.state, group.generation_id, group.leader_id, group.protocol_name) == (
        S.STABLE,
        7,
        "m1",
        "range",
    )
    assert group.state_timestamp_ms == 123 and group.static_member_id("i2") == "m2"
    assert h.sync_now("m2", 7, instance="i2").assignment == b"a2"
    assert group.next_deadline_ms() == h.now + SESSION_MS  # heartbeat clocks start now
    restarted = h.join_now(request(instance="i2"))  # static member returns: no rebalance
    assert restarted.generation_id == 7
    h.advance(SESSION_MS - 1)
    assert group.heartbeat(7, restarted.member_id, "i2") == "NONE"
    h.advance(1)
    assert "m1" not in group.members and group.state is S.PREPARING_REBALANCE


def test_restore_an_empty_group_and_a_missing_leader() -> None:
    h = Harness()
    empty = ClassicGroup.restore(
        "g",
        h.settings,
        clock=lambda: h.now,
        new_member_id=str,
        protocol_type="consumer",
        generation_id=3,
        protocol_name=None,
        leader_id="",
        members=[],
        state_timestamp_ms=5,
    )
    assert (empty.state, empty.generation_id, empty.protocol_type) == (S.EMPTY, 3, "consumer")
    stored = [StoredMember("m1", None, "c1", "h1", REBALANCE_MS, SESSION_MS, b"s1", b"a1")]
    assert restored(stored, leader="gone").group.leader_id == "m1"


def test_describe() -> None:
    h = Harness()
    sub = consumer_subscription("t1", "t2")
    results = h.form(request(client_id="a", protocols=(("range", sub),)))
    described = h.group.describe()
    assert described["state"] == "Stable" and described["protocol_name"] == "range"
    assert described["members"] == [
        {
            "member_id": results[0].member_id,
            "group_instance_id": None,
            "client_id": "a",
            "client_host": "/127.0.0.1",
            "metadata": sub,
            "assignment": f"a:{results[0].member_id}".encode(),
        }
    ]
    h.join(request(results[0].member_id, protocols=(("range", sub),)))  # leader: rebalance
    described = h.group.describe()
    assert described["state"] == "CompletingRebalance"
    assert described["protocol_name"] == "" and described["members"][0]["metadata"] == b""


def test_subscribed_topics() -> None:
    assert consumer_subscription_topics(consumer_subscription("a", "b")) == {"a", "b"}
    assert consumer_subscription_topics(b"\x00") is None
    assert consumer_subscription_topics(b"\x00\x00\x00\x00\x00\x05\x00") is None
    h = Harness()
    h.form(
        request(client_id="a", protocols=(("range", consumer_subscription("t1")),)),
        request(client_id="b", protocols=(("range", consumer_subscription("t1", "t2")),)),
    )
    assert h.group.subscribed_topics() == {"t1", "t2"}
    other = Harness()
    other.form(request(protocol_type="connect", protocols=(("v1", b"whatever"),)))
    assert other.group.subscribed_topics() == set()


def test_next_deadline_in_each_phase() -> None:
    h = Harness()
    assert h.group.next_deadline_ms() is None
    h.join(request(session_ms=60_000))
    assert h.group.next_deadline_ms() == h.now + 3_000  # the initial delay
    h.advance(3_000)
    assert h.group.next_deadline_ms() == h.now + REBALANCE_MS  # the sync phase
    h.sync_result(h.sync("client-1", 1, {}))
    assert h.group.next_deadline_ms() == h.now + 60_000  # the session
