"""DescribeConfigs: each config of a topic or broker with its value, source and synonyms.

How this works and why: a config's value comes from the first layer that sets it, in
Kafka's order — a topic override, then the broker properties that provide the topic's
default (``log.retention.ms``, ``log.retention.minutes``, ``log.retention.hours`` for
``retention.ms``), each looked up set dynamically for this node, dynamically for the
whole cluster, in the static file/overrides, and finally as the built-in default.
The synonyms are exactly that list of layers (Kafka's ``include_synonyms``), and the
source reported is the first one's. Layers are read from the metadata image at call
time, so a handler sees one consistent state. A broker is described with every
property of Kafka's catalogue (``config_catalogue.py``), those odradek does not use
documented as having no effect; password-typed values are sensitive and shown as
null, as Kafka does.

ConfigSource and ConfigType numbers are the protocol's (DescribeConfigsResponse).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from odradek.metadata.controller import ControllerError
from odradek.metadata.image import BROKER_RESOURCE, MetadataImage
from odradek.metadata.topic_changes import validate_topic_name
from odradek.server import config as broker_config
from odradek.server import config_catalogue as catalogue
from odradek.server.config import BROKER_CONFIGS, BrokerConfig, BrokerConfigDef
from odradek.server.config_docs import BROKER_DOCS
from odradek.storage.errors import LogConfigError
from odradek.storage.log_config import CONFIGS_BY_NAME as TOPIC_CONFIGS_BY_NAME
from odradek.storage.log_config import INT_MAX, TOPIC_CONFIGS, ConfigDef, LogConfig

if TYPE_CHECKING:
    from odradek.server.services import ConfigContext

# ConfigResource types (DescribeConfigs / AlterConfigs resource_type).
TOPIC_TYPE: Final = 2
BROKER_TYPE: Final = 4

# ConfigSource.
TOPIC_CONFIG: Final = 1
DYNAMIC_BROKER_CONFIG: Final = 2
DYNAMIC_DEFAULT_BROKER_CONFIG: Final = 3
STATIC_BROKER_CONFIG: Final = 4
DEFAULT_CONFIG: Final = 5

# ConfigType (DescribeConfigs v3+).
BOOLEAN: Final = 1
STRING: Final = 2
INT: Final = 3
LONG: Final = 5
DOUBLE: Final = 6
SHORT: Final = 4
LIST: Final = 7
CLASS: Final = 8
PASSWORD: Final = 9
_KAFKA_TYPES: Final = {
    "boolean": BOOLEAN,
    "string": STRING,
    "int": INT,
    "short": SHORT,
    "long": LONG,
    "double": DOUBLE,
    "list": LIST,
    "class": CLASS,
    "password": PASSWORD,
}

LIST_TOPIC_CONFIGS: Final = frozenset(
    {
        "cleanup.policy",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
    }
)


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool
    config_type: int
    documentation: str
    synonyms: tuple[Synonym, ...]
    sensitive: bool = False


# -- types and documentation ---------------------------------------------------------
def _int_type(parse: object, name: str, error: type[Exception]) -> int:
    try:
        parse(name, str(INT_MAX + 1))  # type: ignore[operator]
    except error:
        return INT
    return LONG


def topic_config_type(definition: ConfigDef) -> int:
    if definition.name in LIST_TOPIC_CONFIGS:
        return LIST
    default = definition.default
    if isinstance(default, bool):
        return BOOLEAN
    if isinstance(default, float):
        return DOUBLE
    if isinstance(default, int):
        return _int_type(definition.parse, definition.name, LogConfigError)
    return STRING


_PARSER_TYPES: Final[dict[Callable[[str, str], Any], int]] = {
    broker_config._bool: BOOLEAN,
    broker_config._text: STRING,
    broker_config._list: LIST,
    broker_config._roles: LIST,
    broker_config._assignors: LIST,
    broker_config.parse_listeners: LIST,
    broker_config.parse_ip_overrides: STRING,
    broker_config.parse_quorum_voters: LIST,
    broker_config.parse_bootstrap_servers: LIST,
    broker_config.parse_protocol_map: STRING,  # Kafka's type for the map
    broker_config._listener_names: STRING,  # controller.listener.names, as Kafka types it
    broker_config._one_listener_name: STRING,
    broker_config.parse_metrics_listener: STRING,
    broker_config._authorizer_class: STRING,
    broker_config._super_users: STRING,  # Kafka's type: semicolon-separated principals
}


def broker_config_type(definition: BrokerConfigDef) -> int:
    if catalogue.is_inert(definition.name):
        return _KAFKA_TYPES.get(catalogue.kafka_type(definition.name) or "", STRING)
    topic = TOPIC_CONFIGS_BY_NAME.get(definition.topic_config or "")
    if topic is not None and topic_config_type(topic) == LIST:
        return LIST
    if catalogue.kafka_type(definition.name) == "password":  # implemented ones too
        return _KAFKA_TYPES["password"]
    kind = _PARSER_TYPES.get(definition.parse)
    if kind is not None:
        return kind
    if catalogue.kafka_type(definition.name) == "double":
        return DOUBLE
    return _int_type(definition.parse, definition.name, broker_config.ConfigError)


def broker_documentation(definition: BrokerConfigDef) -> str:
    topic = TOPIC_CONFIGS_BY_NAME.get(definition.topic_config or "")
    if topic is not None:
        return f"default of the topic config {topic.name}: {topic.doc}"
    if catalogue.is_inert(definition.name):
        return catalogue.NO_EFFECT_DOC
    return BROKER_DOCS.get(definition.name, "")


def is_list_config(broker_resource: bool, name: str) -> bool:
    if broker_resource:
        definition = catalogue.definition(name)
        return definition is not None and broker_config_type(definition) == LIST
    return name in LIST_TOPIC_CONFIGS


def render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- the layers of broker properties -------------------------------------------------
def broker_synonym_names(definition: BrokerConfigDef) -> list[str]:
    """Broker properties that set the same thing, highest precedence first."""
    if definition.topic_config is None:
        return [definition.name]
    return [d.name for d in BROKER_CONFIGS if d.topic_config == definition.topic_config]


# topic config -> the broker properties providing its default, in precedence order
TOPIC_SYNONYMS: Final = {
    topic.name: [d.name for d in BROKER_CONFIGS if d.topic_config == topic.name]
    for topic in TOPIC_CONFIGS
}


@dataclass(frozen=True, slots=True)
class BrokerLayers:
    static: BrokerConfig
    cluster: Mapping[str, str]  # dynamic, resource ("broker", "")
    node: Mapping[str, str]  # dynamic, resource ("broker", "<node id>")

    @classmethod
    def of(
        cls,
        context: ConfigContext,
        image: MetadataImage | None = None,
        node: str | None = None,
    ) -> BrokerLayers:
        """The layers of broker ``node`` (a broker id; default this node's), with this
        node's static properties (a controller checking a forwarded change has only
        its own)."""
        image = image or context.metadata.image
        node = str(context.metadata.node_id) if node is None else node
        return cls(
            context.config.static,
            image.configs.get((BROKER_RESOURCE, ""), {}),
            image.configs.get((BROKER_RESOURCE, node), {}),
        )

    def synonyms(self, names: list[str], per_node: bool = True) -> list[Synonym]:
        """Every layer that sets one of ``names``: by source precedence, then name order."""
        result: list[Synonym] = []
        layers = [
            (DYNAMIC_BROKER_CONFIG, self.node if per_node else {}),
            (DYNAMIC_DEFAULT_BROKER_CONFIG, self.cluster),
            (STATIC_BROKER_CONFIG, self.static.original),
        ]
        for source, values in layers:
            result.extend(Synonym(n, values[n], source) for n in names if n in values)
        for name in names:
            default = _default(name)
            if default not in (None, ""):
                result.append(Synonym(name, default, DEFAULT_CONFIG))
        return result

    def value(self, name: str) -> str | None:
        """The raw value of one broker property as this node sees it."""
        for values in (self.node, self.cluster, self.static.original):
            if name in values:
                return values[name]
        default = _default(name)
        return None if default in (None, "") else default


def _default(name: str) -> str | None:
    definition = catalogue.definition(name)
    return definition.default if definition is not None else None


# -- describing resources ------------------------------------------------------------
def describe_topic(
    layers: BrokerLayers,
    overrides: Mapping[str, str],
    effective: LogConfig,
    keys: Collection[str] | None,
) -> list[ConfigEntry]:
    values = effective.to_properties()
    entries = []
    for definition in TOPIC_CONFIGS:
        name = definition.name
        if keys is not None and name not in keys:
            continue
        synonyms = [Synonym(name, overrides[name], TOPIC_CONFIG)] if name in overrides else []
        synonyms += layers.synonyms(TOPIC_SYNONYMS[name])
        entries.append(
            ConfigEntry(
                name=name,
                value=render(values[name]),
                source=synonyms[0].source if synonyms else DEFAULT_CONFIG,
                read_only=False,
                config_type=topic_config_type(definition),
                documentation=definition.doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def describe_broker(layers: BrokerLayers, keys: Collection[str] | None) -> list[ConfigEntry]:
    """Every broker property of this node (resource name = its node id): odradek's, the
    rest of Kafka's catalogue, and any listener-prefixed ones that are set."""
    names = {*layers.node, *layers.cluster, *layers.static.original}
    entries = []
    for definition in (*catalogue.ALL_BROKER_CONFIGS, *catalogue.listener_definitions(names)):
        if keys is not None and definition.name not in keys:
            continue
        synonyms = layers.synonyms(broker_synonym_names(definition))
        entries.append(_broker_entry(definition, layers.value(definition.name), synonyms))
    return entries


def describe_cluster_defaults(
    layers: BrokerLayers, keys: Collection[str] | None
) -> list[ConfigEntry]:
    """Resource name "": only the properties set dynamically for the whole cluster."""
    entries = []
    for name, value in sorted(layers.cluster.items()):
        definition = catalogue.definition(name)
        if definition is None or (keys is not None and name not in keys):
            continue
        synonyms = layers.synonyms(broker_synonym_names(definition), per_node=False)
        entries.append(_broker_entry(definition, value, synonyms))
    return entries


def _broker_entry(
    definition: BrokerConfigDef, value: str | None, synonyms: list[Synonym]
) -> ConfigEntry:
    sensitive = catalogue.is_sensitive(definition.name)
    if sensitive:  # Kafka never returns a password's value
        value = None
        synonyms = [Synonym(s.name, None, s.source) for s in synonyms]
    return ConfigEntry(
        name=definition.name,
        value=value,
        source=synonyms[0].source if synonyms else DEFAULT_CONFIG,
        read_only=not definition.dynamic,
        config_type=broker_config_type(definition),
        documentation=broker_documentation(definition),
        synonyms=tuple(synonyms),
        sensitive=sensitive,
    )


def check_broker_name(name: str, node_id: int | None) -> None:
    """A BROKER resource is "" (cluster-wide defaults) or this node's id (any broker's
    id when ``node_id`` is None: a change forwarded to the controller)."""
    if name == "":
        return
    try:
        requested: int | None = int(name)
    except ValueError:
        requested = None
    if requested is None or requested < 0 or (node_id is not None and requested != node_id):
        raise ControllerError(
            "INVALID_REQUEST",
            f'unexpected broker id {name!r}: expected {node_id} or "" (cluster default)',
        )


def describe(
    context: ConfigContext, resource_type: int, resource_name: str, keys: Collection[str] | None
) -> list[ConfigEntry]:
    """The configs of one resource; ControllerError carries the Kafka error for it."""
    image = context.metadata.image
    layers = BrokerLayers.of(context, image)
    if resource_type == TOPIC_TYPE:
        validate_topic_name(resource_name)
        if resource_name not in image.topics:
            raise ControllerError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"topic {resource_name!r} does not exist"
            )
        overrides = image.topic_configs(resource_name)
        effective = LogConfig.from_properties(dict(overrides), context.config.topic_defaults())
        return describe_topic(layers, overrides, effective, keys)
    if resource_type == BROKER_TYPE:
        check_broker_name(resource_name, context.metadata.node_id)
        if resource_name == "":
            return describe_cluster_defaults(layers, keys)
        return describe_broker(layers, keys)
    from odradek.server import config_groups  # it builds on this module

    if resource_type == config_groups.GROUP_TYPE:
        return config_groups.describe_group(context, resource_name, keys)
    raise ControllerError("INVALID_REQUEST", f"unsupported resource type {resource_type}")
