"""Config APIs of a real broker, every claimed version, with kio on the wire.

DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topic and broker
resources: values, sources, synonyms, types and documentation; each error code; a
topic config change reaching the live log. Sources and synonyms across the layers
(topic override, dynamic per-node, dynamic cluster default, static, default) are
checked on a broker of their own, which is then restarted to show that every
dynamic config survives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.build import make
from tests.server.test_admin import (  # noqa: F401 - _no_tracebacks is an autouse fixture
    ALTER_CONFIGS,
    APPEND,
    BROKER,
    BROKER_LOGGER,
    DELETE,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    SET,
    SUBTRACT,
    TOPIC,
    _no_tracebacks,
    partition_count,
)
from tests.server.test_protocol import batch, make_topic, nested, produce, unique
from tests.support.broker import BrokerProcess
from tests.support.wire import WireClient


def describe_configs(
    client: WireClient,
    resources: list[tuple[int, str, tuple[str, ...] | None]],
    version: int = 4,
    synonyms: bool = False,
    documentation: bool = False,
) -> list[Any]:
    module = nested(DESCRIBE_CONFIGS, version)
    body = make(
        module.DescribeConfigsRequest,
        resources=tuple(
            make(
                module.DescribeConfigsResource,
                resource_type=t,
                resource_name=n,
                configuration_keys=keys,
            )
            for t, n, keys in resources
        ),
        include_synonyms=synonyms,
        include_documentation=documentation,
    )
    return list(client.request(body).results)


def configs_of(client: WireClient, resource_type: int, name: str, **kw: Any) -> dict[str, Any]:
    (result,) = describe_configs(client, [(resource_type, name, None)], **kw)
    assert result.error_code == ErrorCode.none, result
    return {c.name: c for c in result.configs}


def alter_configs(
    client: WireClient,
    resources: list[tuple[int, str, dict[str, str | None]]],
    version: int = 2,
    validate_only: bool = False,
) -> list[Any]:
    module = nested(ALTER_CONFIGS, version)
    body = make(
        module.AlterConfigsRequest,
        resources=tuple(
            make(
                module.AlterConfigsResource,
                resource_type=t,
                resource_name=n,
                configs=tuple(
                    make(module.AlterableConfig, name=k, value=v) for k, v in configs.items()
                ),
            )
            for t, n, configs in resources
        ),
        validate_only=validate_only,
    )
    return list(client.request(body).responses)


def incremental(
    client: WireClient,
    resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
    version: int = 1,
    validate_only: bool = False,
) -> list[Any]:
    module = nested(INCREMENTAL_ALTER_CONFIGS, version)
    body = make(
        module.IncrementalAlterConfigsRequest,
        resources=tuple(
            make(
                module.AlterConfigsResource,
                resource_type=t,
                resource_name=n,
                configs=tuple(
                    make(module.AlterableConfig, name=k, config_operation=op, value=v)
                    for k, op, v in ops
                ),
            )
            for t, n, ops in resources
        ),
        validate_only=validate_only,
    )
    return list(client.request(body).responses)


def set_topic_configs(client: WireClient, topic: str, **values: str) -> None:
    ops = [(k.replace("_", "."), SET, v) for k, v in values.items()]
    (result,) = incremental(client, [(TOPIC, topic, ops)])
    assert result.error_code == ErrorCode.none, result


# -- DescribeConfigs -------------------------------------------------------------------
@pytest.mark.parametrize("version", range(1, 5))
def test_describe_topic_configs(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, f"dc-v{version}", configs={"retention.ms": "1234"})
        configs = configs_of(client, TOPIC, name, version=version)
        assert len(configs) == 28  # every topic config, tiered storage (KIP-405) ones included
        throttled = configs["leader.replication.throttled.replicas"]
        assert (throttled.value, throttled.config_source) == ("", 5)
        if version >= 3:
            assert throttled.config_type == 7  # LIST, as Kafka types it
        retention = configs["retention.ms"]
        assert (retention.value, retention.config_source, retention.read_only) == ("1234", 1, False)
        assert retention.is_sensitive is False and retention.synonyms == ()
        segment = configs["segment.bytes"]
        assert (segment.value, segment.config_source) == ("1073741824", 5)
        assert configs["preallocate"].value == "false"
        assert configs["cleanup.policy"].value == "delete"
        if version >= 3:
            assert configs["retention.ms"].config_type == 5  # LONG
            assert configs["segment.bytes"].config_type == 3  # INT
            assert configs["cleanup.policy"].config_type == 7  # LIST
            assert configs["preallocate"].config_type == 1  # BOOLEAN
            assert configs["compression.type"].config_type == 2  # STRING
            assert configs["min.cleanable.dirty.ratio"].config_type == 6  # DOUBLE
            assert retention.documentation is None
        # Synonyms: the topic override, then the broker property with its default.
        configs = configs_of(
            client, TOPIC, name, version=version, synonyms=True, documentation=True
        )
        assert [(s.name, s.value, s.source) for s in configs["retention.ms"].synonyms] == [
            ("retention.ms", "1234", 1),
            ("log.retention.hours", "168", 5),
        ]
        assert [(s.name, s.value, s.source) for s in configs["segment.bytes"].synonyms] == [
            ("log.segment.bytes", "1073741824", 5)
        ]
        if version >= 3:
            assert "age" in configs["retention.ms"].documentation
        # Requested keys only (an unknown key is simply absent).
        (result,) = describe_configs(
            client, [(TOPIC, name, ("segment.bytes", "retention.ms", "nope"))], version
        )
        assert sorted(c.name for c in result.configs) == ["retention.ms", "segment.bytes"]
        missing, invalid, unsupported = describe_configs(
            client,
            [
                (TOPIC, unique("missing"), None),
                (TOPIC, "bad/name", None),
                (BROKER_LOGGER, "1", None),
            ],
            version,
        )
        assert missing.error_code == ErrorCode.unknown_topic_or_partition
        assert invalid.error_code == ErrorCode.invalid_topic_exception
        assert unsupported.error_code == ErrorCode.invalid_request
        assert missing.configs == () and missing.error_message


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_broker_configs(shared_broker: BrokerProcess, version: int) -> None:
    from odradek.server.config_catalogue import ALL_BROKER_CONFIGS

    with WireClient(shared_broker.bootstrap) as client:
        configs = configs_of(client, BROKER, "1", version=version, synonyms=True)
        # odradek's properties, then the rest of Kafka's catalogue.
        assert list(configs) == [d.name for d in ALL_BROKER_CONFIGS]
        log_dirs = configs["log.dirs"]
        assert log_dirs.value == str(shared_broker.data_dir)
        assert (log_dirs.config_source, log_dirs.read_only) == (4, True)  # STATIC, not dynamic
        partitions = configs["num.partitions"]
        assert (partitions.value, partitions.config_source, partitions.read_only) == ("1", 5, False)
        assert configs["advertised.listeners"].value is None
        retention = configs["log.retention.hours"]
        assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
            ("log.retention.hours", "168", 5)
        ]
        if version >= 3:
            assert configs["auto.create.topics.enable"].config_type == 1  # BOOLEAN
            assert configs["log.retention.ms"].config_type == 5  # LONG
            assert configs["num.partitions"].config_type == 3  # INT
            assert configs["listeners"].config_type == 7  # LIST
            assert configs["log.cleanup.policy"].config_type == 7  # LIST
        (only,) = describe_configs(client, [(BROKER, "1", ("num.partitions",))], version)
        assert [c.name for c in only.configs] == ["num.partitions"]
        defaults, other, garbage = describe_configs(
            client, [(BROKER, "", None), (BROKER, "7", None), (BROKER, "x", None)], version
        )
        assert defaults.error_code == ErrorCode.none and defaults.configs == ()
        assert other.error_code == ErrorCode.invalid_request
        assert garbage.error_code == ErrorCode.invalid_request


# -- AlterConfigs ------------------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 3))
def test_alter_configs_replaces_the_whole_set(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, f"ac-v{version}", configs={"retention.ms": "1000"})
        (dry,) = alter_configs(
            client, [(TOPIC, name, {"max.message.bytes": "2000"})], version, validate_only=True
        )
        assert dry.error_code == ErrorCode.none
        assert configs_of(client, TOPIC, name)["retention.ms"].value == "1000"
        (done,) = alter_configs(client, [(TOPIC, name, {"max.message.bytes": "2000"})], version)
        assert (done.error_code, done.resource_type, done.resource_name) == (
            ErrorCode.none,
            TOPIC,
            name,
        )
        configs = configs_of(client, TOPIC, name)
        assert (configs["max.message.bytes"].value, configs["max.message.bytes"].config_source) == (
            "2000",
            1,
        )
        # retention.ms was not in the new set: back to the default.
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == (
            "604800000",
            5,
        )
        # The live log uses the new config: a 2001-byte batch is now too large.
        big = produce(client, name, 0, batch([b"x" * 2100]))
        assert big.error_code == ErrorCode.message_too_large

        cases: list[tuple[int, str, dict[str, str | None]]] = [
            (TOPIC, name, {"retention.ms": "soon"}),
            (TOPIC, name, {"no.such.config": "1"}),
            (TOPIC, name, {"retention.ms": None}),
            (TOPIC, unique("missing"), {"retention.ms": "1"}),
            (TOPIC, "bad/name", {"retention.ms": "1"}),
            (BROKER, "1", {"log.dirs": "/tmp/elsewhere"}),
            (BROKER, "1", {"num.partitions": "many"}),
            (BROKER, "1", {"no.such.broker.config": "1"}),
            (BROKER, "9", {"num.partitions": "2"}),
            (BROKER_LOGGER, "1", {"kafka": "DEBUG"}),
        ]
        # One request per case: a resource listed twice in one request is itself an error.
        results = [alter_configs(client, [case], version)[0] for case in cases]
        codes = [r.error_code for r in results]
        assert codes == [
            ErrorCode.invalid_config,
            ErrorCode.invalid_config,
            ErrorCode.invalid_request,
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.invalid_topic_exception,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
        ]
        assert "retention.ms" in results[0].error_message
        assert "no.such.config" in results[1].error_message
        assert "Cannot update these configs dynamically" in results[5].error_message
        assert "log.dirs" in results[5].error_message
        assert "num.partitions" in results[6].error_message
        # Valid broker changes pass validation (nothing is committed here).
        ok = alter_configs(
            client,
            [(BROKER, "1", {"num.partitions": "3"}), (BROKER, "", {"log.retention.ms": "5000"})],
            version,
            validate_only=True,
        )
        assert [r.error_code for r in ok] == [ErrorCode.none, ErrorCode.none]
        assert configs_of(client, BROKER, "1")["num.partitions"].value == "1"
        # The same resource twice, and duplicate keys, are rejected.
        twice = alter_configs(client, [(TOPIC, name, {}), (TOPIC, name, {})], version)
        assert [r.error_code for r in twice] == [ErrorCode.invalid_request] * 2
        module = nested(ALTER_CONFIGS, version)
        duplicated = make(
            module.AlterConfigsRequest,
            validate_only=False,
            resources=(
                make(
                    module.AlterConfigsResource,
                    resource_type=TOPIC,
                    resource_name=name,
                    configs=(
                        make(module.AlterableConfig, name="retention.ms", value="1"),
                        make(module.AlterableConfig, name="retention.ms", value="2"),
                    ),
                ),
            ),
        )
        (result,) = client.request(duplicated).responses
        assert result.error_code == ErrorCode.invalid_request


# -- IncrementalAlterConfigs -------------------------------------------------------------
@pytest.mark.parametrize("version", range(0, 2))
def test_incremental_alter_configs(shared_broker: BrokerProcess, version: int) -> None:
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, f"iac-v{version}", configs={"retention.ms": "1000"})
        (dry,) = incremental(
            client, [(TOPIC, name, [("segment.bytes", SET, "4096")])], version, validate_only=True
        )
        assert dry.error_code == ErrorCode.none
        assert configs_of(client, TOPIC, name)["segment.bytes"].config_source == 5
        (done,) = incremental(
            client,
            [
                (
                    TOPIC,
                    name,
                    [
                        ("segment.bytes", SET, "4096"),
                        ("retention.ms", DELETE, None),
                        ("cleanup.policy", APPEND, "compact"),
                    ],
                )
            ],
            version,
        )
        assert (done.error_code, done.resource_name) == (ErrorCode.none, name)
        configs = configs_of(client, TOPIC, name)
        assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == (
            "4096",
            1,
        )
        assert configs["retention.ms"].config_source == 5
        assert configs["cleanup.policy"].value == "delete,compact"
        (result,) = incremental(
            client,
            [
                (
                    TOPIC,
                    name,
                    [("cleanup.policy", SUBTRACT, "delete"), ("cleanup.policy", APPEND, "x")],
                )
            ],
            version,
        )
        assert result.error_code == ErrorCode.invalid_request  # duplicate keys
        (result,) = incremental(
            client, [(TOPIC, name, [("cleanup.policy", SUBTRACT, "delete")])], version
        )
        assert result.error_code == ErrorCode.none
        assert configs_of(client, TOPIC, name)["cleanup.policy"].value == "compact"
        (result,) = incremental(
            client, [(TOPIC, name, [("cleanup.policy", APPEND, "compact")])], version
        )
        assert result.error_code == ErrorCode.none
        assert configs_of(client, TOPIC, name)["cleanup.policy"].value == "compact"

        cases = [
            (TOPIC, name, [("retention.ms", APPEND, "5")]),
            (TOPIC, name, [("cleanup.policy", SUBTRACT, "compact")]),  # would be empty
            (TOPIC, name, [("no.such.config", SET, "1")]),
            (TOPIC, name, [("retention.ms", SET, "soon")]),
            (TOPIC, name, [("retention.ms", 9, "1")]),
            (TOPIC, name, [("retention.ms", SET, None)]),
            (TOPIC, unique("missing"), [("retention.ms", SET, "1")]),
            (BROKER, "1", [("log.dirs", SET, "/elsewhere")]),
            (BROKER, "1", [("log.segment.bytes", SET, "1")]),
            (BROKER, "1", [("num.partitions", APPEND, "1")]),
            (BROKER, "2", [("num.partitions", SET, "2")]),
        ]
        results = [incremental(client, [case], version)[0] for case in cases]
        assert [r.error_code for r in results] == [
            ErrorCode.invalid_config,
            ErrorCode.invalid_config,
            ErrorCode.invalid_config,
            ErrorCode.invalid_config,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.invalid_request,
            ErrorCode.invalid_request,
            ErrorCode.invalid_config,
            ErrorCode.invalid_request,
        ]
        assert "retention.ms" in results[0].error_message
        assert "cleanup.policy" in results[1].error_message
        assert "no.such.config" in results[2].error_message
        assert "retention.ms" in results[3].error_message
        assert "log.dirs" in results[7].error_message
        assert "log.segment.bytes" in results[8].error_message
        ok = incremental(
            client,
            [(BROKER, "1", [("log.cleanup.policy", APPEND, "compact")])],
            version,
            validate_only=True,
        )
        assert ok[0].error_code == ErrorCode.none


def test_topic_config_change_reaches_the_live_log(shared_broker: BrokerProcess) -> None:
    """segment.bytes set after creation rolls the live log's segments."""
    with WireClient(shared_broker.bootstrap) as client:
        name = make_topic(client, "live")
        assert produce(client, name, 0, batch([b"a" * 600])).error_code == ErrorCode.none
        set_topic_configs(client, name, segment_bytes="1024")
        for _ in range(4):
            assert produce(client, name, 0, batch([b"b" * 600])).error_code == ErrorCode.none
    segments = sorted((shared_broker.data_dir / f"{name}-0").glob("*.log"))
    assert len(segments) >= 3, segments


# -- config sources across the layers, and after a restart ----------------------------------
def test_config_sources_synonyms_and_restart(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", ["--override", "log.retention.ms=86400000"]).start()
    try:
        with WireClient(process.bootstrap) as client:
            name = make_topic(client, "layers")

            def retention() -> tuple[str, int, list[tuple[str, str, int]]]:
                entry = configs_of(client, TOPIC, name, synonyms=True)["retention.ms"]
                return (
                    entry.value,
                    entry.config_source,
                    [(s.name, s.value, s.source) for s in entry.synonyms],
                )

            static = ("log.retention.ms", "86400000", 4)
            default = ("log.retention.hours", "168", 5)
            assert retention() == ("86400000", 4, [static, default])
            (result,) = incremental(client, [(BROKER, "", [("log.retention.ms", SET, "3600000")])])
            assert result.error_code == ErrorCode.none
            cluster = ("log.retention.ms", "3600000", 3)
            assert retention() == ("3600000", 3, [cluster, static, default])
            (result,) = alter_configs(
                client, [(BROKER, "1", {"log.retention.ms": "60000", "num.partitions": "2"})]
            )
            assert result.error_code == ErrorCode.none
            node = ("log.retention.ms", "60000", 2)
            assert retention() == ("60000", 2, [node, cluster, static, default])
            set_topic_configs(client, name, retention_ms="1000")
            assert retention() == (
                "1000",
                1,
                [("retention.ms", "1000", 1), node, cluster, static, default],
            )
            # The dynamic num.partitions is the default of new topics.
            assert partition_count(client, make_topic(client, "two", partitions=-1)) == 2
            # A dynamic broker default reaches the live log of a topic without an override.
            big = batch([b"x" * 1500])
            assert produce(client, name, 0, big).error_code == ErrorCode.none
            ops = [("message.max.bytes", SET, "1000")]
            assert incremental(client, [(BROKER, "", ops)])[0].error_code == ErrorCode.none
            assert produce(client, name, 0, big).error_code == ErrorCode.message_too_large
            ops = [("message.max.bytes", DELETE, None)]
            assert incremental(client, [(BROKER, "", ops)])[0].error_code == ErrorCode.none
            assert produce(client, name, 0, big).error_code == ErrorCode.none

            def broker_view() -> tuple[Any, Any, Any]:
                defaults = configs_of(client, BROKER, "", synonyms=True)
                mine = configs_of(client, BROKER, "1", synonyms=True)
                return defaults, mine, configs_of(client, TOPIC, name, synonyms=True)

            defaults, mine, topic = broker_view()
            assert list(defaults) == ["log.retention.ms"]
            assert (
                defaults["log.retention.ms"].value,
                defaults["log.retention.ms"].config_source,
            ) == ("3600000", 3)
            assert [s.source for s in defaults["log.retention.ms"].synonyms] == [3, 4, 5]
            assert (mine["log.retention.ms"].value, mine["log.retention.ms"].config_source) == (
                "60000",
                2,
            )
            assert (mine["num.partitions"].value, mine["num.partitions"].config_source) == (
                "2",
                2,
            )
            before = [
                {k: (c.value, c.config_source, c.synonyms) for k, c in view.items()}
                for view in (defaults, mine, topic)
            ]
        assert process.stop() == 0
        process.start()
        with WireClient(process.bootstrap) as client:
            defaults, mine, topic = broker_view()
            after = [
                {k: (c.value, c.config_source, c.synonyms) for k, c in view.items()}
                for view in (defaults, mine, topic)
            ]
            assert after == before
            assert retention()[:2] == ("1000", 1)
            # Replacing the node's dynamic set with an empty one removes it.
            (result,) = alter_configs(client, [(BROKER, "1", {})])
            assert result.error_code == ErrorCode.none
            assert configs_of(client, BROKER, "1")["num.partitions"].config_source == 5
            (result,) = incremental(client, [(BROKER, "", [("log.retention.ms", DELETE, None)])])
            assert result.error_code == ErrorCode.none
            assert configs_of(client, BROKER, "") == {}
            set_topic_configs(client, name)
            (result,) = incremental(client, [(TOPIC, name, [("retention.ms", DELETE, None)])])
            assert result.error_code == ErrorCode.none
            assert retention() == ("86400000", 4, [static, default])
    finally:
        try:
            assert process.stop() == 0
        finally:
            process.kill()
