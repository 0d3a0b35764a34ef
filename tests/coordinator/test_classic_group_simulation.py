"""Random clients against one ClassicGroup; invariants checked after every step.

Four clients (two static, two dynamic) join, sync, heartbeat, leave, commit, restart
and reuse stale member ids, while the clock jumps. The leader assigns each member
``"<instance id or member id>:<generation>"``, so every assignment handed out can be
traced back to the generation it was made for. At the end every client stops and time
runs until the group has nothing left to time out: it must be Empty with every parked
request answered exactly once.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from odradek.coordinator.group.classic import (
    ClassicGroup,
    GroupSettings,
    GroupState,
    JoinedMember,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from odradek.coordinator.group.classic_model import LEGAL_TRANSITIONS
from tests.coordinator.classic_support import RANGE, ROUNDROBIN, STICKY, Waiter

PROTOCOL_CHOICES = [(RANGE,), (RANGE, ROUNDROBIN), (ROUNDROBIN, RANGE), (STICKY, RANGE)]
CLIENTS = 4
TEARDOWN_STEPS_MAX = 200


@dataclass
class Client:
    name: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    protocols: int = 0  # index into PROTOCOL_CHOICES
    protocol_name: str | None = None
    synced_generation: int = -1
    leader_of: tuple[JoinedMember, ...] = ()  # the members, when this client leads
    stale_ids: list[str] = field(default_factory=list)

    def forget(self) -> None:
        if self.member_id:
            self.stale_ids.append(self.member_id)
        self.member_id, self.generation, self.leader_of = "", -1, ()


@dataclass(frozen=True)
class Sent:
    client: Client
    kind: str  # "join" | "sync"
    member_id: str
    instance: str | None
    generation: int


def assignment_for(key: str, generation: int) -> bytes:
    return f"{key}:{generation}".encode()


class GroupSimulation(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        ids = itertools.count(1)
        self.settings = GroupSettings(
            initial_rebalance_delay_ms=3_000, new_member_join_timeout_ms=60_000, max_size=3
        )
        self.group = ClassicGroup(
            "g", self.settings, clock=lambda: self.now, new_member_id=lambda p: f"{p}-{next(ids)}"
        )
        self.clients = [
            Client(f"c{i}", instance=f"i{i}" if i < 2 else None) for i in range(CLIENTS)
        ]
        self.outstanding: dict[Waiter, Sent] = {}
        self.answered: set[Waiter] = set()
        self.waiter_names = itertools.count(1)
        self.last_generation = 0
        self.expected_state = self.group.state
        transition = self.group._transition

        def recording_transition(to: GroupState, reason: str = "") -> None:
            assert self.group.state is self.expected_state  # no change bypassed _transition
            assert to in LEGAL_TRANSITIONS[self.group.state]
            transition(to, reason)
            self.expected_state = to

        self.group._transition = recording_transition  # type: ignore[method-assign]

    # -- plumbing --------------------------------------------------------------------
    def deliver(self) -> None:
        for waiter, result in self.group.drain():
            assert isinstance(waiter, Waiter)
            assert waiter not in self.answered, f"{waiter} answered twice"
            assert waiter in self.outstanding, f"{waiter} answered but never parked"
            self.answered.add(waiter)
            self.handle(self.outstanding.pop(waiter), result)

    def handle(self, sent: Sent, result: JoinResult | SyncResult) -> None:
        client = sent.client
        if isinstance(result, JoinResult):
            assert sent.kind == "join"
            if result.error == "NONE":
                assert result.generation_id >= 1 and result.member_id
                if result.member_id != client.member_id:
                    client.forget()
                client.member_id, client.generation = result.member_id, result.generation_id
                client.protocol_name = result.protocol_name
                leads = result.leader_id == result.member_id and not result.skip_assignment
                client.leader_of = result.members if leads else ()
                assert bool(result.members) == (result.leader_id == result.member_id)
            elif result.error == "MEMBER_ID_REQUIRED":
                client.member_id = result.member_id
            elif result.error in ("UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID") and (
                sent.member_id == client.member_id
            ):
                client.forget()
            return
        assert sent.kind == "sync"
        if result.error == "NONE":
            client.synced_generation = sent.generation
            key = sent.instance or sent.member_id
            assert result.assignment == assignment_for(key, sent.generation), (sent, result)

    def parked_waiters(self) -> set[object]:
        parked: set[object] = set()
        for member in self.group.members.values():
            parked |= {w for w in (member.join_waiter, member.sync_waiter) if w is not None}
        return parked

    def new_waiter(self, client: Client, kind: str) -> Waiter:
        return Waiter(f"{kind}:{client.name}:{next(self.waiter_names)}")

    def join_request(self, client: Client, require: bool) -> JoinRequest:
        return JoinRequest(
            member_id=client.member_id,
            group_instance_id=client.instance,
            client_id=client.name,
            client_host="/10.0.0.1",
            # c1 and c3 have sessions longer than their rebalance timeout, so sometimes
            # the session expiry and sometimes the join/sync-phase deadline comes first
            session_timeout_ms=10_000 if client.name in ("c0", "c2") else 20_000,
            rebalance_timeout_ms=15_000 if client.name in ("c0", "c2") else 8_000,
            protocol_type="consumer",
            protocols=PROTOCOL_CHOICES[client.protocols],
            require_known_member_id=require,
            supports_skip_assignment=client.instance == "i0",
        )

    # -- rules -----------------------------------------------------------------------
    @rule(
        index=st.integers(0, CLIENTS - 1),
        protocols=st.sampled_from([None, None, None, *range(len(PROTOCOL_CHOICES))]),
        require=st.booleans(),
        restart=st.sampled_from([False, False, False, True]),
    )
    def join(self, index: int, protocols: int | None, require: bool, restart: bool) -> None:
        """Join or rejoin (a retry while one is parked supersedes it), maybe restarted."""
        client = self.clients[index]
        if restart:
            client.forget()
        if protocols is not None:
            client.protocols = protocols
        self.do_join(client, require)

    @rule()
    def everyone_rejoins(self) -> None:
        for client in self.clients:
            if client.member_id:
                self.do_join(client, False)

    @rule()
    def everyone_syncs(self) -> None:
        for client in sorted(self.clients, key=lambda c: bool(c.leader_of)):  # leader last
            self.sync(self.clients.index(client), 0)

    @rule()
    def poll(self) -> None:
        """Every idle client takes the next step of a well-behaved consumer."""
        for client in sorted(self.clients, key=lambda c: bool(c.leader_of)):  # leader last
            if any(sent.client is client for sent in self.outstanding.values()):
                continue
            if client.member_id and client.generation < 0:
                self.do_join(client, False)
            elif client.member_id and client.synced_generation != client.generation:
                self.sync(self.clients.index(client), 0)
            elif client.member_id:
                error = self.group.heartbeat(client.generation, client.member_id, client.instance)
                if error == "REBALANCE_IN_PROGRESS":
                    self.do_join(client, False)
                elif error != "NONE":
                    client.forget()

    def do_join(self, client: Client, require: bool) -> None:
        waiter = self.new_waiter(client, "join")
        request = self.join_request(client, require)
        sent = Sent(client, "join", client.member_id, client.instance, -1)
        result = self.group.join(request, waiter)
        if result is None:
            self.outstanding[waiter] = sent
        else:
            self.answered.add(waiter)
            self.handle(sent, result)
        self.deliver()

    @rule(index=st.integers(0, CLIENTS - 1), generation_offset=st.sampled_from([0, 0, 0, -1]))
    def sync(self, index: int, generation_offset: int) -> None:
        client = self.clients[index]
        if not client.member_id:
            return
        generation = client.generation + generation_offset
        assignments = {
            m.member_id: assignment_for(m.group_instance_id or m.member_id, client.generation)
            for m in client.leader_of
        }
        waiter = self.new_waiter(client, "sync")
        sent = Sent(client, "sync", client.member_id, client.instance, generation)
        result = self.group.sync(
            generation,
            client.member_id,
            client.instance,
            "consumer",
            client.protocol_name,
            assignments,
            waiter,
        )
        if result is None:
            self.outstanding[waiter] = sent
        else:
            self.answered.add(waiter)
            self.handle(sent, result)
        self.deliver()

    @rule(index=st.integers(0, CLIENTS - 1), stale=st.booleans())
    def heartbeat(self, index: int, stale: bool) -> None:
        client = self.clients[index]
        member_id = client.stale_ids[-1] if stale and client.stale_ids else client.member_id
        error = self.group.heartbeat(client.generation, member_id, client.instance)
        if error in ("UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID") and member_id == client.member_id:
            client.forget()
        self.deliver()

    @rule(index=st.integers(0, CLIENTS - 1), by_instance=st.booleans())
    def leave(self, index: int, by_instance: bool) -> None:
        client = self.clients[index]
        member_id = "" if by_instance and client.instance else client.member_id
        self.group.leave(member_id, client.instance)
        client.forget()
        self.deliver()

    @rule(index=st.integers(0, CLIENTS - 1), generation_offset=st.sampled_from([0, 0, -1]))
    def commit(self, index: int, generation_offset: int) -> None:
        client = self.clients[index]
        generation = client.generation + generation_offset
        error = self.group.validate_offset_commit(generation, client.member_id, client.instance)
        if client.member_id == "" and generation < 0 and client.instance is None:
            assert error == (
                "NONE" if self.group.state is GroupState.EMPTY else "UNKNOWN_MEMBER_ID"
            )

    @rule(ms=st.sampled_from([0, 500, 1_000, 2_000, 3_000, 4_000, 6_000, 9_000, 16_000, 70_000]))
    def advance(self, ms: int) -> None:
        self.now += ms
        self.group.tick()
        self.deliver()

    # -- invariants ------------------------------------------------------------------
    @invariant()
    def group_is_consistent(self) -> None:
        group = self.group
        state = group.state
        assert state is self.expected_state, "the state changed outside _transition"
        assert group.generation_id >= self.last_generation
        self.last_generation = group.generation_id
        assert not group.pending_member_ids & set(group.members)
        assert group.drain() == []  # everything completed was delivered
        parked = self.parked_waiters()
        assert parked == set(self.outstanding), "a parked request was lost or duplicated"
        joins = [m for m in group.members.values() if m.join_waiter is not None]
        syncs = [m for m in group.members.values() if m.sync_waiter is not None]
        assert not joins or state is GroupState.PREPARING_REBALANCE
        assert not syncs or state is GroupState.COMPLETING_REBALANCE
        assert (group.leader_id in group.members) == bool(group.members)
        if state is GroupState.EMPTY:
            assert not group.members and group.leader_id == ""
        if state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            assert group.members and group.protocol_name is not None
            for member in group.members.values():
                assert group.protocol_name in member.protocol_names()
        if state is GroupState.STABLE:
            # every member has the assignment the leader made for this generation
            for member in group.members.values():
                key = member.group_instance_id or member.member_id
                assert member.assignment == assignment_for(key, group.generation_id), member
        for member in group.members.values():
            if member.group_instance_id is not None:
                assert group.static_member_id(member.group_instance_id) == member.member_id
        if group.members or group.pending_member_ids:
            assert group.next_deadline_ms() is not None  # nothing can hang forever

    def teardown(self) -> None:
        # Every client stops; the group must wind down to Empty and answer everything.
        for _ in range(TEARDOWN_STEPS_MAX):
            deadline = self.group.next_deadline_ms()
            if deadline is None:
                break
            self.now = max(self.now, deadline)
            self.group.tick()
            self.deliver()
            self.group_is_consistent()
        assert self.group.next_deadline_ms() is None
        assert self.group.state is GroupState.EMPTY and not self.group.members
        assert not self.outstanding


GroupSimulation.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestGroupSimulation = GroupSimulation.TestCase
