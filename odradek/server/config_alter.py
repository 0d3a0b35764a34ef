"""AlterConfigs and IncrementalAlterConfigs: turning a request into a checked config change.

How this works and why: the controller owns the commit (``Controller.alter_configs``,
reached through the ControllerChannel with plain ``ConfigOp``s), reading a resource's
current dynamic configs under its lock. This module supplies what only the broker knows,
to the channel as ``BrokerConfigRules`` and to the handler as checks: which resource a
request names (a topic, this node, the cluster-wide broker defaults "", or a group:
``config_groups.py``), how SET/DELETE/APPEND/SUBTRACT combine with the current configs
(``incremental_changes``, called by the controller with the current set), and whether a
set of broker properties may be applied at runtime (``broker_validator``: any Kafka
broker property — odradek's ``BROKER_CONFIGS`` or the rest of Kafka's catalogue,
``config_catalogue.py`` — that is dynamic, each parsed by its own parser, and the merged
result must still make valid topic defaults). As in Kafka, per-broker properties cannot
be set as the cluster-wide default, and the reconfigurable SSL stores only with a
listener prefix.

Error codes follow Kafka: a bad topic or group config is INVALID_CONFIG; a bad or
non-dynamic broker property is INVALID_REQUEST ("Cannot update these configs
dynamically"), as Kafka answers broker config validation failures (KAFKA-13609).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Final

from odradek.metadata.controller import ControllerError
from odradek.metadata.controller_channel import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    Changes,
    ConfigOp,
    Validator,
)
from odradek.metadata.image import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from odradek.metadata.topic_changes import validate_topic_name
from odradek.server import config_catalogue as catalogue
from odradek.server import config_groups
from odradek.server.broker_remote import SYSTEM_ENABLE, check_remote_storage
from odradek.server.config import BrokerConfig, ConfigError
from odradek.server.config_describe import (
    BROKER_TYPE,
    TOPIC_TYPE,
    BrokerLayers,
    check_broker_name,
    is_list_config,
    render,
)
from odradek.storage.log_config import CONFIGS_BY_NAME as TOPIC_CONFIGS_BY_NAME

if TYPE_CHECKING:
    from odradek.metadata.view import MetadataView
    from odradek.server.services import ConfigContext, ConfigView

_OP_NAMES: Final = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


class BrokerConfigRules:
    """The ``ConfigRules`` the controller channel applies config ops with (see
    metadata/controller_channel.py): this module's combination and validators."""

    def __init__(self, metadata: MetadataView, config: ConfigView) -> None:
        self.metadata = metadata
        self.config = config

    def changes(
        self, resource_type: str, resource_name: str, ops: Sequence[ConfigOp]
    ) -> Callable[[Mapping[str, str]], Changes]:
        return incremental_changes(self, resource_type, resource_name, ops)

    def validator(self, resource_type: str, resource_name: str) -> Validator | None:
        if resource_type == BROKER_RESOURCE:
            return broker_validator(self, resource_name)
        if resource_type == GROUP_RESOURCE:
            return config_groups.validator(self)
        if resource_type == TOPIC_RESOURCE:  # tiered storage needs the brokers' flag
            current = dict(self.metadata.image.topic_configs(resource_name))
            return partial(check_remote_storage, self._remote_storage_enabled, current=current)
        return None

    def _remote_storage_enabled(self) -> bool:
        return bool(self.config.static[SYSTEM_ENABLE])


def resolve(
    context: ConfigContext, resource_type: int, name: str, *, any_broker: bool = False
) -> str:
    """The metadata resource type of a request resource, once its name is checked. A
    BROKER resource names this node or "" — or, ``any_broker``, any broker id (the
    controller, serving a change a broker forwarded)."""
    if resource_type == TOPIC_TYPE:
        validate_topic_name(name)
        return TOPIC_RESOURCE
    if resource_type == BROKER_TYPE:
        check_broker_name(name, None if any_broker else context.metadata.node_id)
        return BROKER_RESOURCE
    if resource_type == config_groups.GROUP_TYPE:
        config_groups.check_group_name(name)
        return GROUP_RESOURCE
    raise ControllerError("INVALID_REQUEST", f"unsupported resource type {resource_type}")


def broker_validator(context: ConfigContext, resource_name: str) -> Validator:
    def validate(merged: Mapping[str, str]) -> None:
        definitions = {k: catalogue.definition(k) for k in merged}
        unknown = sorted(k for k, d in definitions.items() if d is None)
        if unknown:
            raise ControllerError("INVALID_REQUEST", f"unknown broker configs: {unknown}")
        known = {k: d for k, d in definitions.items() if d is not None}
        static = sorted(k for k, d in known.items() if not d.dynamic)
        if static:
            raise ControllerError(
                "INVALID_REQUEST", f"Cannot update these configs dynamically: {static}"
            )
        listener_only = sorted(k for k in merged if k in catalogue.LISTENER_ONLY)
        if listener_only:
            raise ControllerError(
                "INVALID_REQUEST",
                "These security configs can be dynamically updated only per-listener "
                f"using the listener prefix: {listener_only}",
            )
        per_broker = sorted(k for k in merged if catalogue.update_mode(k) == catalogue.PER_BROKER)
        if resource_name == "" and per_broker:
            raise ControllerError(
                "INVALID_REQUEST",
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {per_broker}",
            )
        layers = BrokerLayers.of(context, node=resource_name or None)
        cluster = merged if resource_name == "" else layers.cluster
        node = merged if resource_name != "" else layers.node
        properties = {**layers.static.original, **cluster, **node}
        try:
            for key, value in merged.items():
                known[key].parse(key, value)
            BrokerConfig(properties)
        except ConfigError as error:
            raise ControllerError("INVALID_REQUEST", str(error)) from None

    return validate


def check_unique(names: Sequence[str]) -> None:
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ControllerError("INVALID_REQUEST", f"duplicate config keys: {duplicated}")


def replacement(configs: Sequence[tuple[str, str | None]]) -> list[ConfigOp]:
    """Legacy AlterConfigs: the new complete set of the resource's dynamic configs."""
    check_unique([name for name, _ in configs])
    missing = [name for name, value in configs if value is None]
    if missing:
        raise ControllerError("INVALID_REQUEST", f"null value not supported for: {missing}")
    return [ConfigOp(name, SET, value) for name, value in configs]


def incremental_changes(
    context: ConfigContext,
    resource_type: str,
    resource_name: str,
    ops: Sequence[ConfigOp],
) -> Callable[[Mapping[str, str]], Changes]:
    """Check the ops now; combine them with the current configs when the controller asks."""
    check_unique([o.name for o in ops])
    is_broker = resource_type == BROKER_RESOURCE
    for name, op, value in ((o.name, o.op, o.value) for o in ops):
        if op not in _OP_NAMES:
            raise ControllerError("INVALID_REQUEST", f"{name}: unknown config operation {op}")
        if resource_type == GROUP_RESOURCE:
            config_groups.check_name(name)
        elif not is_broker and name not in TOPIC_CONFIGS_BY_NAME:
            raise ControllerError("INVALID_CONFIG", f"{name}: unknown topic config")
        if op in (APPEND, SUBTRACT) and not is_list_config(is_broker, name):
            raise ControllerError(
                "INVALID_CONFIG", f"Can't {_OP_NAMES[op]} to key {name} because it is not a list"
            )
        if op != DELETE and value is None:
            raise ControllerError("INVALID_REQUEST", f"{name}: null value for {_OP_NAMES[op]}")

    def combine(current: Mapping[str, str]) -> Changes:
        changes: Changes = {}
        for name, op, value in ((o.name, o.op, o.value) for o in ops):
            if op == SET:
                changes[name] = value
            elif op == DELETE:
                changes[name] = None
            else:
                base = current.get(name)
                if base is None:
                    base = _effective_value(context, resource_type, resource_name, name)
                items = _split(base)
                given = _split(value)
                if op == APPEND:
                    items += [item for item in given if item not in items]
                else:
                    items = [item for item in items if item not in given]
                changes[name] = ",".join(items)
        return changes

    return combine


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _effective_value(
    context: ConfigContext, resource_type: str, resource_name: str, name: str
) -> str:
    """The value a list config has now when the resource does not set it itself."""
    if resource_type == TOPIC_RESOURCE:
        return render(context.config.effective_topic_config(resource_name)[name])
    layers = BrokerLayers.of(context, node=resource_name or None)
    if resource_name == "":
        value = layers.cluster.get(name, layers.static.original.get(name))
        definition = catalogue.definition(name)
        default = definition.default if definition is not None else None
        return value if value is not None else (default or "")
    return layers.value(name) or ""
