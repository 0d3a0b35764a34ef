"""Metadata records and the immutable MetadataImage they build.

How this works and why (ARCHITECTURE.md "Metadata is a log"): every cluster change is
a record in ``__cluster_metadata``; the image is the fold of all records so far.
Images are never mutated — ``apply`` returns a new one sharing unchanged parts — so a
request handler that took ``broker.image`` sees one consistent cluster state even if
a topic is created while it runs.

Record encoding: each metadata record is one Kafka record whose key is the record
type (``b"Topic"``, ...) and whose value is the JSON of its fields. Kafka encodes
these with generated binary schemas; JSON keeps ``odradek dump-log
--print-data-log`` readable and is only ever read by odradek. A field added later
is read with a default when an older record lacks it, so old logs stay readable.

Brokers (KIP-631): ``RegisterBroker`` carries the broker id, its incarnation id (one
per process start), endpoints, rack, supported features, log dir ids and the
``fenced`` flag (the controller writes new registrations fenced; a record without
the flag, written before heartbeats existed, reads as unfenced). The broker epoch is
the offset of that record (a snapshot carries it as ``broker_epoch``).
``FenceBroker`` / ``UnfenceBroker`` (broker id and epoch) flip the flag, and
``UnregisterBroker`` removes the broker; each applies only to the registration of
that epoch, so a record about an older incarnation changes nothing.

Partitions (KIP-497, Kafka's PartitionRecord / PartitionChangeRecord): ``Partition``
states a partition whole (creation, and every partition of a snapshot, with its
epochs); ``PartitionChange`` names one by topic id and index and carries only what
changes — any of ``leader``, ``isr``, ``replicas``, ``adding_replicas``,
``removing_replicas`` (the last two: an ongoing reassignment, KIP-455; a record
without them, written before reassignments existed, reads as none). Applying a
change bumps the partition epoch, whatever it changes (a leader's AlterPartition
must name the current one, so a stale proposal fails); a change that carries
``leader`` (even -1: the partition goes offline) also bumps the leader epoch, as
Kafka does, so followers and clients can tell the new leader's era from the old
one's. A change of a partition
the image does not hold (its topic deleted in the same batch) changes nothing.

Security (issue 16; Kafka's UserScramCredentialRecord, AccessControlEntryRecord,
RemoveAccessControlEntryRecord, ClientQuotaRecord): ``UserScramCredential`` sets one
user's credential for one mechanism (salt, stored and server keys as hex, iterations;
never the password) and ``RemoveUserScramCredential`` drops it; ``AccessControlEntry``
adds one ACL under its id (a UUID string) and ``RemoveAccessControlEntry`` removes the
ACL of that id; ``ClientQuota`` sets (value) or removes (``remove``) one quota key of
one entity, the entity being its ``(entity type, name or None)`` pairs (``user``,
``client-id``, ``ip``; None is the entity type's default).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

TOPIC_RESOURCE: Final = "topic"
BROKER_RESOURCE: Final = "broker"
GROUP_RESOURCE: Final = "group"  # KIP-848 group configs
PRODUCER_ID_BLOCK_SIZE: Final = 1000
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One change: ``kind`` names it, ``fields`` holds its JSON-able data."""

    kind: str
    fields: Mapping[str, Any]

    def encode(self) -> tuple[bytes, bytes]:
        return self.kind.encode(), json.dumps(dict(self.fields), sort_keys=True).encode()

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> MetadataRecord:
        if key is None or value is None:
            raise ValueError("metadata record without key or value")
        return cls(key.decode(), json.loads(value.decode()))


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)
    rack: str | None = None
    incarnation_id: str = ""
    # Fenced brokers get no new replicas (placement.py) and are left out of Metadata
    # responses: registered but not (yet, or no longer) heartbeating and caught up.
    fenced: bool = False
    epoch: int = -1  # Kafka's broker epoch: the offset of its RegisterBroker record
    features: tuple[tuple[str, int, int], ...] = ()  # (name, min, max supported)
    log_dirs: tuple[str, ...] = ()  # directory.id of each log dir (meta.properties)


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int = 0
    # an ongoing reassignment (KIP-455): replicas = target ∪ current while it runs
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class ScramEntry:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL binding, in Kafka's wire codes (resource type, pattern type, operation,
    permission type: authorized_operations.py's enums and Kafka's PatternType)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str  # "User:alice", "User:*"
    host: str  # "*" or an address
    operation: int
    permission_type: int


QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int = -1  # offset of the last record applied
    brokers: Mapping[int, BrokerImage] = field(default_factory=lambda: _EMPTY)
    topics: Mapping[str, TopicImage] = field(default_factory=lambda: _EMPTY)
    topic_names_by_id: Mapping[uuid.UUID, str] = field(default_factory=lambda: _EMPTY)
    configs: Mapping[tuple[str, str], Mapping[str, str]] = field(default_factory=lambda: _EMPTY)
    next_producer_id: int = 0
    # (user, mechanism) -> its SCRAM credential
    scram_credentials: Mapping[tuple[str, str], ScramEntry] = field(default_factory=lambda: _EMPTY)
    acls: Mapping[str, AclEntry] = field(default_factory=lambda: _EMPTY)  # by ACL id
    # entity ((type, name or None), ...) sorted by type -> quota key -> value
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=lambda: _EMPTY)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        name = self.topic_names_by_id.get(topic_id)
        return self.topics.get(name) if name is not None else None

    def topic_configs(self, topic: str) -> Mapping[str, str]:
        return self.configs.get((TOPIC_RESOURCE, topic), _EMPTY)

    def apply(self, records: Iterable[MetadataRecord], offset: int) -> MetadataImage:
        """The image after ``records``; this one is left as it was.

        The records are applied to mutable copies of only the maps they touch, frozen
        once at the end, so replaying a long log costs one dict update per record
        rather than a copy of the cluster's maps per record.
        """
        builder = _Builder(self)
        builder.apply(records, offset)
        return builder.freeze(offset)

    def to_records(self) -> list[MetadataRecord]:
        """The fewest records that rebuild this image (less its offset) from empty.

        Exact for every image the controller's records build (topic names and ids are
        unique); a log that reused a topic id under two names replays to id → name
        entries that no set of records rebuilds.

        What a snapshot holds: replaying them through ``ImageReplay`` gives an image
        equal to this one. Brokers first, then each topic followed by its configs and
        partitions, then the configs of other resources, then the producer-id block.
        """
        records: list[MetadataRecord] = []
        for broker in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            records.append(
                MetadataRecord(
                    "RegisterBroker",
                    {
                        "broker_id": broker.broker_id,
                        "endpoints": [list(e) for e in broker.endpoints],
                        "rack": broker.rack,
                        "incarnation_id": broker.incarnation_id,
                        "fenced": broker.fenced,
                        "broker_epoch": broker.epoch,
                        "features": [list(f) for f in broker.features],
                        "log_dirs": list(broker.log_dirs),
                    },
                )
            )
        for name in sorted(self.topics):
            topic = self.topics[name]
            records.append(MetadataRecord("Topic", {"name": name, "topic_id": str(topic.topic_id)}))
            records.extend(_config_records((TOPIC_RESOURCE, name), self.topic_configs(name)))
            for index in sorted(topic.partitions):
                p = topic.partitions[index]
                records.append(
                    MetadataRecord(
                        "Partition",
                        {
                            "topic_id": str(topic.topic_id),
                            "partition": p.partition,
                            "replicas": list(p.replicas),
                            "isr": list(p.isr),
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "partition_epoch": p.partition_epoch,
                            **_reassigning(p),
                        },
                    )
                )
        for resource in sorted(self.configs):
            if resource[0] != TOPIC_RESOURCE or resource[1] not in self.topics:
                records.extend(_config_records(resource, self.configs[resource]))
        if self.next_producer_id:
            records.append(
                MetadataRecord("ProducerIds", {"next_producer_id": self.next_producer_id})
            )
        for (user, mechanism), entry in sorted(self.scram_credentials.items()):
            records.append(scram_record(user, mechanism, entry))
        for acl_id, acl in sorted(self.acls.items()):
            records.append(acl_record(acl_id, acl))
        for entity, values in sorted(self.client_quotas.items(), key=lambda i: repr(i[0])):
            for key, value in sorted(values.items()):
                records.append(quota_record(entity, key, value))
        return records


class ImageReplay:
    """Folds a whole log into one image (start-up): one builder for every batch.

    ``apply`` per batch then ``image()`` once gives the same image as applying each
    batch to the image before it, without building an image per batch.
    """

    def __init__(self, image: MetadataImage | None = None) -> None:
        self._builder = _Builder(image or MetadataImage())
        self.offset = self._builder.image.offset

    def apply(self, records: Iterable[MetadataRecord], offset: int) -> None:
        self._builder.apply(records, offset)
        self.offset = offset

    def image(self) -> MetadataImage:
        return self._builder.freeze(self.offset)

    @property
    def start(self) -> MetadataImage:
        """The image the replay started from."""
        return self._builder.image

    @property
    def changed(self) -> ChangedKeys:
        """What the batches applied so far touched (for the loader's delta)."""
        return self._builder.changed


@dataclass(slots=True)
class ChangedKeys:
    """The keys a run of records touched; the delta compares only these between images.

    A key here may end up unchanged (a config set and set back), never the reverse.
    """

    brokers: set[int] = field(default_factory=set)
    topic_ids: set[uuid.UUID] = field(default_factory=set)  # created or removed
    partitions: set[tuple[str, int]] = field(default_factory=set)  # (topic name, index)
    resources: set[tuple[str, str]] = field(default_factory=set)  # config resources
    security: bool = False  # SCRAM credentials, ACLs or quotas changed


def _config_records(resource: tuple[str, str], values: Mapping[str, str]) -> list[MetadataRecord]:
    return [
        MetadataRecord(
            "Config",
            {"resource_type": resource[0], "resource_name": resource[1], "name": k, "value": v},
        )
        for k, v in sorted(values.items())
    ]


def _frozen(mapping: dict[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(mapping) if mapping else _EMPTY


class _Builder:
    """Copy-on-write working state of one ``apply``: each map is copied on first change."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.brokers: dict[int, BrokerImage] | None = None
        self.topics: dict[str, TopicImage] | None = None
        self.names_by_id: dict[uuid.UUID, str] | None = None
        self.configs: dict[tuple[str, str], Mapping[str, str]] | None = None
        self.partitions: dict[str, dict[int, PartitionImage]] = {}  # changed topics
        self.resource_configs: dict[tuple[str, str], dict[str, str]] = {}  # changed resources
        self.next_producer_id = image.next_producer_id
        self.scram: dict[tuple[str, str], ScramEntry] | None = None
        self.acls: dict[str, AclEntry] | None = None
        self.quotas: dict[QuotaEntity, Mapping[str, float]] | None = None
        self.changed = ChangedKeys()
        self.record_offset = -1  # offset of the record being applied
        # Topic ids as written -> parsed: a topic's Partition records name it again.
        self.parsed_ids: dict[str, uuid.UUID] = {}

    def apply(self, records: Iterable[MetadataRecord], last_offset: int) -> None:
        batch = records if isinstance(records, Sequence) else list(records)
        first = last_offset - len(batch) + 1
        for index, record in enumerate(batch):
            handler = _APPLY.get(record.kind)
            if handler is None:
                raise ValueError(f"unknown metadata record type {record.kind!r}")
            self.record_offset = first + index
            handler(self, record.fields)

    def broker_map(self) -> dict[int, BrokerImage]:
        if self.brokers is None:
            self.brokers = dict(self.image.brokers)
        return self.brokers

    def topic_map(self) -> dict[str, TopicImage]:
        if self.topics is None:
            self.topics = dict(self.image.topics)
        return self.topics

    def id_map(self) -> dict[uuid.UUID, str]:
        if self.names_by_id is None:
            self.names_by_id = dict(self.image.topic_names_by_id)
        return self.names_by_id

    def config_map(self) -> dict[tuple[str, str], Mapping[str, str]]:
        if self.configs is None:
            self.configs = dict(self.image.configs)
        return self.configs

    def freeze(self, offset: int) -> MetadataImage:
        image = self.image
        topics = self.topics
        if self.partitions:
            assert topics is not None
            for name, partitions in self.partitions.items():
                if name in topics:
                    topic = topics[name]  # built directly: dataclasses.replace is slow
                    topics[name] = TopicImage(topic.name, topic.topic_id, _frozen(partitions))
        configs = self.configs
        if self.resource_configs:
            assert configs is not None
            for resource, values in self.resource_configs.items():
                if values:
                    configs[resource] = MappingProxyType(values)
                else:
                    configs.pop(resource, None)
        return MetadataImage(
            offset,
            image.brokers if self.brokers is None else _frozen(self.brokers),
            image.topics if topics is None else _frozen(topics),
            image.topic_names_by_id if self.names_by_id is None else _frozen(self.names_by_id),
            image.configs if configs is None else _frozen(configs),
            self.next_producer_id,
            image.scram_credentials if self.scram is None else _frozen(self.scram),
            image.acls if self.acls is None else _frozen(self.acls),
            image.client_quotas if self.quotas is None else _frozen(self.quotas),
        )

    def scram_map(self) -> dict[tuple[str, str], ScramEntry]:
        if self.scram is None:
            self.scram = dict(self.image.scram_credentials)
        self.changed.security = True
        return self.scram

    def acl_map(self) -> dict[str, AclEntry]:
        if self.acls is None:
            self.acls = dict(self.image.acls)
        self.changed.security = True
        return self.acls

    def quota_map(self) -> dict[QuotaEntity, Mapping[str, float]]:
        if self.quotas is None:
            self.quotas = dict(self.image.client_quotas)
        self.changed.security = True
        return self.quotas


def _register_broker(state: _Builder, f: Mapping[str, Any]) -> None:
    broker = BrokerImage(
        f["broker_id"],
        tuple((e[0], e[1], e[2]) for e in f["endpoints"]),
        f.get("rack"),
        f.get("incarnation_id", ""),
        bool(f.get("fenced", False)),
        # A snapshot carries the epoch (the offset of the original registration).
        f.get("broker_epoch", state.record_offset),
        tuple((x[0], x[1], x[2]) for x in f.get("features", ())),
        tuple(f.get("log_dirs", ())),
    )
    state.broker_map()[broker.broker_id] = broker
    state.changed.brokers.add(broker.broker_id)


def _registered(state: _Builder, f: Mapping[str, Any]) -> BrokerImage | None:
    """The broker the record names, if its registration is the epoch the record names."""
    brokers = state.image.brokers if state.brokers is None else state.brokers
    broker = brokers.get(f["broker_id"])
    if broker is None or broker.epoch != f["broker_epoch"]:
        return None
    return broker


def _set_fenced(state: _Builder, f: Mapping[str, Any], fenced: bool) -> None:
    broker = _registered(state, f)
    if broker is None or broker.fenced == fenced:
        return
    state.broker_map()[broker.broker_id] = BrokerImage(
        broker.broker_id,
        broker.endpoints,
        broker.rack,
        broker.incarnation_id,
        fenced,
        broker.epoch,
        broker.features,
        broker.log_dirs,
    )
    state.changed.brokers.add(broker.broker_id)


def _fence_broker(state: _Builder, f: Mapping[str, Any]) -> None:
    _set_fenced(state, f, True)


def _unfence_broker(state: _Builder, f: Mapping[str, Any]) -> None:
    _set_fenced(state, f, False)


def _unregister_broker(state: _Builder, f: Mapping[str, Any]) -> None:
    broker = _registered(state, f)
    if broker is None:
        return
    del state.broker_map()[broker.broker_id]
    state.changed.brokers.add(broker.broker_id)


def _topic_id(state: _Builder, text: str) -> uuid.UUID:
    topic_id = state.parsed_ids.get(text)
    if topic_id is None:
        topic_id = state.parsed_ids[text] = uuid.UUID(text)
    return topic_id


def _topic(state: _Builder, f: Mapping[str, Any]) -> None:
    topic_id = _topic_id(state, f["topic_id"])
    name = f["name"]
    replaced = state.topic_map().get(name)
    if replaced is not None:  # never written by the controller; replayed as it reads
        state.changed.topic_ids.add(replaced.topic_id)
        # The old id names nothing now: a later RemoveTopic of it must not remove
        # the topic that took its name.
        state.id_map().pop(replaced.topic_id, None)
    state.topic_map()[name] = TopicImage(name, topic_id)
    state.partitions.pop(name, None)  # a new topic starts with no partitions
    state.id_map()[topic_id] = name
    state.changed.topic_ids.add(topic_id)


def _reassigning(p: PartitionImage) -> dict[str, list[int]]:
    """A snapshot's fields of an ongoing reassignment (none when there is none)."""
    if not p.adding_replicas and not p.removing_replicas:
        return {}
    return {
        "adding_replicas": list(p.adding_replicas),
        "removing_replicas": list(p.removing_replicas),
    }


def _partition(state: _Builder, f: Mapping[str, Any]) -> None:
    topic_id = _topic_id(state, f["topic_id"])
    names = state.image.topic_names_by_id if state.names_by_id is None else state.names_by_id
    topics = state.image.topics if state.topics is None else state.topics
    name = names.get(topic_id)
    topic = topics.get(name) if name is not None else None
    if topic is None:
        raise ValueError(f"partition record for unknown topic {f['topic_id']}")
    partition = PartitionImage(
        f["partition"],
        tuple(f["replicas"]),
        tuple(f["isr"]),
        f["leader"],
        f["leader_epoch"],
        f.get("partition_epoch", 0),
        tuple(f.get("adding_replicas", ())),
        tuple(f.get("removing_replicas", ())),
    )
    partitions = state.partitions.get(topic.name)
    if partitions is None:
        partitions = state.partitions[topic.name] = (
            dict(topic.partitions) if topic.partitions else {}
        )
        state.topic_map()  # freeze() rebuilds this topic in a copied map
    partitions[partition.partition] = partition
    state.changed.partitions.add((topic.name, partition.partition))


def _partition_change(state: _Builder, f: Mapping[str, Any]) -> None:
    topic_id = _topic_id(state, f["topic_id"])
    names = state.image.topic_names_by_id if state.names_by_id is None else state.names_by_id
    topics = state.image.topics if state.topics is None else state.topics
    name = names.get(topic_id)
    topic = topics.get(name) if name is not None else None
    if topic is None or topic.topic_id != topic_id:
        return
    partitions = state.partitions.get(topic.name)
    current = (partitions if partitions is not None else topic.partitions).get(f["partition"])
    if current is None:
        return
    leader, leader_epoch = current.leader, current.leader_epoch
    if "leader" in f:
        leader, leader_epoch = f["leader"], leader_epoch + 1
    changed = PartitionImage(
        current.partition,
        tuple(f["replicas"]) if "replicas" in f else current.replicas,
        tuple(f["isr"]) if "isr" in f else current.isr,
        leader,
        leader_epoch,
        current.partition_epoch + 1,
        tuple(f["adding_replicas"]) if "adding_replicas" in f else current.adding_replicas,
        tuple(f["removing_replicas"]) if "removing_replicas" in f else current.removing_replicas,
    )
    if partitions is None:
        partitions = state.partitions[topic.name] = dict(topic.partitions)
        state.topic_map()  # freeze() rebuilds this topic in a copied map
    partitions[changed.partition] = changed
    state.changed.partitions.add((topic.name, changed.partition))


def _remove_topic(state: _Builder, f: Mapping[str, Any]) -> None:
    topic_id = uuid.UUID(f["topic_id"])
    names = state.image.topic_names_by_id if state.names_by_id is None else state.names_by_id
    name = names.get(topic_id)
    if name is None:
        return
    topics = state.image.topics if state.topics is None else state.topics
    current = topics.get(name)
    if current is None or current.topic_id != topic_id:
        return
    state.topic_map().pop(name, None)
    state.partitions.pop(name, None)
    state.id_map().pop(topic_id, None)
    state.config_map().pop((TOPIC_RESOURCE, name), None)
    state.resource_configs.pop((TOPIC_RESOURCE, name), None)
    state.changed.topic_ids.add(topic_id)
    state.changed.resources.add((TOPIC_RESOURCE, name))


def _config(state: _Builder, f: Mapping[str, Any]) -> None:
    resource = (f["resource_type"], f["resource_name"])
    values = state.resource_configs.get(resource)
    if values is None:
        configs = state.config_map()
        values = state.resource_configs[resource] = dict(configs.get(resource, _EMPTY))
    state.changed.resources.add(resource)
    value = f.get("value")
    if value is None:
        values.pop(f["name"], None)
    else:
        values[f["name"]] = value


def _producer_ids(state: _Builder, f: Mapping[str, Any]) -> None:
    state.next_producer_id = f["next_producer_id"]


def scram_record(user: str, mechanism: str, entry: ScramEntry) -> MetadataRecord:
    return MetadataRecord(
        "UserScramCredential",
        {
            "name": user,
            "mechanism": mechanism,
            "salt": entry.salt.hex(),
            "stored_key": entry.stored_key.hex(),
            "server_key": entry.server_key.hex(),
            "iterations": entry.iterations,
        },
    )


def acl_record(acl_id: str, acl: AclEntry) -> MetadataRecord:
    return MetadataRecord(
        "AccessControlEntry",
        {
            "id": acl_id,
            "resource_type": acl.resource_type,
            "resource_name": acl.resource_name,
            "pattern_type": acl.pattern_type,
            "principal": acl.principal,
            "host": acl.host,
            "operation": acl.operation,
            "permission_type": acl.permission_type,
        },
    )


def quota_record(entity: QuotaEntity, key: str, value: float | None) -> MetadataRecord:
    """One quota key of one entity set (value) or removed (None)."""
    fields: dict[str, Any] = {"entity": [list(e) for e in entity], "key": key}
    if value is None:
        fields["remove"] = True
    else:
        fields["value"] = value
    return MetadataRecord("ClientQuota", fields)


def _scram(state: _Builder, f: Mapping[str, Any]) -> None:
    state.scram_map()[(f["name"], f["mechanism"])] = ScramEntry(
        bytes.fromhex(f["salt"]),
        bytes.fromhex(f["stored_key"]),
        bytes.fromhex(f["server_key"]),
        int(f["iterations"]),
    )


def _remove_scram(state: _Builder, f: Mapping[str, Any]) -> None:
    state.scram_map().pop((f["name"], f["mechanism"]), None)


def _acl(state: _Builder, f: Mapping[str, Any]) -> None:
    state.acl_map()[f["id"]] = AclEntry(
        int(f["resource_type"]),
        f["resource_name"],
        int(f["pattern_type"]),
        f["principal"],
        f["host"],
        int(f["operation"]),
        int(f["permission_type"]),
    )


def _remove_acl(state: _Builder, f: Mapping[str, Any]) -> None:
    state.acl_map().pop(f["id"], None)


def _quota(state: _Builder, f: Mapping[str, Any]) -> None:
    entity: QuotaEntity = tuple(sorted((e[0], e[1]) for e in f["entity"]))
    quotas = state.quota_map()
    values = dict(quotas.get(entity, _EMPTY))
    if f.get("remove"):
        values.pop(f["key"], None)
    else:
        values[f["key"]] = float(f["value"])
    if values:
        quotas[entity] = MappingProxyType(values)
    else:
        quotas.pop(entity, None)


_APPLY = {
    "RegisterBroker": _register_broker,
    "FenceBroker": _fence_broker,
    "UnfenceBroker": _unfence_broker,
    "UnregisterBroker": _unregister_broker,
    "Topic": _topic,
    "Partition": _partition,
    "PartitionChange": _partition_change,
    "RemoveTopic": _remove_topic,
    "Config": _config,
    "ProducerIds": _producer_ids,
    "UserScramCredential": _scram,
    "RemoveUserScramCredential": _remove_scram,
    "AccessControlEntry": _acl,
    "RemoveAccessControlEntry": _remove_acl,
    "ClientQuota": _quota,
}
