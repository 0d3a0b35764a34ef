"""KRaft configuration: typed quorum voters and bootstrap servers, roles, listeners and
their protocols, metadata.log.dir, with Kafka's cross-checks as one-line errors.

The zero-config node (no quorum configured) is a combined broker,controller whose
quorum is in-process, so it needs no controller listener; once a quorum is configured
Kafka's rules apply.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.server.config import (
    BrokerConfig,
    ConfigError,
    HostPort,
    Listener,
    QuorumVoter,
    parse_quorum_voters,
)
from odradek.server.config_catalogue import definition
from odradek.server.config_describe import LIST, STRING, broker_config_type

REPO = Path(__file__).resolve().parents[2]

# Kafka's config/kraft/server.properties (the settings that matter here), as shipped.
KAFKA_KRAFT = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@localhost:9093",
    "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
    "inter.broker.listener.name": "PLAINTEXT",
    "advertised.listeners": "PLAINTEXT://localhost:9092",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": (
        "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "SASL_SSL:SASL_SSL"
    ),
    "log.dirs": "/tmp/kraft-combined-logs",
}


def kraft(**changes: str | None) -> dict[str, str]:
    """Kafka's KRaft example with ``changes`` (key with dots as __; None removes it)."""
    properties = dict(KAFKA_KRAFT)
    for key, value in changes.items():
        name = key.replace("__", ".")
        if value is None:
            properties.pop(name, None)
        else:
            properties[name] = value
    return properties


def error_of(properties: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        BrokerConfig(properties)
    assert "\n" not in str(raised.value)
    return raised.value


# -- Kafka's example and the defaults ---------------------------------------------------
def test_kafkas_kraft_server_properties_loads() -> None:
    config = BrokerConfig(KAFKA_KRAFT)
    assert config.roles == frozenset({"broker", "controller"})
    assert config.quorum_voters == (QuorumVoter(1, "localhost", 9093),)
    assert config.quorum_configured
    assert config.controller_listeners == (Listener("CONTROLLER", "", 9093),)
    assert config.broker_listeners == (Listener("PLAINTEXT", "", 9092),)
    assert config.listeners == config.broker_listeners  # what serve binds
    assert config.inter_broker_listener == Listener("PLAINTEXT", "", 9092)
    assert config.protocol_map["CONTROLLER"] == "PLAINTEXT"
    assert config.metadata_log_dir == Path("/tmp/kraft-combined-logs")
    assert config.identity_dirs == [Path("/tmp/kraft-combined-logs")]


def test_zero_config_node_is_combined_with_an_in_process_quorum() -> None:
    config = BrokerConfig()
    assert config.roles == frozenset({"broker", "controller"})
    assert not config.quorum_configured
    assert config.quorum_voters == () and config.quorum_bootstrap_servers == ()
    assert config.controller_listeners == ()  # CONTROLLER is named, not listened on
    assert config.inter_broker_listener == config.listeners[0]
    assert config.metadata_log_dir == config.log_dirs[0]
    # Kafka's default map plus the controller listener as PLAINTEXT.
    assert config.protocol_map == {
        "PLAINTEXT": "PLAINTEXT",
        "SSL": "SSL",
        "SASL_PLAINTEXT": "SASL_PLAINTEXT",
        "SASL_SSL": "SASL_SSL",
        "CONTROLLER": "PLAINTEXT",
    }


def test_kraft_timings_have_kafkas_defaults() -> None:
    config = BrokerConfig()
    assert {
        name: config[name]
        for name in (
            "controller.quorum.election.timeout.ms",
            "controller.quorum.fetch.timeout.ms",
            "controller.quorum.election.backoff.max.ms",
            "controller.quorum.request.timeout.ms",
            "controller.quorum.retry.backoff.ms",
            "metadata.log.max.record.bytes.between.snapshots",
            "metadata.log.max.snapshot.interval.ms",
            "broker.session.timeout.ms",
            "broker.heartbeat.interval.ms",
            "broker.rack",
        )
    } == {
        "controller.quorum.election.timeout.ms": 1000,
        "controller.quorum.fetch.timeout.ms": 2000,
        "controller.quorum.election.backoff.max.ms": 1000,
        "controller.quorum.request.timeout.ms": 2000,
        "controller.quorum.retry.backoff.ms": 20,
        "metadata.log.max.record.bytes.between.snapshots": 20971520,
        "metadata.log.max.snapshot.interval.ms": 3600000,
        "broker.session.timeout.ms": 9000,
        "broker.heartbeat.interval.ms": 2000,
        "broker.rack": None,
    }
    assert BrokerConfig({"broker.rack": "rack-a"})["broker.rack"] == "rack-a"
    assert "broker.session.timeout.ms" in error_of({"broker.session.timeout.ms": "soon"}).key


def test_describe_types_of_the_kraft_properties() -> None:
    def kind(name: str) -> int:
        found = definition(name)
        assert found is not None
        return broker_config_type(found)

    assert kind("controller.quorum.voters") == LIST
    assert kind("controller.quorum.bootstrap.servers") == LIST
    assert kind("listener.security.protocol.map") == STRING
    assert kind("controller.listener.names") == STRING
    assert kind("metadata.log.dir") == STRING


@pytest.mark.parametrize("name", ["node1", "node2", "node3"])
def test_example_cluster_files_load(name: str) -> None:
    config = BrokerConfig.load(REPO / "config" / "cluster" / f"{name}.properties")
    node = int(name[-1])
    assert config.node_id == node
    assert [v.node_id for v in config.quorum_voters] == [1, 2, 3]
    assert config.broker_listeners[0].port == 9091 + node
    assert config.controller_listeners[0].port == 19092 + node
    assert config.quorum_voters[node - 1].port == config.controller_listeners[0].port


# -- the voters and bootstrap servers ---------------------------------------------------
def test_voters_parse_hosts_and_ipv6() -> None:
    voters = parse_quorum_voters(
        "controller.quorum.voters", " 1@localhost:9093, 2@[::1]:9094,3@10.0.0.3:9095 "
    )
    assert voters == (
        QuorumVoter(1, "localhost", 9093),
        QuorumVoter(2, "::1", 9094),
        QuorumVoter(3, "10.0.0.3", 9095),
    )
    config = BrokerConfig(kraft(controller__quorum__bootstrap__servers="localhost:9093,[::1]:9094"))
    assert config.quorum_bootstrap_servers == (HostPort("localhost", 9093), HostPort("::1", 9094))


@pytest.mark.parametrize(
    ("raw", "item"),
    [
        ("localhost:9093", "localhost:9093"),
        ("x@localhost:9093", "x@localhost:9093"),
        ("-1@localhost:9093", "-1@localhost:9093"),
        ("1@localhost", "1@localhost"),
        ("1@:9093", "1@:9093"),
        ("1@localhost:0", "1@localhost:0"),
        ("1@localhost:65536", "1@localhost:65536"),
        ("1@localhost:http", "1@localhost:http"),
        ("1@::1:9093", "1@::1:9093"),  # IPv6 needs brackets
        ("1@a:1,1@b:2", "1@b:2"),  # the same id twice
        ("1@a:1,2@a:1", "2@a:1"),  # the same address twice
    ],
)
def test_bad_voters_name_the_key_and_the_item(raw: str, item: str) -> None:
    error = error_of(kraft(controller__quorum__voters=raw))
    assert error.key == "controller.quorum.voters"
    assert str(error).startswith("invalid value for controller.quorum.voters: ")
    assert repr(item) in str(error)


@pytest.mark.parametrize("raw", ["localhost", "host:0", "[::1]", "a:1,a:1", "1@a:1"])
def test_bad_bootstrap_servers(raw: str) -> None:
    error = error_of(kraft(controller__quorum__bootstrap__servers=raw))
    assert error.key == "controller.quorum.bootstrap.servers"


_HOSTS = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
)


@given(
    st.lists(
        st.tuples(st.integers(0, 2**31 - 1), _HOSTS, st.integers(1, 65535)),
        min_size=1,
        max_size=5,
        unique_by=(lambda v: v[0], lambda v: (v[1], v[2])),
    )
)
def test_voters_round_trip(voters: list[tuple[int, str, int]]) -> None:
    raw = ",".join(f"{node}@{host}:{port}" for node, host, port in voters)
    parsed = parse_quorum_voters("controller.quorum.voters", raw)
    assert parsed == tuple(QuorumVoter(n, h.strip("[]"), p) for n, h, p in voters)


# -- roles and listeners ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "key", "needle"),
    [
        ({"process__roles": "leader"}, "process.roles", "must be broker, controller"),
        ({"process__roles": "broker,broker"}, "process.roles", "names a role twice"),
        ({"process__roles": ""}, "process.roles", "must not be empty"),
        # Without a quorum only the combined node can run.
        (
            {"process__roles": "broker", "controller__quorum__voters": None},
            "process.roles",
            "needs controller.quorum.voters",
        ),
        ({"node__id": "2"}, "controller.quorum.voters", "not one of the voters [1]"),
        # A static quorum: the bootstrap servers alone do not name the voters.
        (
            {
                "process__roles": "broker",
                "controller__quorum__voters": None,
                "controller__quorum__bootstrap__servers": "localhost:9093",
                "listeners": "PLAINTEXT://:9092",
            },
            "controller.quorum.voters",
            "must name the voters",
        ),
        ({"controller__listener__names": ""}, "controller.listener.names", "at least one"),
        (
            {"controller__listener__names": "CONTROLLER,CTRL2"},
            "controller.listener.names",
            "CTRL2 is not in listeners",
        ),
        (
            {"listeners": "PLAINTEXT://:9092"},
            "controller.listener.names",
            "CONTROLLER is not in listeners",
        ),
        # A broker-only node does not listen as a controller, nor is it a voter.
        (
            {"process__roles": "broker", "controller__quorum__voters": "2@localhost:9093"},
            "listeners",
            "CONTROLLER is a controller listener",
        ),
        (
            {"process__roles": "broker", "listeners": "PLAINTEXT://:9092"},
            "controller.quorum.voters",
            "node.id=1 is a voter",
        ),
        # A controller-only node listens only as a controller.
        (
            {"process__roles": "controller", "advertised__listeners": None},
            "listeners",
            "controller-only node",
        ),
        (
            {"inter__broker__listener__name": "INTERNAL"},
            "inter.broker.listener.name",
            "INTERNAL is not in listeners",
        ),
        (
            {"inter__broker__listener__name": "CONTROLLER"},
            "inter.broker.listener.name",
            "CONTROLLER is a controller listener",
        ),
        (
            {"listeners": "CONTROLLER://:9093", "advertised__listeners": None},
            "listeners",
            "needs a listener that is not a controller listener",
        ),
        (
            {"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9094,CONTROLLER://:9093"},
            "listeners",
            "PLAINTEXT is used twice",
        ),
        (
            {"advertised__listeners": "OTHER://localhost:9092"},
            "advertised.listeners",
            "OTHER is not in listeners",
        ),
        (
            {"advertised__listeners": "CONTROLLER://localhost:9093"},
            "advertised.listeners",
            "is a controller listener",
        ),
        ({"metadata__log__dir": "/elsewhere"}, "metadata.log.dir", "not one of log.dirs"),
    ],
)
def test_kraft_cross_checks_are_one_line_naming_the_key(
    changes: dict[str, str | None], key: str, needle: str
) -> None:
    error = error_of(kraft(**changes))
    assert error.key == key
    assert str(error).startswith(f"invalid value for {key}: ")
    assert needle in str(error)


def test_broker_only_and_controller_only_nodes_load() -> None:
    broker = BrokerConfig(
        kraft(
            process__roles="broker",
            node__id="4",
            listeners="PLAINTEXT://:9092",
        )
    )
    assert broker.roles == frozenset({"broker"})
    assert broker.controller_listeners == ()
    assert broker.controller_listener_names == ("CONTROLLER",)  # how it reaches the quorum
    controller = BrokerConfig(
        kraft(
            process__roles="controller", listeners="CONTROLLER://:9093", advertised__listeners=None
        )
    )
    assert controller.roles == frozenset({"controller"})
    assert controller.inter_broker_listener is None
    assert controller.broker_listeners == ()


def test_bootstrap_servers_alone_are_refused() -> None:
    """They configure a quorum (no zero-config start), but a static one needs its voters:
    without them a controller would elect itself alone (KIP-853 is not implemented)."""
    error = error_of(
        kraft(controller__quorum__voters=None, controller__quorum__bootstrap__servers="h:9093")
    )
    assert error.key == "controller.quorum.voters" and "KIP-853" in str(error)


def test_metadata_log_dir_is_one_of_the_log_dirs() -> None:
    config = BrokerConfig(kraft(log__dirs="/data/a,/data/b", metadata__log__dir="/data/b/../b"))
    assert config.metadata_log_dir == Path("/data/b/../b")
    assert config.identity_dirs == [Path("/data/a"), Path("/data/b")]


# -- listener.security.protocol.map ----------------------------------------------------
def test_protocol_map_parses_into_a_dict() -> None:
    config = BrokerConfig(
        kraft(
            listener__security__protocol__map="controller:plaintext,PLAINTEXT:PLAINTEXT",
        )
    )
    assert config.protocol_map == {"CONTROLLER": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}


@pytest.mark.parametrize(
    ("changes", "key", "needle"),
    [
        (
            {"listener__security__protocol__map": "PLAINTEXT:PLAINTEXT"},
            "listener.security.protocol.map",
            "no security protocol for listener CONTROLLER",
        ),
        (
            {"listener__security__protocol__map": "CONTROLLER:PLAINTEXT,PLAINTEXT:TLS"},
            "listener.security.protocol.map",
            "unknown security protocol 'TLS'",
        ),
        (
            {"listener__security__protocol__map": "CONTROLLER:PLAINTEXT,PLAINTEXT"},
            "listener.security.protocol.map",
            "'PLAINTEXT' is not LISTENER_NAME:SECURITY_PROTOCOL",
        ),
        (
            {
                "listener__security__protocol__map": (
                    "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,CONTROLLER:SSL"
                )
            },
            "listener.security.protocol.map",
            "mapped twice",
        ),
        (
            {
                "listeners": "INTERNAL://:9092,CONTROLLER://:9093",
                "advertised__listeners": None,
                "inter__broker__listener__name": None,
            },
            "listener.security.protocol.map",
            "no security protocol for listener INTERNAL",
        ),
        # An SSL listener starts only with a keystore (network/tls.py).
        (
            {
                "listeners": "PLAINTEXT://:9092,SSL://:9094,CONTROLLER://:9093",
                "advertised__listeners": None,
            },
            "ssl.keystore.location",
            "listener SSL: a TLS listener needs a keystore",
        ),
        # A SASL listener with Kafka's default mechanism (GSSAPI, not implemented).
        (
            {
                "listener__security__protocol__map": (
                    "CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT"
                )
            },
            "sasl.enabled.mechanisms",
            "GSSAPI (Kerberos) is not implemented",
        ),
    ],
)
def test_protocol_map_errors(changes: dict[str, str | None], key: str, needle: str) -> None:
    error = error_of(kraft(**changes))
    assert error.key == key
    assert needle in str(error)


def test_tls_listener_is_checked_without_a_quorum_too() -> None:
    error = error_of({"listeners": "SSL://127.0.0.1:9093"})
    assert error.key == "ssl.keystore.location" and "needs a keystore" in str(error)


# -- replica.selector.class (KIP-392) -----------------------------------------------------
def test_replica_selector_class_names_kafka_s_selectors() -> None:
    rack_aware = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    assert BrokerConfig(kraft())["replica.selector.class"] is None  # Kafka's default: leader
    assert (
        BrokerConfig(kraft(replica__selector__class=rack_aware))["replica.selector.class"]
        == rack_aware
    )
    short = BrokerConfig(kraft(replica__selector__class="RackAwareReplicaSelector"))
    assert short["replica.selector.class"] == rack_aware
    error = error_of(kraft(replica__selector__class="com.example.Nearest"))
    assert error.key == "replica.selector.class" and "RackAwareReplicaSelector" in str(error)


def test_sample_config_files_use_only_known_keys() -> None:
    """config/server.properties and every cluster sample load with no unknown or inert key
    (a typo there would teach users a setting that does nothing)."""
    files = [
        REPO / "config" / "server.properties",
        *sorted((REPO / "config").rglob("*/*.properties")),
    ]
    assert len(files) >= 9
    for path in files:
        config = BrokerConfig.load(path)
        assert not config.unknown and not config.inert, (path.name, config.unknown, config.inert)
    single = BrokerConfig.load(REPO / "config" / "server.properties")
    assert single.broker_listeners[0].port == 9092 and single.quorum_voters == ()
