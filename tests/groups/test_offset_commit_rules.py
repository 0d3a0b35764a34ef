"""OffsetCommit's group rules on the wire, every claimed version (2-9).

Kafka accepts any commit with generation (or member epoch) < 0 while the group is
empty or does not exist, whatever member id it carries: librdkafka's KIP-848
consumer (``group.protocol=consumer``) makes its member id before it joins, so its
``assign()``-based commits (OffsetCommit v9) carry an id and epoch -1. A commit with
a generation to a group that does not exist is GROUP_ID_NOT_FOUND from v9 and
ILLEGAL_GENERATION before.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.groups.wire import (
    commit,
    create_topic,
    fetch_one,
    find_coordinator,
    leave,
    single_member_group,
    unique,
)
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient

E = ErrorCode


@pytest.fixture(scope="module")
def client(group_broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(group_broker.bootstrap) as wire:
        assert find_coordinator(wire, 6, ["warm-up"])[0][4] == E.none
        yield wire


@pytest.fixture(scope="module")
def topic(client: WireClient) -> str:
    return create_topic(client, unique("commit-rules"), 2)


@pytest.mark.parametrize("version", range(2, 10))
def test_commit_with_member_id_and_no_generation_to_unknown_group(
    client: WireClient, topic: str, version: int
) -> None:
    group = unique(f"simple-v{version}")
    tp = (topic, 0)
    result = commit(client, version, group, {tp: 7}, generation=-1, member_id="made-before-join")
    assert result == {tp: E.none}
    assert fetch_one(client, group, [tp])[tp].offset == 7
    # The group exists now (Empty, no members): the same kind of commit still goes in.
    assert commit(client, version, group, {tp: 8}, generation=-1, member_id="other") == {tp: E.none}
    assert fetch_one(client, group, [tp])[tp].offset == 8


@pytest.mark.parametrize("version", range(2, 10))
def test_commit_with_member_id_and_no_generation_to_empty_and_live_group(
    client: WireClient, topic: str, version: int
) -> None:
    group = unique(f"empty-v{version}")
    tp = (topic, 1)
    member = single_member_group(client, group)
    # While the group has a member, a commit from outside is refused...
    assert commit(client, version, group, {tp: 3}, generation=-1, member_id="outsider") == {
        tp: E.unknown_member_id
    }
    leave(client, 5, group, [(member.member_id, None)])
    # ...and once it is empty again, accepted whatever member id comes with it.
    assert commit(client, version, group, {tp: 4}, generation=-1, member_id="outsider") == {
        tp: E.none
    }
    assert fetch_one(client, group, [tp])[tp].offset == 4


@pytest.mark.parametrize("version", range(2, 10))
def test_commit_with_generation_to_unknown_group(
    client: WireClient, topic: str, version: int
) -> None:
    tp = (topic, 0)
    expected = E.group_id_not_found if version >= 9 else E.illegal_generation
    group = unique("nogroup")
    assert commit(client, version, group, {tp: 2}, generation=3, member_id="x") == {tp: expected}
    assert fetch_one(client, group, [tp])[tp].offset == -1
