"""Kafka's whole broker config catalogue: accepted, type-checked, stored and described.

A valid Kafka broker property odradek does not use (``sasl.kerberos.min.time.before.relogin``)
used to be refused as unknown by (Incremental)AlterConfigs. Now any property of Kafka's
catalogue is accepted within Kafka's rules — read-only ones are refused as "Cannot
update these configs dynamically", per-broker ones cannot be cluster-wide defaults,
the reconfigurable SSL stores need a listener prefix — stored in the metadata log
(so it survives a restart), and DescribeConfigs lists every one with its Kafka default
and type, documenting the ones with no effect; passwords are sensitive (no value).
Names that are not Kafka broker configs are still refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.server.config import BROKER_CONFIGS, ODRADEK_CONFIGS, BrokerConfig, ConfigError
from odradek.server.config_catalogue import (
    CATALOGUE,
    INERT_CONFIGS,
    NO_EFFECT_DOC,
    definition,
    listener_base,
)
from tests.server.test_admin_configs import (
    BROKER,
    DELETE,
    SET,
    configs_of,
    describe_configs,
    incremental,
)
from tests.support.broker import BrokerProcess, running_broker
from tests.support.wire import WireClient

DYNAMIC_BROKER, DYNAMIC_DEFAULT, DEFAULT = 2, 3, 5
LONG, PASSWORD = 5, 9
RELOGIN = "sasl.kerberos.min.time.before.relogin"


@pytest.fixture(scope="module")
def catalogue_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("catalogue") / "data") as process:
        yield process


# -- the table ---------------------------------------------------------------------------
def test_catalogue_covers_kafka_and_odradek() -> None:
    assert len(CATALOGUE) >= 300
    # odradek invents none but the few it names as its own (metrics.listener)
    assert {d.name for d in BROKER_CONFIGS} - ODRADEK_CONFIGS <= set(CATALOGUE)
    assert not ODRADEK_CONFIGS & set(CATALOGUE)
    entry = CATALOGUE[RELOGIN]
    assert (entry.kind, entry.default, entry.mode) == ("long", "60000", "per-broker")
    assert CATALOGUE["background.threads"].mode == "cluster-wide"
    assert CATALOGUE["broker.rack"].mode == "read-only"
    assert CATALOGUE["sasl.jaas.config"].sensitive
    assert CATALOGUE["remote.log.metadata.manager.class.name"].default.startswith("org.apache")
    assert all(d.name not in {b.name for b in BROKER_CONFIGS} for d in INERT_CONFIGS)


@pytest.mark.parametrize(
    ("name", "raw", "error"),
    [
        ("background.threads", "0", "outside [1, ...]"),
        ("background.threads", "many", "expected an integer"),
        ("compression.lz4.level", "18", "outside [1, 17]"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "outside [0, 1]"),
        ("log.cleaner.min.cleanable.ratio", "half", "expected a number"),
        ("controlled.shutdown.enable", "yes", "expected true or false"),
        ("sasl.login.refresh.buffer.seconds", "40000", "does not fit a short"),
    ],
)
def test_values_are_checked_against_kafkas_types(name: str, raw: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        CATALOGUE[name].parse(name, raw)
    assert str(caught.value).startswith(f"invalid value for {name}: ")
    assert error in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        BrokerConfig({name: raw})  # a server.properties value is checked the same way
    assert error in str(caught.value)  # a server.properties value is checked the same way


def test_static_file_splits_unknown_from_unused() -> None:
    config = BrokerConfig({RELOGIN: "1000", "zookeeper.connect": "x:2181", "num.partitions": "2"})
    assert config.inert == [RELOGIN]
    assert config.unknown == ["zookeeper.connect"]  # gone from Kafka 4: not a broker config


def test_listener_prefixed_names() -> None:
    assert listener_base("listener.name.external.ssl.keystore.location") == (
        "ssl.keystore.location"
    )
    assert listener_base("listener.name.sasl_ssl.plain.sasl.jaas.config") == "sasl.jaas.config"
    assert listener_base("listener.name.external.no.such.thing") is None
    assert definition("listener.name.external.ssl.keystore.location") is not None
    assert definition("no.such.config") is None


# -- dynamic updates ---------------------------------------------------------------------
def _set(client: WireClient, resource: str, name: str, value: str | None, op: int = SET) -> Any:
    (result,) = incremental(client, [(BROKER, resource, [(name, op, value)])])
    return result


def test_unused_kafka_config_is_accepted_per_broker(catalogue_broker: BrokerProcess) -> None:
    with WireClient(catalogue_broker.bootstrap) as client:
        result = _set(client, "1", RELOGIN, "1000")
        assert result.error_code == ErrorCode.none, result.error_message
        (described,) = describe_configs(
            client, [(BROKER, "1", (RELOGIN,))], synonyms=True, documentation=True
        )
        (entry,) = described.configs
        assert (entry.value, entry.config_source, entry.read_only) == (
            "1000",
            DYNAMIC_BROKER,
            False,
        )
        assert entry.config_type == LONG
        assert entry.documentation == NO_EFFECT_DOC
        assert [(s.value, s.source) for s in entry.synonyms] == [
            ("1000", DYNAMIC_BROKER),
            ("60000", DEFAULT),
        ]
        assert _set(client, "1", RELOGIN, None, DELETE).error_code == ErrorCode.none
        entry = configs_of(client, BROKER, "1")[RELOGIN]
        assert (entry.value, entry.config_source) == ("60000", DEFAULT)


def test_cluster_wide_kafka_config_as_default(catalogue_broker: BrokerProcess) -> None:
    with WireClient(catalogue_broker.bootstrap) as client:
        assert _set(client, "", "background.threads", "4").error_code == ErrorCode.none
        defaults = configs_of(client, BROKER, "")
        assert defaults["background.threads"].value == "4"
        entry = configs_of(client, BROKER, "1")["background.threads"]
        assert (entry.value, entry.config_source) == ("4", DYNAMIC_DEFAULT)
        assert _set(client, "", "background.threads", None, DELETE).error_code == ErrorCode.none


@pytest.mark.parametrize(
    ("resource", "name", "value", "message"),
    [
        ("1", "broker.rack", "r1", "Cannot update these configs dynamically"),
        ("1", "no.such.broker.config", "1", "unknown broker configs"),
        ("1", "background.threads", "zero", "background.threads"),
        ("1", "background.threads", "0", "background.threads"),
        ("", RELOGIN, "1000", "default cluster level, broker id must be specified"),
        ("1", "ssl.keystore.location", "/k.jks", "only per-listener using the listener prefix"),
    ],
)
def test_kafkas_rules_for_dynamic_updates(
    catalogue_broker: BrokerProcess, resource: str, name: str, value: str, message: str
) -> None:
    with WireClient(catalogue_broker.bootstrap) as client:
        result = _set(client, resource, name, value)
    assert result.error_code == ErrorCode.invalid_request
    assert message in result.error_message
    assert "Traceback" not in catalogue_broker.log()


def test_listener_prefixed_and_sensitive(catalogue_broker: BrokerProcess) -> None:
    keystore = "listener.name.external.ssl.keystore.location"
    jaas = "listener.name.external.plain.sasl.jaas.config"
    with WireClient(catalogue_broker.bootstrap) as client:
        assert _set(client, "1", keystore, "/k.jks").error_code == ErrorCode.none
        assert _set(client, "1", jaas, "Module required;").error_code == ErrorCode.none
        # Implemented (SASL, server/sasl_settings.py) and read at startup: not dynamic.
        refused = _set(client, "1", "sasl.jaas.config", "M required;")
        assert refused.error_code == ErrorCode.invalid_request
        configs = configs_of(client, BROKER, "1", synonyms=True)
    assert configs[keystore].value == "/k.jks"
    assert configs["sasl.jaas.config"].is_sensitive
    for name in (jaas,):
        entry = configs[name]
        assert entry.is_sensitive and entry.value is None  # Kafka never shows a password
        assert entry.config_source == DYNAMIC_BROKER
        assert all(s.value is None for s in entry.synonyms)
    assert configs["sasl.jaas.config"].config_type == PASSWORD


def test_unused_config_survives_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with running_broker(data_dir) as broker, WireClient(broker.bootstrap) as client:
        assert _set(client, "1", RELOGIN, "1234").error_code == ErrorCode.none
    with running_broker(data_dir) as broker, WireClient(broker.bootstrap) as client:
        entry = configs_of(client, BROKER, "1")[RELOGIN]
        assert (entry.value, entry.config_source) == ("1234", DYNAMIC_BROKER)


def test_confluent_admin_sets_an_unused_kafka_config(catalogue_broker: BrokerProcess) -> None:
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": catalogue_broker.bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry(
                "sasl.kerberos.ticket.renew.jitter",
                "0.1",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=20)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")])
    (configs,) = [f.result(timeout=20) for f in described.values()]
    entry = configs["sasl.kerberos.ticket.renew.jitter"]
    assert (entry.value, entry.is_read_only) == ("0.1", False)
    assert configs["ssl.keystore.password"].is_sensitive
