"""Broker registration, heartbeats and fencing: the active controller's decisions.

How this works and why (KIP-631, Kafka's ClusterControlManager + BrokerHeartbeatManager):
a broker joins the cluster with a BrokerRegistration naming its id, an incarnation id
(a fresh uuid per process start), its listeners, features and log dirs. The
controller answers with the broker epoch, which is the offset of the
``RegisterBroker`` record it writes, so the epoch grows with every new incarnation.
A new registration is written *fenced*: the broker gets no replicas and is left out of
Metadata until it proves it is alive and has caught up. It proves that with
BrokerHeartbeats (every ``broker.heartbeat.interval.ms``) carrying its epoch and the
metadata offset its loader has applied; once that offset reaches its registration
record, the controller writes ``UnfenceBroker``. A broker whose last heartbeat is
older than ``broker.session.timeout.ms`` is fenced again (``FenceBroker``) by the
active controller's timer.

Idempotence and duplicates: a registration re-sent by the same incarnation with the
same details writes nothing and returns the current epoch (a lost response retried).
A different incarnation is refused with DUPLICATE_BROKER_REGISTRATION while the
registered one holds a live session (unfenced and heard from within the session
timeout), since two processes with one node id would both believe they own its
replicas; once the old one is fenced, the new one replaces it with a new epoch. The
one exception is this controller's own node in combined mode: its broker runs in
this very process, so an older incarnation of it is certainly dead.

Sessions live only in the memory of the active controller: they are not metadata.
A newly active controller (``ensure_epoch`` sees a new leader epoch) gives every
registered broker a fresh session instead of fencing them all at once for a silence
it did not witness; a broker that really is gone is fenced one session timeout later.

The same holds for a silence of the controller itself: when its timer finds it was
not run for more than half a session (the process was paused, the loop stalled), the
heartbeats it missed were not the brokers' fault, so every session starts afresh. And
the controller never times out its own node's broker in combined mode: it runs on the
same event loop, so it is exactly as alive as the controller deciding.

One exception (not Kafka's; issue 12's failover goal): the previous Raft leader's own
broker when that leader went silent. In combined mode it heartbeated the controller in
its own process, so the new controller never heard from it, and with a fresh session a
kill -9 of the active controller left its partitions leaderless for the election
(``controller.quorum.fetch.timeout.ms`` and the vote, a split vote adding a second or
more) *plus* a whole session. But the election itself is evidence: this voter's
fetches to that leader stopped being answered, and it knows when the last answer came
(``SilentLeader.last_heard_ms``, raft/roles.py). So that broker's session is dated from
then, but never so early that less than ``MIN_HEARTBEATS_LEFT`` heartbeat intervals
remain at the election. A dead node is then fenced about one session after it died,
however long the vote took. A live one (the old leader was paused, or cut off from the
other voters) is fenced only if this node heard nothing from it for a whole session —
the rule every broker lives by — *and* it did not heartbeat within two intervals of the
election: about one to learn the new leader (the BeginQuorumEpoch sent at the
election, resent every ``controller.quorum.request.timeout.ms``) and have its
in-process heartbeat refused, one for the retry, which comes within an interval
(broker_lifecycle.py). Three intervals would cost the common case: a split vote often
puts the election more than one interval past the fetch timeout. A broker registered
with a voter's node id is that voter's own broker (config.py refuses a broker-only
node with a voter's id, as Kafka does), so dedicated brokers and every other broker
keep the fresh session; a leader that resigned (EndQuorumEpoch, a controlled
shutdown) is not silent and gets one too.

This module is sans-IO: time comes from the ``now_ms`` arguments, and it returns the
records to write; ``Controller`` commits them under its lock (controller.py) and
the session timer (server/controller_timers.py) calls ``Controller.fence_stale_brokers``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from odradek.metadata.errors import ControllerError
from odradek.metadata.image import BrokerImage, MetadataImage, MetadataRecord

DEFAULT_SESSION_TIMEOUT_MS: Final = 9000  # broker.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS: Final = 2000  # broker.heartbeat.interval.ms
# A silent previous leader's broker keeps at least this many heartbeat intervals of its
# session when the new controller takes over (module doc).
MIN_HEARTBEATS_LEFT: Final = 2
# Bounds on one registration: its record must fit one metadata batch with room to
# spare, whatever a hostile controller-plane client sends.
MAX_LISTENERS: Final = 64
MAX_FEATURES: Final = 64
MAX_LOG_DIRS: Final = 1024
MAX_NAME_LENGTH: Final = 1024  # listener names, hosts, racks, feature names


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """What a BrokerRegistration request carries (plain data: local or RPC alike)."""

    broker_id: int
    incarnation_id: str
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)
    rack: str | None = None
    features: tuple[tuple[str, int, int], ...] = ()  # (name, min, max supported)
    log_dirs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerHeartbeat:
    """What a BrokerHeartbeat request carries."""

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


@dataclass(frozen=True, slots=True)
class HeartbeatDecision:
    """The records a heartbeat needs written, and the reply once they are committed."""

    records: tuple[MetadataRecord, ...]
    reply: HeartbeatReply


def register_broker_record(request: BrokerRegistration) -> MetadataRecord:
    return MetadataRecord(
        "RegisterBroker",
        {
            "broker_id": request.broker_id,
            "incarnation_id": request.incarnation_id,
            "endpoints": [list(e) for e in request.endpoints],
            "rack": request.rack,
            "features": [list(f) for f in request.features],
            "log_dirs": list(request.log_dirs),
            "fenced": True,
        },
    )


def fence_record(broker: BrokerImage, fenced: bool) -> MetadataRecord:
    return MetadataRecord(
        "FenceBroker" if fenced else "UnfenceBroker",
        {"broker_id": broker.broker_id, "broker_epoch": broker.epoch},
    )


def same_registration(broker: BrokerImage, request: BrokerRegistration) -> bool:
    return (
        broker.incarnation_id == request.incarnation_id
        and broker.endpoints == request.endpoints
        and broker.rack == request.rack
        and broker.features == request.features
        and broker.log_dirs == request.log_dirs
    )


class BrokerHeartbeatManager:
    """The sessions of registered brokers, on the active controller (see module doc)."""

    def __init__(
        self,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        *,
        local_node_id: int | None = None,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    ) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # Combined mode: this node's own broker runs in this process (module doc).
        self.local_node_id = local_node_id
        self.local_incarnation_id: str | None = None
        self._last_contact_ms: dict[int, int] = {}
        self._epoch = -1  # the leader epoch the sessions belong to
        self._last_check_ms: int | None = None  # the timer's previous run

    # -- sessions ----------------------------------------------------------------------
    @property
    def session_epoch(self) -> int:
        """The leader epoch the sessions belong to (-1: none yet)."""
        return self._epoch

    def ensure_epoch(
        self,
        leader_epoch: int,
        image: MetadataImage,
        now_ms: int,
        silent_leader: tuple[int, int] | None = None,
    ) -> None:
        """Called before every decision: a new active term starts every registered
        broker on a fresh session, but the broker of ``silent_leader`` (the previous
        Raft leader's node id, and when this voter last heard from it) on the session
        ``carried_session_start`` dates (module doc)."""
        if leader_epoch == self._epoch:
            return
        self._epoch = leader_epoch
        self._last_contact_ms = dict.fromkeys(image.brokers, now_ms)
        self._last_check_ms = None
        if silent_leader is not None:
            node_id, last_heard_ms = silent_leader
            start = self.carried_session_start(image, node_id, last_heard_ms, now_ms)
            if start is not None:
                self._last_contact_ms[node_id] = start

    def carried_session_start(
        self, image: MetadataImage, node_id: int, last_heard_ms: int, now_ms: int
    ) -> int | None:
        """When the session of the silent previous leader's broker counts from, or None
        for a fresh one: not registered, fenced already, this very node, or a session
        too short to leave ``MIN_HEARTBEATS_LEFT`` heartbeat intervals at all."""
        broker = image.brokers.get(node_id)
        if broker is None or broker.fenced or node_id == self.local_node_id:
            return None
        left_ms = MIN_HEARTBEATS_LEFT * self.heartbeat_interval_ms
        if left_ms >= self.session_timeout_ms:
            return None
        # the latest start that still leaves left_ms; never after now
        earliest = now_ms - (self.session_timeout_ms - left_ms)
        return max(min(last_heard_ms, now_ms), earliest)

    def touch(self, broker_id: int, now_ms: int) -> None:
        self._last_contact_ms[broker_id] = now_ms

    def has_live_session(self, broker: BrokerImage, now_ms: int) -> bool:
        """Unfenced and heard from within the session timeout."""
        last = self._last_contact_ms.get(broker.broker_id)
        return not broker.fenced and last is not None and now_ms - last <= self.session_timeout_ms

    def last_contact_ms(self, broker_id: int) -> int | None:
        return self._last_contact_ms.get(broker_id)

    # -- decisions ---------------------------------------------------------------------
    def registration(
        self, image: MetadataImage, request: BrokerRegistration, now_ms: int
    ) -> list[MetadataRecord]:
        """The records registering ``request`` (none: already registered so); raises
        ControllerError DUPLICATE_BROKER_REGISTRATION or INVALID_REQUEST."""
        if request.broker_id < 0:
            raise ControllerError("INVALID_REQUEST", f"broker id {request.broker_id} is negative")
        if not request.incarnation_id:
            raise ControllerError(
                "INVALID_REQUEST", "a broker registration needs an incarnation id"
            )
        check_registration(request)
        existing = image.brokers.get(request.broker_id)
        if existing is not None:
            if same_registration(existing, request):
                self.touch(request.broker_id, now_ms)
                return []
            own = (
                request.broker_id == self.local_node_id
                and request.incarnation_id == self.local_incarnation_id
            )
            if (
                existing.incarnation_id != request.incarnation_id
                and not own
                and self.has_live_session(existing, now_ms)
            ):
                raise ControllerError(
                    "DUPLICATE_BROKER_REGISTRATION",
                    f"another broker (incarnation {existing.incarnation_id}) is registered "
                    f"with id {request.broker_id} and still heartbeating",
                )
        self.touch(request.broker_id, now_ms)
        return [register_broker_record(request)]

    def heartbeat(
        self, image: MetadataImage, request: BrokerHeartbeat, now_ms: int
    ) -> HeartbeatDecision:
        """What a heartbeat changes; raises BROKER_ID_NOT_REGISTERED or STALE_BROKER_EPOCH."""
        broker = image.brokers.get(request.broker_id)
        if broker is None:
            raise ControllerError(
                "BROKER_ID_NOT_REGISTERED", f"broker {request.broker_id} is not registered"
            )
        if broker.epoch != request.broker_epoch:
            raise ControllerError(
                "STALE_BROKER_EPOCH",
                f"broker {request.broker_id} is registered with epoch {broker.epoch}, "
                f"not {request.broker_epoch}",
            )
        self.touch(broker.broker_id, now_ms)
        caught_up = request.current_metadata_offset >= broker.epoch
        if request.want_shut_down:
            # Controlled shutdown: with no partition leadership to move yet, the broker
            # may go at once, fenced so nothing is placed on it meanwhile.
            records = () if broker.fenced else (fence_record(broker, True),)
            return HeartbeatDecision(records, HeartbeatReply(caught_up, True, True))
        if broker.fenced and caught_up and not request.want_fence:
            return HeartbeatDecision(
                (fence_record(broker, False),), HeartbeatReply(caught_up, False, False)
            )
        if not broker.fenced and request.want_fence:
            return HeartbeatDecision(
                (fence_record(broker, True),), HeartbeatReply(caught_up, True, False)
            )
        return HeartbeatDecision((), HeartbeatReply(caught_up, broker.fenced, False))

    def stale(self, brokers: Mapping[int, BrokerImage], now_ms: int) -> list[BrokerImage]:
        """Unfenced brokers whose session expired: to fence (the timer's question).
        Expired sessions of fenced brokers are dropped (nothing holds their id any
        more). After a gap in the timer's own runs, sessions restart instead."""
        previous, self._last_check_ms = self._last_check_ms, now_ms
        if previous is not None and now_ms - previous > self.session_timeout_ms // 2:
            self._last_contact_ms = dict.fromkeys(self._last_contact_ms, now_ms)
            return []
        expired: list[BrokerImage] = []
        for broker_id, last in list(self._last_contact_ms.items()):
            if now_ms - last <= self.session_timeout_ms:
                continue
            broker = brokers.get(broker_id)
            if broker is None or broker.fenced:
                del self._last_contact_ms[broker_id]
            elif self._is_local(broker):
                self._last_contact_ms[broker_id] = now_ms
            else:
                expired.append(broker)
        return sorted(expired, key=lambda b: b.broker_id)

    def _is_local(self, broker: BrokerImage) -> bool:
        """This controller's own node, registered by this very process."""
        return (
            broker.broker_id == self.local_node_id
            and self.local_incarnation_id is not None
            and broker.incarnation_id == self.local_incarnation_id
        )

    def next_expiry_ms(self, brokers: Mapping[int, BrokerImage]) -> int | None:
        """When the earliest unfenced session expires (for a timer), if any."""
        times = [
            last + self.session_timeout_ms
            for broker_id, last in self._last_contact_ms.items()
            if (b := brokers.get(broker_id)) is not None and not b.fenced
        ]
        return min(times) if times else None

    def check_delay_ms(
        self, leader_epoch: int, brokers: Mapping[int, BrokerImage], now_ms: int
    ) -> int:
        """Until the timer should next call ``stale`` (the earliest expiry, which is
        one ms past the timeout): 0 for a term whose sessions are not set up yet (the
        timer's run sets them), a whole session when nothing can expire."""
        if leader_epoch != self._epoch:
            return 0
        expiry = self.next_expiry_ms(brokers)
        if expiry is None:
            return self.session_timeout_ms
        return max(0, expiry + 1 - now_ms)


def check_registration(request: BrokerRegistration) -> None:
    """INVALID_REQUEST for a registration too large or malformed to record."""
    names = [e[0] for e in request.endpoints]
    problem = None
    if len(request.endpoints) > MAX_LISTENERS:
        problem = f"{len(request.endpoints)} listeners (at most {MAX_LISTENERS})"
    elif len(request.features) > MAX_FEATURES:
        problem = f"{len(request.features)} features (at most {MAX_FEATURES})"
    elif len(request.log_dirs) > MAX_LOG_DIRS:
        problem = f"{len(request.log_dirs)} log dirs (at most {MAX_LOG_DIRS})"
    elif len(set(names)) != len(names):
        problem = "a listener name given twice"
    else:
        texts = [*names, *(e[1] for e in request.endpoints), *(f[0] for f in request.features)]
        if request.rack is not None:
            texts.append(request.rack)
        if any(len(t) > MAX_NAME_LENGTH for t in texts):
            problem = f"a name or host longer than {MAX_NAME_LENGTH} characters"
    if problem is not None:
        raise ControllerError("INVALID_REQUEST", f"broker {request.broker_id}: {problem}")


def fence_records(brokers: Sequence[BrokerImage]) -> list[MetadataRecord]:
    return [fence_record(b, True) for b in brokers]


__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "MIN_HEARTBEATS_LEFT",
    "BrokerHeartbeat",
    "BrokerHeartbeatManager",
    "BrokerRegistration",
    "HeartbeatDecision",
    "HeartbeatReply",
    "fence_records",
    "register_broker_record",
]
