"""kafka-configs.sh's spellings of ``odradek configs`` and kafka-console-consumer's
``--offset earliest|latest|N`` of ``odradek consume``, against one real broker; what
the tools changed is read back with confluent-kafka (nobody here wrote it)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import click
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from odradek.cli.configs import kafka_config_list
from odradek.cli.main import main
from tests.support.broker import BrokerProcess, running_broker


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("options") / "data") as process:
        yield process


def odradek(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "odradek", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr
    return done


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_topic(kafka: BrokerProcess, partitions: int = 1) -> str:
    topic = f"k-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def dynamic_configs(kafka: BrokerProcess, restype: str, name: str) -> dict[str, str]:
    """The configs set on the resource, as confluent-kafka reads them."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    resource = ConfigResource(restype, name)
    entries = admin.describe_configs([resource])[resource].result(30)
    dynamic = {
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    }
    return {
        e.name: e.value for e in entries.values() if e.value is not None and e.source in dynamic
    }


def test_add_config_reads_kafkas_bracketed_lists() -> None:
    assert kafka_config_list("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    for bad in ("a", "=1", "a=[x,y", "a=[x]y"):
        with pytest.raises(click.BadParameter):
            kafka_config_list(bad)


def test_kafka_configs_spelling_for_a_topic(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka)
    where = ["--entity-type", "topics", "--entity-name", topic]
    out = ok(
        odradek(
            kafka,
            "configs",
            "--alter",
            *where,
            "--add-config",
            "retention.ms=1000,cleanup.policy=[compact,delete]",
        )
    )
    assert f"topic {topic}" in out
    assert dynamic_configs(kafka, "topic", topic) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
    }
    described = ok(odradek(kafka, "configs", *where, "--describe", "-o", "json"))
    assert '"retention.ms"' in described and '"compact,delete"' in described
    ok(odradek(kafka, "configs", "--alter", "--topic", topic, "--delete-config", "retention.ms"))
    assert dynamic_configs(kafka, "topic", topic) == {"cleanup.policy": "compact,delete"}
    # odradek's own spelling still works next to it
    ok(
        odradek(
            kafka,
            "configs",
            "alter",
            topic,
            "--set",
            "retention.ms=7",
            "--delete",
            "cleanup.policy",
        )
    )
    assert dynamic_configs(kafka, "topic", topic) == {"retention.ms": "7"}
    everything = ok(
        odradek(kafka, "configs", "--describe", "--entity-type", "topics", "-o", "json")
    )
    assert len(everything.splitlines()) >= 1 and '"7"' in everything  # one JSON list per topic


def test_kafka_configs_spelling_for_broker_defaults_and_brokers(kafka: BrokerProcess) -> None:
    ok(
        odradek(
            kafka,
            "configs",
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-default",
            "--add-config",
            "log.cleaner.threads=2",
        )
    )
    assert dynamic_configs(kafka, "broker", "1")["log.cleaner.threads"] == "2"
    every_broker = ok(odradek(kafka, "configs", "--describe", "--entity-type", "brokers"))
    assert "broker 1" in every_broker and "log.cleaner.threads" in every_broker
    defaults = ok(odradek(kafka, "configs", "--describe", "--broker-defaults"))
    assert "broker defaults" in defaults and "log.cleaner.threads" in defaults
    ok(
        odradek(
            kafka,
            "configs",
            "--alter",
            "--broker-defaults",
            "--delete-config",
            "log.cleaner.threads",
        )
    )
    assert "log.cleaner.threads" not in dynamic_configs(kafka, "broker", "1")


def test_kafka_configs_spelling_for_a_group(kafka: BrokerProcess) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    alter = ["--alter", "--group", group, "--add-config", "consumer.session.timeout.ms=50000"]
    ok(odradek(kafka, "configs", *alter))
    shown = ok(
        odradek(kafka, "configs", "--describe", "--entity-type", "groups", "--entity-name", group)
    )
    assert "consumer.session.timeout.ms" in shown and "50000" in shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--describe", "--entity-type", "topics", "--broker", "1"], "does not go with"),
        (["--describe", "--topic", "a", "--entity-name", "b"], "name one entity"),
        (["--describe", "--entity-type", "topics", "--entity-default"], "brokers only"),
        (["--describe", "--entity-type", "broker-loggers", "--entity-name", "1"], "not supported"),
        (["--alter", "--entity-type", "topics", "--add-config", "a=1"], "Missing argument"),
        (["--alter", "--topic", "t", "--add-config", "a=[1"], "without ']'"),
        (["--alter", "--topic", "t", "--add-config", "a=1", "--delete-config", "a"], "at once"),
        (["--alter", "--topic", "t", "--add-config-file", "/nonexistent"], "cannot read"),
    ],
)
def test_kafka_configs_bad_combinations_are_usage_errors(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    # refused before any request: port 9 (discard) is never reached
    assert main(["configs", *args, "-b", "127.0.0.1:9"]) == 2
    assert message in capsys.readouterr().err


def test_consume_offset_takes_earliest_latest_or_a_number(kafka: BrokerProcess) -> None:
    topic = new_topic(kafka, partitions=2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(5):
        producer.produce(topic, b"r%d" % i, partition=1)
    assert producer.flush(30) == 0
    read = ["consume", topic, "--partition", "1", "--timeout-ms", "1000"]
    assert ok(odradek(kafka, *read, "--offset", "earliest")).split() == [f"r{i}" for i in range(5)]
    assert ok(odradek(kafka, *read, "--offset", "3")).split() == ["r3", "r4"]
    assert ok(odradek(kafka, *read, "--offset", "latest")) == ""
    assert ok(odradek(kafka, *read, "--offset", "EARLIEST", "-n", "1")).split() == ["r0"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partition", "0", "--offset", "-1"], "earliest, latest or an offset"),
        (["--partition", "0", "--offset", "soon"], "earliest, latest or an offset"),
        (["--offset", "earliest"], "--offset needs --partition"),
        (["--partition", "0", "--offset", "1", "--from-beginning"], "exclude each other"),
    ],
)
def test_consume_bad_offsets_are_usage_errors(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["consume", "t", *args, "-b", "127.0.0.1:9"]) == 2
    assert message in capsys.readouterr().err
