"""The StandardAuthorizer end to end: real brokers with authorization on, real clients.

Every request here is made by ``User:ANONYMOUS`` (PLAINTEXT), so the broker runs with
``allow.everyone.if.no.acl.found=true``: a resource without ACLs is open (the cluster
too, which lets the tests manage ACLs), and an ACL on a resource — a DENY for
ANONYMOUS, or an ALLOW for someone else — takes it away, exactly as Kafka decides.

The matrix (``PRINCIPALS``) is parametrized on how a client obtains its principal:
ANONYMOUS over PLAINTEXT, and ``User:alice`` logged in with SASL PLAIN over a
SASL_PLAINTEXT listener (the only listener of its broker). Every test runs for each
unchanged, since each names the principal it grants or denies through
``principal.name``.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.client._core.types import KafkaException as OdradekException
from odradek.client.admin.acls import AclBindingFilter as OdradekFilter
from odradek.client.admin.blocking import AdminClient as OdradekAdmin
from tests.support.broker import BrokerProcess, running_broker

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
QUIET = {"log_level": 0}
TIMEOUT_S = 15


@dataclass(frozen=True)
class Principal:
    """How a client gets its principal: the name ACLs use, the client's settings."""

    name: str
    client_config: dict[str, Any] = field(default_factory=dict)
    broker_overrides: tuple[str, ...] = ()
    listener: str | None = None  # the broker's listener to use (None: --listen's)


SASL_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
)
PRINCIPALS = [
    Principal("User:ANONYMOUS"),
    Principal(
        "User:alice",
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        },
        (
            "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms=PLAIN",
            f"sasl.jaas.config={SASL_JAAS}",
        ),
        listener="SASL_PLAINTEXT",
    ),
]


@pytest.fixture(scope="module", params=PRINCIPALS, ids=lambda p: p.name)
def principal(request: pytest.FixtureRequest) -> Principal:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def broker(
    principal: Principal, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    overrides = [
        f"authorizer.class.name={STANDARD}",
        "allow.everyone.if.no.acl.found=true",
        "num.partitions=1",
        *principal.broker_overrides,
    ]
    data = tmp_path_factory.mktemp("authorizer") / "broker"
    listen = None if principal.listener else "127.0.0.1:0"
    args = [f"--override={o}" for o in overrides]
    with running_broker(data, args, listen=listen) as started:
        yield started


def bootstrap(broker: BrokerProcess, principal: Principal) -> str:
    return broker.urls[principal.listener] if principal.listener else broker.bootstrap


def config(broker: BrokerProcess, principal: Principal, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap(broker, principal),
        **QUIET,
        **principal.client_config,
        **extra,
    }


@pytest.fixture
def admin(broker: BrokerProcess, principal: Principal) -> AdminClient:
    return AdminClient(config(broker, principal))


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def acl(
    restype: ResourceType,
    resource: str,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.DENY,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(restype, resource, pattern, principal, host, operation, permission)


def create_acls(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(TIMEOUT_S)


def create_topic(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)


def produce(
    broker: BrokerProcess, principal: Principal, topic: str, **extra: Any
) -> KafkaError | None:
    """One message; the delivery error (None: delivered)."""
    producer = Producer(config(broker, principal, **{"message.timeout.ms": 5000, **extra}))
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert outcome, "no delivery report"
    return outcome[0]


def error_code(failure: BaseException) -> int:
    assert isinstance(failure, KafkaException)
    return failure.args[0].code()  # type: ignore[no-any-return]


# -- the ACL APIs through confluent-kafka's AdminClient -----------------------------------


def test_create_describe_delete_acls(admin: AdminClient, principal: Principal) -> None:
    topic = name("acl-api")
    literal = acl(
        ResourceType.TOPIC, topic, "User:alice", AclOperation.READ, AclPermissionType.ALLOW
    )
    prefixed = acl(
        ResourceType.TOPIC,
        topic[:8],
        "User:bob",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
        ResourcePatternType.PREFIXED,
    )
    create_acls(admin, literal, prefixed)
    by_name = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert sorted(admin.describe_acls(by_name).result(TIMEOUT_S)) == sorted([literal, prefixed])
    exact = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(exact).result(TIMEOUT_S) == [literal]
    deleted = admin.delete_acls([by_name])[by_name].result(TIMEOUT_S)
    assert sorted(deleted) == sorted([literal, prefixed])
    assert admin.describe_acls(by_name).result(TIMEOUT_S) == []


def test_an_invalid_acl_is_refused(admin: AdminClient) -> None:
    bad = acl(ResourceType.BROKER, "not-the-cluster", "User:x", AclOperation.ALTER)
    with pytest.raises(KafkaException) as failure:
        create_acls(admin, bad)
    assert error_code(failure.value) == KafkaError.INVALID_REQUEST


def test_acl_apis_say_security_disabled_without_an_authorizer(tmp_path: Path) -> None:
    with running_broker(tmp_path / "plain") as plain:
        admin = AdminClient({"bootstrap.servers": plain.bootstrap, **QUIET})
        binding = acl(ResourceType.TOPIC, "t", "User:x", AclOperation.READ)
        with pytest.raises(KafkaException) as failure:
            create_acls(admin, binding)
        assert error_code(failure.value) == KafkaError.SECURITY_DISABLED
        # librdkafka drops DescribeAcls' top-level error (it answers []); odradek's
        # own admin client shows it
        ours = OdradekAdmin({"bootstrap.servers": plain.bootstrap})
        try:
            everything = OdradekFilter(
                ResourceType.ANY.value, None, 1, None, None, AclOperation.ANY.value, 1
            )
            with pytest.raises(OdradekException, match="SECURITY_DISABLED"):
                ours.describe_acls(everything).result(TIMEOUT_S)
        finally:
            ours.close()


# -- each operation allowed, then denied by an ACL ----------------------------------------


def test_produce_allowed_then_denied(
    broker: BrokerProcess, principal: Principal, admin: AdminClient
) -> None:
    topic = name("produce")
    create_topic(admin, topic)
    assert produce(broker, principal, topic) is None
    create_acls(admin, acl(ResourceType.TOPIC, topic, principal.name, AclOperation.WRITE))
    error = produce(broker, principal, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_an_allow_for_someone_else_closes_the_topic_and_a_host_acl_opens_it(
    broker: BrokerProcess, principal: Principal, admin: AdminClient
) -> None:
    topic = name("hosts")
    create_topic(admin, topic)
    create_acls(
        admin,
        acl(ResourceType.TOPIC, topic, "User:zed", AclOperation.ALL, AclPermissionType.ALLOW),
        # an ALLOW from another host does not apply to this client's 127.0.0.1
        acl(
            ResourceType.TOPIC,
            topic,
            principal.name,
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
            host="10.9.9.9",
        ),
    )
    error = produce(broker, principal, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    host = broker.bootstrap.rsplit(":", 1)[0]
    create_acls(
        admin,
        acl(
            ResourceType.TOPIC,
            topic,
            principal.name,
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
            host=host,
        ),
    )
    assert produce(broker, principal, topic) is None


def consume_one(broker: BrokerProcess, principal: Principal, topic: str, group: str) -> Any:
    """Poll until a message or an error arrives; the ``Message``."""
    consumer = Consumer(
        config(
            broker,
            principal,
            **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False},
        )
    )
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None:
                return message
        raise AssertionError("nothing consumed")
    finally:
        consumer.close()


def test_consume_allowed_then_denied(
    broker: BrokerProcess, principal: Principal, admin: AdminClient
) -> None:
    topic = name("consume")
    create_topic(admin, topic)
    assert produce(broker, principal, topic) is None
    message = consume_one(broker, principal, topic, name("g"))
    assert message.error() is None and message.value() == b"v"
    create_acls(admin, acl(ResourceType.TOPIC, topic, principal.name, AclOperation.READ))
    message = consume_one(broker, principal, topic, name("g"))
    assert message.error() is not None
    assert message.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_group_commit_allowed_then_denied(
    broker: BrokerProcess, principal: Principal, admin: AdminClient
) -> None:
    topic, group = name("commit"), name("group")
    create_topic(admin, topic)
    consumer = Consumer(config(broker, principal, **{"group.id": group}))
    try:
        offsets = [TopicPartition(topic, 0, 1)]
        committed = consumer.commit(offsets=offsets, asynchronous=False)
        assert committed is not None and committed[0].error is None
        create_acls(admin, acl(ResourceType.GROUP, group, principal.name, AclOperation.READ))
        with pytest.raises(KafkaException) as failure:
            consumer.commit(offsets=offsets, asynchronous=False)
        assert error_code(failure.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_metadata_hides_a_topic_without_describe(
    broker: BrokerProcess, principal: Principal, admin: AdminClient
) -> None:
    hidden, shown = name("hidden"), name("shown")
    create_topic(admin, hidden)
    create_topic(admin, shown)
    assert {hidden, shown} <= set(admin.list_topics(timeout=TIMEOUT_S).topics)
    create_acls(
        admin,
        acl(ResourceType.TOPIC, hidden, "User:zed", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    )
    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    assert shown in listed and hidden not in listed
    named = admin.list_topics(hidden, timeout=TIMEOUT_S).topics[hidden]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_create_and_delete_topic_allowed_then_denied(
    broker: BrokerProcess, principal: Principal, admin: AdminClient
) -> None:
    deletable, kept = name("deletable"), name("kept")
    create_topic(admin, deletable)
    create_topic(admin, kept)
    admin.delete_topics([deletable])[deletable].result(TIMEOUT_S)
    create_acls(
        admin,
        acl(ResourceType.TOPIC, kept, principal.name, AclOperation.ALL, AclPermissionType.ALLOW),
        acl(ResourceType.TOPIC, kept, principal.name, AclOperation.DELETE),  # DENY wins
    )
    with pytest.raises(KafkaException) as failure:
        admin.delete_topics([kept])[kept].result(TIMEOUT_S)
    assert error_code(failure.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert kept in admin.list_topics(timeout=TIMEOUT_S).topics
    # creating needs CREATE on the cluster or on the topic: deny both for a prefix
    create_acls(
        admin,
        acl(
            ResourceType.BROKER,
            "kafka-cluster",
            principal.name,
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        ),
        acl(ResourceType.BROKER, "kafka-cluster", principal.name, AclOperation.CREATE),
        acl(
            ResourceType.TOPIC,
            "denied-",
            principal.name,
            AclOperation.CREATE,
            pattern=ResourcePatternType.PREFIXED,
        ),
    )
    with pytest.raises(KafkaException) as failure:
        create_topic(admin, name("denied"))
    assert error_code(failure.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create_topic(admin, name("open"))  # no ACL on the topic: allowed


def test_transactional_producer_denied_on_its_transactional_id(
    broker: BrokerProcess, principal: Principal, admin: AdminClient
) -> None:
    topic, txn_id = name("txn"), name("txn-id")
    create_topic(admin, topic)
    # brokers verify transactional partitions with the coordinator (KIP-890):
    # Kafka asks CLUSTER_ACTION of that inter-broker request; here the broker is
    # ANONYMOUS too, so the cluster resource stays ACL-free (open) for it.
    allowed = Producer(config(broker, principal, **{"transactional.id": name("ok")}))
    allowed.init_transactions(TIMEOUT_S)
    allowed.begin_transaction()
    allowed.produce(topic, b"in-txn")
    allowed.commit_transaction(TIMEOUT_S)
    create_acls(
        admin, acl(ResourceType.TRANSACTIONAL_ID, txn_id, principal.name, AclOperation.WRITE)
    )
    denied = Producer(config(broker, principal, **{"transactional.id": txn_id}))
    with pytest.raises(KafkaException) as failure:
        denied.init_transactions(TIMEOUT_S)
    assert error_code(failure.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_authorized_operations_follow_the_acls(
    broker: BrokerProcess, principal: Principal, admin: AdminClient
) -> None:
    from confluent_kafka import TopicCollection

    topic = name("ops")
    create_topic(admin, topic)
    create_acls(
        admin,
        acl(ResourceType.TOPIC, topic, principal.name, AclOperation.READ, AclPermissionType.ALLOW),
    )
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[
        topic
    ].result(TIMEOUT_S)
    # READ implies DESCRIBE; nothing else is granted
    assert sorted(described.authorized_operations) == [AclOperation.READ, AclOperation.DESCRIBE]


# -- odradek acls ----------------------------------------------------------------------------


def odradek_acls(
    broker: BrokerProcess, principal: Principal, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``odradek acls`` as ``principal`` (its client settings in --command-config)."""
    properties = tmp_path / "client.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in principal.client_config.items()))
    command = [sys.executable, "-m", "odradek", "acls"]
    command += ["--bootstrap-server", bootstrap(broker, principal)]
    command += ["--command-config", str(properties)]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)


def test_odradek_acls_add_list_remove(
    broker: BrokerProcess, principal: Principal, tmp_path: Path
) -> None:
    topic = name("cli")
    added = odradek_acls(
        broker,
        principal,
        tmp_path,
        "--add",
        "--allow-principal",
        "User:carol",
        "--operation",
        "Read",
        "--topic",
        topic,
    )
    assert added.returncode == 0, added.stderr
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    entry = "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)"
    assert f"Adding ACLs for resource `{pattern}`" in added.stdout
    assert entry in added.stdout
    listed = odradek_acls(broker, principal, tmp_path, "--list", "--topic", topic)
    assert listed.returncode == 0 and f"Current ACLs for resource `{pattern}`" in listed.stdout
    assert entry in listed.stdout
    removed = odradek_acls(broker, principal, tmp_path, "--remove", "--topic", topic, "--force")
    assert removed.returncode == 0, removed.stderr
    assert (
        odradek_acls(broker, principal, tmp_path, "--list", "--topic", topic).stdout.strip() == ""
    )
    bad = odradek_acls(
        broker, principal, tmp_path, "--add", "--allow-principal", "carol", "--topic", topic
    )
    assert bad.returncode == 1 and "Type:name" in bad.stderr and "Traceback" not in bad.stderr
