"""The replica selector (KIP-392), sans-IO: which replica a consumer should read from.

- RackAwareReplicaSelector: the leader when it shares the client's rack, else the
  client-rack candidate with the highest log end offset, then the most recently caught
  up, then the lowest id; the leader when no candidate is in that rack or the client
  names none; LeaderSelector always the leader;
- ``preferred_read_replica`` offers only followers in the ISR, alive, whose log holds
  the fetch offset, and answers None when the choice is the leader;
- ``replica.selector.class`` accepts Kafka's class names (full or short) and refuses
  others with a message naming the known ones.
"""

from __future__ import annotations

import pytest

from odradek.replica.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_SELECTOR,
    FollowerProgress,
    LeaderSelector,
    RackAwareReplicaSelector,
    ReplicaView,
    known_selector,
    preferred_read_replica,
    selector_for,
)

LEADER = ReplicaView(1, "r1", 100)
RACKS = {1: "r1", 2: "r2", 3: "r3", 4: "r2", 5: None}


def test_rack_aware_prefers_the_leader_in_the_client_s_rack() -> None:
    same = [ReplicaView(2, "r1", 100)]
    assert RackAwareReplicaSelector().select("r1", LEADER, same) is LEADER


def test_rack_aware_picks_the_most_caught_up_follower_of_the_client_s_rack() -> None:
    behind = ReplicaView(2, "r2", 90)
    ahead = ReplicaView(4, "r2", 100, time_since_caught_up_ms=50)
    fresher = ReplicaView(6, "r2", 100, time_since_caught_up_ms=10)
    other_rack = ReplicaView(3, "r3", 200)
    selector = RackAwareReplicaSelector()
    assert selector.select("r2", LEADER, [behind, ahead, other_rack]) is ahead
    assert selector.select("r2", LEADER, [behind, ahead, fresher, other_rack]) is fresher
    tie = [ReplicaView(9, "r2", 100), ReplicaView(7, "r2", 100)]
    assert selector.select("r2", LEADER, tie).broker_id == 7  # deterministic: lowest id
    assert selector.select("r3", LEADER, [behind, other_rack]) is other_rack


def test_rack_aware_falls_back_to_the_leader() -> None:
    followers = [ReplicaView(2, "r2", 100), ReplicaView(5, None, 100)]
    selector = RackAwareReplicaSelector()
    assert selector.select("r9", LEADER, followers) is LEADER  # nobody in that rack
    assert selector.select("", LEADER, followers) is LEADER  # the client names none
    assert LeaderSelector().select("r2", LEADER, followers) is LEADER


def progress(broker: int, start: int = 0, end: int = 100, since: int = 0) -> FollowerProgress:
    return FollowerProgress(broker, start, end, since)


def choose(
    client_rack: str,
    fetch_offset: int,
    followers: list[FollowerProgress],
    isr: tuple[int, ...] = (1, 2, 3, 4),
    alive: frozenset[int] = frozenset({1, 2, 3, 4}),
) -> int | None:
    return preferred_read_replica(
        RackAwareReplicaSelector(),
        client_rack,
        fetch_offset,
        1,
        100,
        isr,
        followers,
        RACKS.get,
        alive.__contains__,
    )


def test_only_in_sync_live_followers_holding_the_offset_are_offered() -> None:
    assert choose("r2", 50, [progress(2), progress(3)]) == 2
    assert choose("r3", 50, [progress(2), progress(3)]) == 3
    assert choose("r1", 50, [progress(2), progress(3)]) is None  # the leader's own rack
    assert choose("r2", 50, [progress(2), progress(3)], isr=(1, 3)) is None  # out of ISR
    assert choose("r2", 50, [progress(2)], alive=frozenset({1, 3})) is None  # fenced
    assert choose("r2", 50, [progress(2, end=40)]) is None  # below the offset
    assert choose("r2", 50, [progress(2, start=60)]) is None  # offset deleted there
    assert choose("r2", 50, [progress(2, end=-1)]) is None  # never fetched: unknown
    assert choose("r2", 100, [progress(2)]) == 2  # at its log end: a long poll there
    # of two followers in the rack the one further along, even if the other is older
    assert choose("r2", 50, [progress(2, end=80), progress(4, end=95, since=500)]) == 4


def test_the_selector_config_names_kafka_s_classes() -> None:
    assert known_selector("RackAwareReplicaSelector") == RACK_AWARE_SELECTOR
    assert known_selector(f" {RACK_AWARE_SELECTOR} ") == RACK_AWARE_SELECTOR
    assert isinstance(selector_for(RACK_AWARE_SELECTOR), RackAwareReplicaSelector)
    assert selector_for(LEADER_SELECTOR) is None  # the leader: no selection at all
    assert selector_for(None) is None and selector_for("") is None
    with pytest.raises(ValueError, match=r"known: .*RackAwareReplicaSelector"):
        known_selector("com.example.NearestSelector")
