"""Which replica a consumer should read from (KIP-392, fetch from the closest replica).

How this works and why: a consumer that names its rack (``client.rack``, sent as the
Fetch v11+ ``rack_id``) may read from a follower in its own rack instead of crossing
racks to the leader — a real saving when racks are availability zones. The leader
decides, not the client: on each consumer Fetch it asks the broker's
``replica.selector.class`` which replica to prefer, and when that is not itself it
answers with ``preferred_read_replica`` and no records; the client then fetches from
that follower, which serves reads below its own high watermark.

The candidates are what Kafka offers its selector: the leader itself, and every
follower that is in the ISR, alive in the metadata, and whose log holds the fetch
offset (log start <= offset <= log end, as the leader last saw it). A follower out of
the ISR may lag without bound, so it is never offered. Two selectors, by Kafka's class
names: ``LeaderSelector`` (the default: always the leader, i.e. no follower reads)
and ``RackAwareReplicaSelector`` — the leader if it is in the client's rack, else the
candidate of the client's rack with the highest log end offset, then the one caught
up most recently (then the lowest id, so the answer is deterministic), else the
leader. Pure functions of their inputs: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

KAFKA_PACKAGE: Final = "org.apache.kafka.common.replica."
LEADER_SELECTOR: Final = KAFKA_PACKAGE + "LeaderSelector"
RACK_AWARE_SELECTOR: Final = KAFKA_PACKAGE + "RackAwareReplicaSelector"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica as the leader sees it (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int = 0  # the leader: 0


class ReplicaSelector(Protocol):
    def select(
        self, client_rack: str, leader: ReplicaView, candidates: Sequence[ReplicaView]
    ) -> ReplicaView:
        """The replica the client should read from (``leader`` or one of
        ``candidates``, the eligible followers)."""
        ...


class LeaderSelector:
    """Kafka's default: consumers read from the leader only."""

    def select(
        self, client_rack: str, leader: ReplicaView, candidates: Sequence[ReplicaView]
    ) -> ReplicaView:
        return leader


class RackAwareReplicaSelector:
    """The client's rack first: the leader if it is there, else the most caught-up
    follower there, else the leader."""

    def select(
        self, client_rack: str, leader: ReplicaView, candidates: Sequence[ReplicaView]
    ) -> ReplicaView:
        if not client_rack:
            return leader
        if leader.rack == client_rack:
            return leader
        same_rack = [c for c in candidates if c.rack == client_rack]
        if not same_rack:
            return leader
        return max(
            same_rack,
            key=lambda c: (c.log_end_offset, -c.time_since_caught_up_ms, -c.broker_id),
        )


_SELECTORS: Final[dict[str, Callable[[], ReplicaSelector]]] = {
    LEADER_SELECTOR: LeaderSelector,
    RACK_AWARE_SELECTOR: RackAwareReplicaSelector,
}


def known_selector(name: str) -> str:
    """The class name as configured (Kafka's full name, or the short one), checked;
    ValueError names the ones that exist."""
    text = name.strip()
    full = text if "." in text else KAFKA_PACKAGE + text
    if full not in _SELECTORS:
        raise ValueError(f"unknown replica selector {text!r}; known: {', '.join(_SELECTORS)}")
    return full


def selector_for(name: str | None) -> ReplicaSelector | None:
    """``replica.selector.class`` -> a selector; None (unset, or LeaderSelector):
    consumers read from the leader and no selection is made at all."""
    if name is None or not name.strip():
        return None
    full = known_selector(name)
    if full == LEADER_SELECTOR:
        return None
    return _SELECTORS[full]()


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    """What the leader knows of one follower, for the candidate filter."""

    broker_id: int
    log_start_offset: int
    log_end_offset: int
    time_since_caught_up_ms: int


def preferred_read_replica(
    selector: ReplicaSelector,
    client_rack: str,
    fetch_offset: int,
    leader_id: int,
    leader_log_end_offset: int,
    isr: Iterable[int],
    followers: Iterable[FollowerProgress],
    rack_of: Callable[[int], str | None],
    alive: Callable[[int], bool],
) -> int | None:
    """The follower a consumer fetching ``fetch_offset`` should read from, or None to
    read from the leader (selected, or nothing better). ``rack_of`` gives a broker's
    registered rack; ``alive`` whether it is registered and unfenced."""
    in_sync = set(isr)
    candidates = [
        ReplicaView(f.broker_id, rack_of(f.broker_id), f.log_end_offset, f.time_since_caught_up_ms)
        for f in followers
        if f.broker_id != leader_id
        and f.broker_id in in_sync
        and alive(f.broker_id)
        and f.log_start_offset <= fetch_offset <= f.log_end_offset
    ]
    leader = ReplicaView(leader_id, rack_of(leader_id), leader_log_end_offset)
    chosen = selector.select(client_rack, leader, candidates)
    if chosen.broker_id == leader_id:
        return None
    return chosen.broker_id
