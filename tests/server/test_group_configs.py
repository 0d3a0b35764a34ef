"""Group configs (KIP-848, resource type 32): described, altered, checked, honoured.

DescribeConfigs / (Incremental)AlterConfigs on a GROUP resource used to answer
INVALID_REQUEST "unsupported resource type 32". Now a group's
``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` (and the share and
streams ones) are stored as config records, described with their broker-wide default
as synonym, checked against the broker's bounds, kept across a restart, and the
KIP-848 coordinator gives that group's members its heartbeat interval and removes them
after its session timeout.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.build import make
from odradek.server.config_groups import GROUP_CONFIGS
from tests.groups.wire import find_coordinator
from tests.server.test_admin_configs import (
    APPEND,
    DELETE,
    SET,
    alter_configs,
    configs_of,
    describe_configs,
    incremental,
)
from tests.server.test_authorized_operations import join_consumer_group
from tests.server.test_protocol import create_topic, nested
from tests.support.broker import BrokerProcess, running_broker
from tests.support.wire import WireClient

GROUP = 32
GROUP_CONFIG, STATIC, DEFAULT = 8, 4, 5
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
# Short bounds so the coordinator test runs in seconds; Kafka's defaults elsewhere.
FAST = (
    "--override",
    "group.consumer.min.session.timeout.ms=500",
    "--override",
    "group.consumer.min.heartbeat.interval.ms=100",
)


@pytest.fixture(scope="module")
def group_config_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("group-configs") / "data") as process:
        yield process


@pytest.fixture(autouse=True)
def _no_tracebacks(group_config_broker: BrokerProcess) -> Iterator[None]:
    yield
    log = group_config_broker.log()
    assert "Traceback" not in log, log[-4000:]


def group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def _set(client: WireClient, name: str, ops: list[tuple[str, int, str | None]]) -> Any:
    (result,) = incremental(client, [(GROUP, name, ops)])
    return result


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_group_configs_every_version(
    group_config_broker: BrokerProcess, version: int
) -> None:
    name = group()
    with WireClient(group_config_broker.bootstrap) as client:
        configs = configs_of(client, GROUP, name, version=version, synonyms=True)
        assert list(configs) == [d.name for d in GROUP_CONFIGS]
        session = configs[SESSION]
        assert (session.value, session.config_source, session.read_only) == (
            "45000",
            DEFAULT,
            False,
        )
        assert [(s.name, s.value, s.source) for s in session.synonyms] == [
            ("group.consumer.session.timeout.ms", "45000", DEFAULT)
        ]
        assert configs[HEARTBEAT].value == "5000"
        assert configs["share.auto.offset.reset"].value == "latest"
        if version >= 3:
            assert session.config_type == 3  # INT
        (only,) = describe_configs(client, [(GROUP, name, (HEARTBEAT,))], version)
        assert [c.name for c in only.configs] == [HEARTBEAT]
        (empty,) = describe_configs(client, [(GROUP, "", None)], version)
        assert empty.error_code == ErrorCode.invalid_request


@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_group_configs(group_config_broker: BrokerProcess, version: int) -> None:
    name = group()
    with WireClient(group_config_broker.bootstrap) as client:
        (result,) = incremental(
            client, [(GROUP, name, [(SESSION, SET, "50000"), (HEARTBEAT, SET, "6000")])], version
        )
        assert result.error_code == ErrorCode.none, result.error_message
        configs = configs_of(client, GROUP, name, synonyms=True)
        session = configs[SESSION]
        assert (session.value, session.config_source) == ("50000", GROUP_CONFIG)
        assert [(s.name, s.value, s.source) for s in session.synonyms] == [
            (SESSION, "50000", GROUP_CONFIG),
            ("group.consumer.session.timeout.ms", "45000", DEFAULT),
        ]
        assert configs[HEARTBEAT].value == "6000"
        other = configs_of(client, GROUP, group())  # other groups keep the broker's
        assert other[SESSION].value == "45000"
        (reset,) = incremental(client, [(GROUP, name, [(SESSION, DELETE, None)])], version)
        assert reset.error_code == ErrorCode.none
        configs = configs_of(client, GROUP, name)
        assert (configs[SESSION].value, configs[SESSION].config_source) == ("45000", DEFAULT)
        assert configs[HEARTBEAT].value == "6000"


@pytest.mark.parametrize("version", range(0, 3))
def test_legacy_alter_group_configs(group_config_broker: BrokerProcess, version: int) -> None:
    name = group()
    with WireClient(group_config_broker.bootstrap) as client:
        (result,) = alter_configs(client, [(GROUP, name, {HEARTBEAT: "7000"})], version)
        assert result.error_code == ErrorCode.none, result.error_message
        assert configs_of(client, GROUP, name)[HEARTBEAT].value == "7000"


@pytest.mark.parametrize(
    ("ops", "error", "message"),
    [
        ([(SESSION, SET, "44999")], "invalid_config", "group.consumer.min.session.timeout.ms"),
        ([(SESSION, SET, "60001")], "invalid_config", "group.consumer.max.session.timeout.ms"),
        ([(HEARTBEAT, SET, "4999")], "invalid_config", "group.consumer.min.heartbeat.interval.ms"),
        ([(HEARTBEAT, SET, "15001")], "invalid_config", "group.consumer.max.heartbeat.interval"),
        ([(SESSION, SET, "soon")], "invalid_config", "Not a number"),
        ([(SESSION, SET, "0")], "invalid_config", "at least 1"),
        ([("no.such.group.config", SET, "1")], "invalid_config", "Unknown group config name"),
        ([("share.auto.offset.reset", SET, "sideways")], "invalid_config", "sideways"),
        ([("share.isolation.level", SET, "dirty")], "invalid_config", "dirty"),
        ([("streams.num.standby.replicas", SET, "3")], "invalid_config", "max.standby"),
        ([(SESSION, APPEND, "1")], "invalid_config", "not a list"),
        ([(SESSION, SET, None)], "invalid_request", "null value"),
    ],
)
def test_group_configs_are_checked(
    group_config_broker: BrokerProcess, ops: list[Any], error: str, message: str
) -> None:
    name = group()
    with WireClient(group_config_broker.bootstrap) as client:
        result = _set(client, name, ops)
        assert result.error_code == getattr(ErrorCode, error), result.error_message
        assert message in result.error_message
        assert configs_of(client, GROUP, name)[SESSION].config_source == DEFAULT


def test_share_and_streams_group_configs(group_config_broker: BrokerProcess) -> None:
    name = group()
    ops = [
        ("share.auto.offset.reset", SET, "by_duration:PT1H"),
        ("share.isolation.level", SET, "read_committed"),
        ("share.record.lock.duration.ms", SET, "20000"),
        ("streams.num.standby.replicas", SET, "1"),
    ]
    with WireClient(group_config_broker.bootstrap) as client:
        assert _set(client, name, ops).error_code == ErrorCode.none
        configs = configs_of(client, GROUP, name, documentation=True)
    assert configs["share.auto.offset.reset"].value == "by_duration:PT1H"
    assert configs["streams.num.standby.replicas"].value == "1"
    assert "no effect" in configs["share.isolation.level"].documentation


def test_session_must_exceed_heartbeat(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data", FAST) as broker, WireClient(broker.bootstrap) as c:
        result = _set(c, group(), [(SESSION, SET, "4000")])  # heartbeat stays 5000
        assert result.error_code == ErrorCode.invalid_config
        assert "consumer.session.timeout.ms must be greater than" in result.error_message
        ok = _set(c, group(), [(SESSION, SET, "4000"), (HEARTBEAT, SET, "1000")])
        assert ok.error_code == ErrorCode.none, ok.error_message


def test_group_configs_survive_a_restart(tmp_path: Path) -> None:
    data_dir, name = tmp_path / "data", group()
    with running_broker(data_dir) as broker, WireClient(broker.bootstrap) as client:
        assert _set(client, name, [(SESSION, SET, "55000")]).error_code == ErrorCode.none
    with running_broker(data_dir) as broker, WireClient(broker.bootstrap) as client:
        configs = configs_of(client, GROUP, name)
    assert (configs[SESSION].value, configs[SESSION].config_source) == ("55000", GROUP_CONFIG)


# -- the KIP-848 coordinator honours them -----------------------------------------------------
def _members(client: WireClient, group_id: str) -> int:
    module = nested(CONSUMER_GROUP_DESCRIBE, 0)
    (described,) = client.request(
        make(
            module.ConsumerGroupDescribeRequest,
            group_ids=(group_id,),
            include_authorized_operations=False,
        )
    ).groups
    assert described.error_code == ErrorCode.none, described
    return len(described.members)


def test_consumer_group_uses_its_own_session_and_heartbeat(tmp_path: Path) -> None:
    short, plain, topic = group(), group(), f"t-{uuid.uuid4().hex[:8]}"
    with running_broker(tmp_path / "data", FAST) as broker, WireClient(broker.bootstrap) as c:
        create_topic(c, topic, 1)
        ops = [(SESSION, SET, "1000"), (HEARTBEAT, SET, "300")]
        assert _set(c, short, ops).error_code == ErrorCode.none
        assert find_coordinator(c, 3, [short, plain])[0][4] == ErrorCode.none
        joined = join_consumer_group(c, short, topic)
        assert joined.heartbeat_interval == datetime.timedelta(milliseconds=300)
        other = join_consumer_group(c, plain, topic)
        assert other.heartbeat_interval == datetime.timedelta(milliseconds=5000)
        # Neither member heartbeats again: only the group with a 1 s session loses its.
        deadline = time.monotonic() + 15
        while _members(c, short) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _members(c, short) == 0
        assert _members(c, plain) == 1  # the broker's 45 s session


def test_confluent_admin_group_configs(group_config_broker: BrokerProcess) -> None:
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    name = group()
    admin = AdminClient({"bootstrap.servers": group_config_broker.bootstrap})
    change = ConfigResource(
        ConfigResource.Type.GROUP,
        name,
        incremental_configs=[
            ConfigEntry(SESSION, "50000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(timeout=20)
    resource = ConfigResource(ConfigResource.Type.GROUP, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=20)
    assert configs[SESSION].value == "50000"
    assert configs[SESSION].source == GROUP_CONFIG
    assert configs[HEARTBEAT].value == "5000"
