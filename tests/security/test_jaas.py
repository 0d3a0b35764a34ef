"""Kafka's JAAS syntax (security/jaas.py) and the broker's per-listener SASL settings."""

from __future__ import annotations

import pytest

from odradek.client._core.sasl import SaslCredentials
from odradek.security.jaas import JaasError, parse_broker_jaas, parse_jaas
from odradek.server.config import BrokerConfig, ConfigError
from odradek.server.sasl_settings import listener_sasl

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)


def test_plain_login_module_with_users() -> None:
    entry = parse_broker_jaas(PLAIN_JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.control_flag == "required"
    assert entry.options["username"] == "admin"
    assert entry.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}


def test_quotes_escapes_bare_values_and_comments() -> None:
    text = (
        "/* a comment */ com.example.Module optional // to the end of the line\n"
        ' a="x \\"quoted\\" ;= y" b=bare user_eve="p\\\\w";'
    )
    entry = parse_broker_jaas(text)
    assert entry.control_flag == "optional"
    assert entry.options == {"a": 'x "quoted" ;= y', "b": "bare", "user_eve": "p\\w"}


def test_several_entries_parse_but_a_broker_takes_one() -> None:
    text = "A required; B sufficient k=v;"
    assert [e.login_module for e in parse_jaas(text)] == ["A", "B"]
    with pytest.raises(JaasError, match="one login module entry"):
        parse_broker_jaas(text)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "no login module entry"),
        ('Module required username="a"', "must end with ';'"),
        ("Module always;", "control flag"),
        ("Module required username;", "no '=' value"),
        ('Module required password="unterminated;', "unterminated quoted value"),
        ('Module required a="1" a="2";', "given twice"),
        ("Module required a=;", "has no value"),
        ('"Module" required;', "login module class name"),
    ],
)
def test_bad_jaas_is_one_line_without_secrets(text: str, needle: str) -> None:
    with pytest.raises(JaasError) as caught:
        parse_broker_jaas(text)
    message = str(caught.value)
    assert needle in message and "\n" not in message
    assert "unterminated;" not in message  # a value (a password) is never echoed


def _config(**properties: str) -> BrokerConfig:
    base = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,OTHER:SASL_PLAINTEXT",
    }
    return BrokerConfig({**base, **properties})


def test_listener_and_mechanism_prefixed_settings_win() -> None:
    config = _config(
        **{
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "GSSAPI,PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "connections.max.reauth.ms": "60000",
            "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": "1500",
            "connection.failed.authentication.delay.ms": "250",
        }
    )
    sasl = listener_sasl(config, "SASL_PLAINTEXT")
    assert sasl.mechanisms == ("PLAIN", "SCRAM-SHA-256")  # GSSAPI dropped with a warning
    assert sasl.plain_users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert sasl.reauth_ms == {"PLAIN": 60000, "SCRAM-SHA-256": 1500}
    assert sasl.failed_delay_ms == 250
    other = listener_sasl(config, "OTHER")
    assert other.mechanisms == ("SCRAM-SHA-512",)
    assert other.reauth_ms == {"SCRAM-SHA-512": 60000}
    # An implemented per-listener property is not reported as "no effect".
    assert not [k for k in config.inert if "sasl" in k or "reauth" in k]


def test_unprefixed_jaas_config_is_accepted() -> None:
    config = _config(**{"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": PLAIN_JAAS})
    assert listener_sasl(config, "OTHER").plain_users["alice"] == "alice-secret"


@pytest.mark.parametrize(
    ("properties", "key", "needle"),
    [
        ({}, "sasl.enabled.mechanisms", "GSSAPI (Kerberos) is not implemented"),
        ({"sasl.enabled.mechanisms": "FOO"}, "sasl.enabled.mechanisms", "unknown SASL mechanism"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "sasl.jaas.config", "has no JAAS config"),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "X required"},
            "sasl.jaas.config",
            "must end with ';'",
        ),
        (
            {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "X required;"},
            "sasl.jaas.config",
            "PLAIN needs org.apache.kafka.common.security.plain.PlainLoginModule",
        ),
    ],
)
def test_bad_sasl_setup_fails_at_startup(properties: dict[str, str], key: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(**properties)
    assert caught.value.key == key
    assert needle in str(caught.value)


_SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="broker-secret";'
)
_CLUSTER = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "listeners": "SASL_PLAINTEXT://:9092,CONTROLLER://:9093",
    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
    "sasl.mechanism.controller.protocol": "SCRAM-SHA-256",
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": _SCRAM_JAAS,
    "listener.name.controller.scram-sha-256.sasl.jaas.config": _SCRAM_JAAS.replace(
        "broker-secret", "controller-secret"
    ),
}


def test_nodes_log_in_to_their_sasl_listeners_with_the_jaas_credentials() -> None:
    config = BrokerConfig(_CLUSTER)
    assert config.inter_broker_sasl == SaslCredentials("SCRAM-SHA-256", "broker", "broker-secret")
    assert config.controller_sasl == SaslCredentials("SCRAM-SHA-256", "broker", "controller-secret")
    # PLAIN: the username/password beside the user_ options of the same entry.
    plain = BrokerConfig(
        {
            **_CLUSTER,
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'username="admin" password="admin-secret" user_admin="admin-secret";'
            ),
        }
    )
    assert plain.inter_broker_sasl == SaslCredentials("PLAIN", "admin", "admin-secret")
    # A node on PLAINTEXT/SSL listeners has none.
    assert (
        BrokerConfig(
            {
                **_CLUSTER,
                "listener.security.protocol.map": ("SASL_PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"),
            }
        ).controller_sasl
        is None
    )


@pytest.mark.parametrize(
    ("change", "key", "needle"),
    [
        (  # Kafka's default is GSSAPI
            {"sasl.mechanism.inter.broker.protocol": None},
            "sasl.mechanism.inter.broker.protocol",
            "log in with GSSAPI (Kerberos), which they cannot",
        ),
        (
            {"sasl.mechanism.controller.protocol": "OAUTHBEARER"},
            "sasl.mechanism.controller.protocol",
            "log in with 'OAUTHBEARER', which they cannot",
        ),
        (
            {"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
            "sasl.mechanism.inter.broker.protocol",
            "SCRAM-SHA-512 is not enabled on listener SASL_PLAINTEXT",
        ),
        (
            {"listener.name.controller.scram-sha-256.sasl.jaas.config": None},
            "sasl.jaas.config",
            "listener.name.controller.scram-sha-256.sasl.jaas.config is not set",
        ),
        (
            {
                "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    'username="broker";'
                )
            },
            "sasl.jaas.config",
            "has no password option",
        ),
        (
            {
                "listener.name.controller.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="broker" password="x";'
                )
            },
            "sasl.jaas.config",
            "SCRAM-SHA-256 needs org.apache.kafka.common.security.scram.ScramLoginModule",
        ),
    ],
)
def test_bad_node_credentials_fail_at_startup(
    change: dict[str, str | None], key: str, needle: str
) -> None:
    properties = dict(_CLUSTER)
    for name, value in change.items():
        if value is None:
            properties.pop(name)
        else:
            properties[name] = value
    with pytest.raises(ConfigError) as caught:
        BrokerConfig(properties)
    assert caught.value.key == key
    assert needle in str(caught.value)
    assert "secret" not in str(caught.value)  # never a password
