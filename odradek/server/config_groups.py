"""Group configs (KIP-848): DescribeConfigs / (Incremental)AlterConfigs on resource type 32.

How this works and why: Kafka 3.8+ lets an admin override, per group, what the broker
otherwise decides for every group: ``consumer.session.timeout.ms`` and
``consumer.heartbeat.interval.ms`` (and the share- and streams-group equivalents).
They are stored like topic configs — config records of resource ``("group", id)`` in
the metadata log, so they survive restarts and need no group to exist yet — and each
one's default is a broker property (``consumer.session.timeout.ms`` ←
``group.consumer.session.timeout.ms``), which DescribeConfigs reports as its synonym,
with the group's own value first (source GROUP_CONFIG). A value must lie within the
broker's bounds (``group.consumer.min.session.timeout.ms`` ..
``group.consumer.max.session.timeout.ms``, the heartbeat ones likewise) and a session
timeout must exceed the heartbeat interval, as Kafka checks (INVALID_CONFIG
otherwise). The KIP-848 coordinator reads a consumer group's session timeout and
heartbeat interval from the image on every heartbeat
(``consumer_coordinator.py``); odradek has no share or streams groups yet, so their
configs are stored and checked but have no effect.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from odradek.metadata.controller import ControllerError
from odradek.metadata.image import GROUP_RESOURCE
from odradek.server.config_describe import (
    DEFAULT_CONFIG,
    INT,
    STRING,
    BrokerLayers,
    ConfigEntry,
    Synonym,
)

if TYPE_CHECKING:
    from odradek.server.services import ConfigContext

GROUP_TYPE: Final = 32  # ConfigResource.Type.GROUP on the wire
GROUP_CONFIG: Final = 8  # ConfigSource.GROUP_CONFIG
INT_MAX: Final = 2**31 - 1
_NO_EFFECT: Final = " (stored and checked; odradek has no {kind} groups yet, so no effect)"


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    doc: str
    broker_default: str | None = None  # the broker property giving the default
    default: str | None = None  # a fixed default, when no broker property gives it
    low: int | None = None  # a fixed lower bound
    bounds: tuple[str | None, str | None] = (None, None)  # broker properties bounding it
    choices: tuple[str, ...] = ()  # for string configs

    @property
    def is_int(self) -> bool:
        return not self.choices


def _timing(kind: str, what: str, doc: str) -> GroupConfigDef:
    low, high = f"group.{kind}.min.{what}", f"group.{kind}.max.{what}"
    suffix = "" if kind == "consumer" else _NO_EFFECT.format(kind=kind)
    return GroupConfigDef(
        f"{kind}.{what}", doc + suffix, f"group.{kind}.{what}", low=1, bounds=(low, high)
    )


GROUP_CONFIGS: Final = (
    _timing("consumer", "heartbeat.interval.ms", "heartbeat interval given to the members"),
    _timing("consumer", "session.timeout.ms", "a member silent this long is removed"),
    GroupConfigDef(
        "share.auto.offset.reset",
        "where a share group starts reading" + _NO_EFFECT.format(kind="share"),
        default="latest",
        choices=("latest", "earliest", "by_duration:"),
    ),
    _timing("share", "heartbeat.interval.ms", "heartbeat interval given to the members"),
    GroupConfigDef(
        "share.isolation.level",
        "which transactional records a share group delivers" + _NO_EFFECT.format(kind="share"),
        default="read_uncommitted",
        choices=("read_committed", "read_uncommitted"),
    ),
    GroupConfigDef(
        "share.record.lock.duration.ms",
        "record acquisition lock duration" + _NO_EFFECT.format(kind="share"),
        "group.share.record.lock.duration.ms",
        low=1000,
        bounds=(
            "group.share.min.record.lock.duration.ms",
            "group.share.max.record.lock.duration.ms",
        ),
    ),
    _timing("share", "session.timeout.ms", "a member silent this long is removed"),
    _timing("streams", "heartbeat.interval.ms", "heartbeat interval given to the members"),
    GroupConfigDef(
        "streams.num.standby.replicas",
        "standby replicas of each task" + _NO_EFFECT.format(kind="streams"),
        "group.streams.num.standby.replicas",
        low=0,
        bounds=(None, "group.streams.max.standby.replicas"),
    ),
    _timing("streams", "session.timeout.ms", "a member silent this long is removed"),
)
GROUP_CONFIGS_BY_NAME: Final = {d.name: d for d in GROUP_CONFIGS}
# (session timeout, heartbeat interval): the first must exceed the second.
_PAIRS: Final = tuple(
    (f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms")
    for kind in ("consumer", "share", "streams")
)


def check_group_name(name: str) -> None:
    if not name:
        raise ControllerError("INVALID_REQUEST", "Group name must not be empty")


def check_name(name: str) -> GroupConfigDef:
    definition = GROUP_CONFIGS_BY_NAME.get(name)
    if definition is None:
        raise ControllerError("INVALID_CONFIG", f"Unknown group config name: {name}")
    return definition


def _parse(definition: GroupConfigDef, raw: str) -> int | str:
    name = definition.name
    if not definition.is_int:
        value = raw.strip()
        if not any(
            value == c or (c.endswith(":") and value.startswith(c)) for c in definition.choices
        ):
            raise ControllerError("INVALID_CONFIG", f"Invalid value {raw} for configuration {name}")
        return value
    try:
        number = int(raw.strip())
    except ValueError:
        raise ControllerError(
            "INVALID_CONFIG", f"Invalid value {raw} for configuration {name}: Not a number"
        ) from None
    if not -(2**31) <= number <= INT_MAX or (
        definition.low is not None and number < definition.low
    ):
        raise ControllerError(
            "INVALID_CONFIG",
            f"Invalid value {raw} for configuration {name}: must be at least {definition.low}",
        )
    return number


def _broker_int(layers: BrokerLayers, name: str) -> int:
    return int(layers.value(name) or 0)


def effective(
    layers: BrokerLayers, definition: GroupConfigDef, overrides: Mapping[str, str]
) -> str:
    """The value a group sees: its own, else the broker's for every group."""
    if definition.name in overrides:
        return overrides[definition.name]
    if definition.broker_default is not None:
        return layers.value(definition.broker_default) or ""
    return definition.default or ""


def validator(context: ConfigContext) -> Callable[[Mapping[str, str]], None]:
    """Checks the complete set of a group's configs before the controller commits it."""

    def validate(merged: Mapping[str, str]) -> None:
        layers = BrokerLayers.of(context)
        numbers: dict[str, int] = {}
        for name in merged:
            check_name(name)
        for definition in GROUP_CONFIGS:
            value = _parse(definition, effective(layers, definition, merged))
            if not isinstance(value, int):
                continue
            numbers[definition.name] = value
            if definition.name not in merged:
                continue
            low, high = definition.bounds
            if low is not None and value < _broker_int(layers, low):
                raise ControllerError(
                    "INVALID_CONFIG", f"{definition.name} must be greater than or equal to {low}"
                )
            if high is not None and value > _broker_int(layers, high):
                raise ControllerError(
                    "INVALID_CONFIG", f"{definition.name} must be less than or equal to {high}"
                )
        for session, heartbeat in _PAIRS:
            changed = session in merged or heartbeat in merged
            if changed and numbers[session] <= numbers[heartbeat]:
                raise ControllerError(
                    "INVALID_CONFIG", f"{session} must be greater than {heartbeat}"
                )

    return validate


def describe_group(
    context: ConfigContext, group_id: str, keys: Collection[str] | None
) -> list[ConfigEntry]:
    check_group_name(group_id)
    layers = BrokerLayers.of(context)
    overrides = context.metadata.image.configs.get((GROUP_RESOURCE, group_id), {})
    entries = []
    for definition in GROUP_CONFIGS:
        name = definition.name
        if keys is not None and name not in keys:
            continue
        synonyms = [Synonym(name, overrides[name], GROUP_CONFIG)] if name in overrides else []
        if definition.broker_default is not None:
            synonyms += layers.synonyms([definition.broker_default])
        elif definition.default is not None:
            synonyms.append(Synonym(name, definition.default, DEFAULT_CONFIG))
        entries.append(
            ConfigEntry(
                name=name,
                value=effective(layers, definition, overrides),
                source=synonyms[0].source if synonyms else DEFAULT_CONFIG,
                read_only=False,
                config_type=INT if definition.is_int else STRING,
                documentation=definition.doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries
