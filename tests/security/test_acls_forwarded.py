"""CreateAcls and DeleteAcls on a broker-only node: forwarded to the active controller.

A three-node cluster — node 1 the (only) controller, nodes 2 and 3 broker-only — with
the authorizer on. The ACLs are created through node 2, which holds no controller and
forwards the request (metadata/acl_rpc.py); they come back from node 3's image, so
they went through the metadata log; deleted through node 3, they are gone on node 2.
The brokers replicate as ANONYMOUS over PLAINTEXT, so ANONYMOUS is a super user here
(in Kafka, too, the inter-broker principal must be one, or hold CLUSTER_ACTION).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.support.kraft import Quorum

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PROPERTIES = {
    "authorizer.class.name": STANDARD,
    "super.users": "User:ANONYMOUS",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "2000",
}
EVERYTHING = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)


def eventually(what: str, check: Callable[[], Any], timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except Exception:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_acls_created_on_a_broker_only_node_reach_every_node(tmp_path: Path) -> None:
    roles = {1: "broker,controller", 2: "broker", 3: "broker"}
    with Quorum(tmp_path / "quorum", properties=PROPERTIES, roles=roles) as quorum:
        quorum.wait_for_leader(30)
        on_2 = AdminClient({"bootstrap.servers": quorum.broker_address(2), "log_level": 0})
        on_3 = AdminClient({"bootstrap.servers": quorum.broker_address(3), "log_level": 0})
        binding = AclBinding(
            ResourceType.TOPIC,
            "forwarded",
            ResourcePatternType.PREFIXED,
            "User:alice",
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        )
        eventually("node 2 serving", lambda: on_2.list_topics(timeout=5).brokers)
        for future in on_2.create_acls([binding]).values():
            assert future.result(30) is None
        # the forwarding broker's own image shows it at once (the channel's contract)
        assert on_2.describe_acls(EVERYTHING).result(10) == [binding]
        eventually("node 3 sees it", lambda: on_3.describe_acls(EVERYTHING).result(10) == [binding])
        deleted = on_3.delete_acls([EVERYTHING])[EVERYTHING].result(30)
        assert deleted == [binding]
        eventually("node 2 sees it gone", lambda: on_2.describe_acls(EVERYTHING).result(10) == [])
