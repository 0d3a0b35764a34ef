"""TLS listener settings in the broker's config (server/config.py): built at startup,
per-listener overrides, and the broker-to-broker listeners that must stay PLAINTEXT."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.server.config import BrokerConfig, ConfigError
from tests.support.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def quorum(certs: Certs, tmp_path: Path, **changes: str) -> dict[str, str]:
    properties = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": "1@localhost:9093",
        "controller.listener.names": "CONTROLLER",
        "listeners": "INTERNAL://:9092,SSL://:9094,CONTROLLER://:9093",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "log.dirs": str(tmp_path),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.server.keystore_pem),
    }
    properties.update(changes)
    return properties


def test_client_tls_listener_beside_plaintext_internal_ones(certs: Certs, tmp_path: Path) -> None:
    config = BrokerConfig(quorum(certs, tmp_path))
    assert set(config.listener_tls) == {"SSL"}
    assert config.listener_tls["SSL"].client_auth == "none"
    assert "ssl.keystore.location" not in config.inert


def test_listener_prefixed_settings_win_and_are_not_inert(certs: Certs, tmp_path: Path) -> None:
    prefix = "listener.name.ssl."
    config = BrokerConfig(
        quorum(
            certs,
            tmp_path,
            **{
                f"{prefix}ssl.client.auth": "requested",
                f"{prefix}ssl.truststore.type": "PEM",
                f"{prefix}ssl.truststore.location": str(certs.ca),
            },
        )
    )
    assert config.listener_tls["SSL"].client_auth == "requested"
    assert not [k for k in config.inert if k.startswith(prefix)]


def test_tls_between_nodes_gets_the_broker_s_client_contexts(certs: Certs, tmp_path: Path) -> None:
    config = BrokerConfig(
        quorum(
            certs,
            tmp_path,
            **{
                "listener.security.protocol.map": "INTERNAL:SSL,SSL:SSL,CONTROLLER:SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(certs.ca),
                "listener.name.controller.ssl.endpoint.identification.algorithm": "",
            },
        )
    )
    inter_broker, controller = config.inter_broker_ssl_context, config.controller_ssl_context
    assert inter_broker is not None and controller is not None
    assert inter_broker.check_hostname and not controller.check_hostname
    assert BrokerConfig(quorum(certs, tmp_path)).inter_broker_ssl_context is None


def test_a_bad_truststore_for_the_broker_s_clients_is_one_line(
    certs: Certs, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as raised:
        BrokerConfig(
            quorum(
                certs,
                tmp_path,
                **{
                    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,SSL:SSL,CONTROLLER:SSL",
                    "listener.name.controller.ssl.truststore.type": "PEM",
                    "listener.name.controller.ssl.truststore.location": "/nonexistent.pem",
                },
            )
        )
    assert raised.value.key == "listener.name.controller.ssl.truststore.location"
    assert "cannot read /nonexistent.pem" in str(raised.value)


def test_a_single_node_may_be_tls_only(certs: Certs, tmp_path: Path) -> None:
    config = BrokerConfig(
        {
            "log.dirs": str(tmp_path),
            "listeners": "SSL://127.0.0.1:0",
            "listener.security.protocol.map": "SSL:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server.keystore_pem),
        }
    )
    assert set(config.listener_tls) == {"SSL"}
