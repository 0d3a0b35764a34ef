"""Kafka's broker config catalogue: every broker property Kafka 4.1 documents.

How this works and why: Kafka's ``server.properties`` files and admin tools name any
of Kafka's ~300 broker properties, and a client that sets one it is entitled to set
(``sasl.kerberos.min.time.before.relogin`` per broker, say) should not be told it
does not exist. odradek implements the properties in ``server/config.py``
``BROKER_CONFIGS``; every other name in this table is accepted — type-checked,
stored (in the static file, or as a dynamic config record in the metadata log),
listed by DescribeConfigs with its Kafka default — and has no effect here, which its
documentation says. A name in neither table is not a Kafka broker config and is
still refused (dynamic update) or warned about (static file).

Update modes are Kafka's (its "Update Mode" column): ``read-only`` properties cannot
be changed with (Incremental)AlterConfigs ("Cannot update these configs
dynamically"); ``per-broker`` ones only for one broker id, not as the cluster-wide
default; ``cluster-wide`` ones either way. Kafka's reconfigurable SSL keystore and
truststore settings may be updated only with a listener prefix
(``listener.name.<listener>.ssl.keystore.location``). A property odradek implements
keeps odradek's own ``dynamic`` flag (odradek lets ``num.partitions`` change at
runtime, for one), so this table decides only for the others.

The table, one property a line: name, type, default (``-`` none, ``""`` empty,
``*`` the long value in ``_LONG_DEFAULTS``; ``o.a.k.`` abbreviates
``org.apache.kafka.``), update mode (``r`` read-only, ``b`` per-broker, ``c``
cluster-wide), and valid range ``low..high`` when Kafka documents one. Types,
defaults, modes and ranges are facts from Kafka's broker configs documentation;
nothing else of Kafka's is copied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from odradek.server.config import CONFIGS_BY_NAME, BrokerConfigDef, ConfigError

READ_ONLY: Final = "read-only"
PER_BROKER: Final = "per-broker"
CLUSTER_WIDE: Final = "cluster-wide"
_MODES: Final = {"r": READ_ONLY, "b": PER_BROKER, "c": CLUSTER_WIDE}
NO_EFFECT_DOC: Final = "Kafka broker config: accepted and stored, no effect in odradek"
LISTENER_PREFIX: Final = "listener.name."
# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only per listener.
LISTENER_ONLY: Final = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
    }
)
_LONG_DEFAULTS: Final = {
    "listener.security.protocol.map": (
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"
    ),
    "remote.log.metadata.manager.class.name": (
        "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"
    ),
    "sasl.oauthbearer.jwt.retriever.class": (
        "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever"
    ),
    "sasl.oauthbearer.jwt.validator.class": (
        "org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator"
    ),
}

_TABLE: Final = """
add.partitions.to.txn.retry.backoff.max.ms int 100 r 0..
add.partitions.to.txn.retry.backoff.ms int 20 r 1..
advertised.listeners string - r
alter.config.policy.class.name class - r
allow.everyone.if.no.acl.found boolean false r
alter.log.dirs.replication.quota.window.num int 11 r 1..
alter.log.dirs.replication.quota.window.size.seconds int 1 r 1..
authorizer.class.name string "" r
auto.create.topics.enable boolean true r
auto.leader.rebalance.enable boolean true r
background.threads int 10 c 1..
broker.heartbeat.interval.ms int 2000 r
broker.id int -1 r
broker.rack string - r
broker.session.timeout.ms int 9000 r
client.quota.callback.class class - r
compression.gzip.level int -1 c -1..9
compression.lz4.level int 9 c 1..17
compression.type string producer c
compression.zstd.level int 3 c -131072..22
connection.failed.authentication.delay.ms int 100 r 0..
connections.max.idle.ms long 600000 r
connections.max.reauth.ms long 0 r
controlled.shutdown.enable boolean true r
controller.listener.names string - r
controller.quorum.append.linger.ms int 25 r 0..
controller.quorum.bootstrap.servers list "" r
controller.quorum.election.backoff.max.ms int 1000 r 0..
controller.quorum.election.timeout.ms int 1000 r 0..
controller.quorum.fetch.timeout.ms int 2000 r 0..
controller.quorum.request.timeout.ms int 2000 r 0..
controller.quorum.retry.backoff.ms int 20 r 0..
controller.quorum.voters list "" r
controller.quota.window.num int 11 r 1..
controller.quota.window.size.seconds int 1 r 1..
controller.socket.timeout.ms int 30000 r
create.topic.policy.class.name class - r
default.replication.factor int 1 r
delegation.token.expiry.check.interval.ms long 3600000 r 1..
delegation.token.expiry.time.ms long 86400000 r 1..
delegation.token.max.lifetime.ms long 604800000 r 1..
delegation.token.secret.key password - r
delete.records.purgatory.purge.interval.requests int 1 r
delete.topic.enable boolean true r
early.start.listeners string - r
fetch.max.bytes int 57671680 r 1024..
fetch.purgatory.purge.interval.requests int 1000 r
follower.replication.throttled.rate long 9223372036854775807 c 0..
group.consumer.assignors list uniform,range r
group.consumer.heartbeat.interval.ms int 5000 r 1..
group.consumer.max.heartbeat.interval.ms int 15000 r 1..
group.consumer.max.session.timeout.ms int 60000 r 1..
group.consumer.max.size int 2147483647 r 1..
group.consumer.migration.policy string bidirectional r
group.consumer.min.heartbeat.interval.ms int 5000 r 1..
group.consumer.min.session.timeout.ms int 45000 r 1..
group.consumer.session.timeout.ms int 45000 r 1..
group.coordinator.append.linger.ms int 5 r 0..
group.coordinator.rebalance.protocols list classic,consumer,streams r
group.coordinator.threads int 4 r 1..
group.initial.rebalance.delay.ms int 3000 r
group.max.session.timeout.ms int 1800000 r
group.max.size int 2147483647 r 1..
group.min.session.timeout.ms int 6000 r
group.share.assignors list simple r
group.share.delivery.count.limit int 5 r 2..10
group.share.heartbeat.interval.ms int 5000 r 1..
group.share.max.heartbeat.interval.ms int 15000 r 1..
group.share.max.record.lock.duration.ms int 60000 r 30000..3600000
group.share.max.session.timeout.ms int 60000 r 1..
group.share.max.share.sessions int 2000 r 1..
group.share.max.size int 200 r 1..1000
group.share.min.heartbeat.interval.ms int 5000 r 1..
group.share.min.record.lock.duration.ms int 15000 r 1000..30000
group.share.min.session.timeout.ms int 45000 r 1..
group.share.partition.max.record.locks int 2000 r 100..10000
group.share.record.lock.duration.ms int 30000 r 1000..3600000
group.share.session.timeout.ms int 45000 r 1..
group.streams.heartbeat.interval.ms int 5000 r 1..
group.streams.max.heartbeat.interval.ms int 15000 r 1..
group.streams.max.session.timeout.ms int 60000 r 1..
group.streams.max.size int 2147483647 r 1..
group.streams.max.standby.replicas int 2 r 0..
group.streams.min.heartbeat.interval.ms int 5000 r 1..
group.streams.min.session.timeout.ms int 45000 r 1..
group.streams.num.standby.replicas int 0 r 0..
group.streams.session.timeout.ms int 45000 r 1..
initial.broker.registration.timeout.ms int 60000 r
inter.broker.listener.name string - r
kafka.metrics.polling.interval.secs int 10 r 1..
kafka.metrics.reporters list "" r
leader.imbalance.check.interval.seconds long 300 r 1..
leader.replication.throttled.rate long 9223372036854775807 c 0..
listener.security.protocol.map string * b
listeners string PLAINTEXT://:9092 b
log.cleaner.backoff.ms long 15000 c 0..
log.cleaner.dedupe.buffer.size long 134217728 c
log.cleaner.delete.retention.ms long 86400000 c 0..
log.cleaner.enable boolean true r
log.cleaner.io.buffer.load.factor double 0.9 c
log.cleaner.io.buffer.size int 524288 c 0..
log.cleaner.io.max.bytes.per.second double 1.7976931348623157E308 c
log.cleaner.max.compaction.lag.ms long 9223372036854775807 c 1..
log.cleaner.min.cleanable.ratio double 0.5 c 0..1
log.cleaner.min.compaction.lag.ms long 0 c 0..
log.cleaner.threads int 1 c 0..
log.cleanup.policy list delete c
log.dir string /tmp/kafka-logs r
log.dir.failure.timeout.ms long 30000 r 1..
log.dirs string - r
log.flush.interval.messages long 9223372036854775807 c 1..
log.flush.interval.ms long - c
log.flush.offset.checkpoint.interval.ms int 60000 r 0..
log.flush.scheduler.interval.ms long 9223372036854775807 r
log.flush.start.offset.checkpoint.interval.ms int 60000 r 0..
log.index.interval.bytes int 4096 c 0..
log.index.size.max.bytes int 10485760 c 4..
log.local.retention.bytes long -2 c -2..
log.local.retention.ms long -2 c -2..
log.message.timestamp.after.max.ms long 3600000 c 0..
log.message.timestamp.before.max.ms long 9223372036854775807 c 0..
log.message.timestamp.type string CreateTime c
log.preallocate boolean false c
log.retention.bytes long -1 c
log.retention.check.interval.ms long 300000 r 1..
log.retention.hours int 168 r
log.retention.minutes int - r
log.retention.ms long - c
log.roll.hours int 168 r 1..
log.roll.jitter.hours int 0 r 0..
log.roll.jitter.ms long - c
log.roll.ms long - c
log.segment.bytes int 1073741824 c 1048576..
log.segment.delete.delay.ms long 60000 c 0..
max.connection.creation.rate int 2147483647 c 0..
max.connections int 2147483647 c 0..
max.connections.per.ip int 2147483647 c 0..
max.connections.per.ip.overrides string "" c
max.incremental.fetch.session.cache.slots int 1000 r 0..
max.request.partition.size.limit int 2000 r 1..
message.max.bytes int 1048588 c 0..
metadata.log.dir string - r
metadata.log.max.record.bytes.between.snapshots long 20971520 r 1..
metadata.log.max.snapshot.interval.ms long 3600000 r 0..
metadata.log.segment.bytes int 1073741824 r 8388608..
metadata.log.segment.ms long 604800000 r
metadata.max.idle.interval.ms int 500 r 0..
metadata.max.retention.bytes long 104857600 r
metadata.max.retention.ms long 604800000 r
metric.reporters list o.a.k.common.metrics.JmxReporter c
metrics.num.samples int 2 r 1..
metrics.recording.level string INFO r
metrics.sample.window.ms long 30000 r 1..
min.insync.replicas int 1 c 1..
node.id int "" r 0..
num.io.threads int 8 c 1..
num.network.threads int 3 c 1..
num.partitions int 1 r 1..
num.recovery.threads.per.data.dir int 2 c 1..
num.replica.alter.log.dirs.threads int - r
num.replica.fetchers int 1 c
offset.metadata.max.bytes int 4096 r
offsets.commit.timeout.ms int 5000 r 1..
offsets.load.buffer.size int 5242880 r 1..
offsets.retention.check.interval.ms long 600000 r 1..
offsets.retention.minutes int 10080 r 1..
offsets.topic.compression.codec int 0 r
offsets.topic.num.partitions int 50 r 1..
offsets.topic.replication.factor short 3 r 1..
offsets.topic.segment.bytes int 104857600 r 1..
principal.builder.class class o.a.k.common.security.authenticator.DefaultKafkaPrincipalBuilder b
process.roles list "" r
producer.id.expiration.ms int 86400000 c 1..
producer.purgatory.purge.interval.requests int 1000 r
queued.max.request.bytes long -1 r
queued.max.requests int 500 r 1..
quota.window.num int 11 r 1..
quota.window.size.seconds int 1 r 1..
remote.fetch.max.wait.ms int 500 c 1..
remote.list.offsets.request.timeout.ms long 30000 c 1..
remote.log.index.file.cache.total.size.bytes long 1073741824 c 1..
remote.log.manager.copier.thread.pool.size int 10 c 1..
remote.log.manager.copy.max.bytes.per.second long 9223372036854775807 c 1..
remote.log.manager.copy.quota.window.num int 11 r 1..
remote.log.manager.copy.quota.window.size.seconds int 1 r 1..
remote.log.manager.expiration.thread.pool.size int 10 c 1..
remote.log.manager.fetch.max.bytes.per.second long 9223372036854775807 c 1..
remote.log.manager.fetch.quota.window.num int 11 r 1..
remote.log.manager.fetch.quota.window.size.seconds int 1 r 1..
remote.log.manager.task.interval.ms long 30000 r 1..
remote.log.manager.thread.pool.size int 2 r 1..
remote.log.metadata.custom.metadata.max.bytes int 128 r 0..
remote.log.metadata.manager.class.name string * r
remote.log.metadata.manager.class.path string - r
remote.log.metadata.manager.impl.prefix string rlmm.config. r
remote.log.metadata.manager.listener.name string - r
remote.log.reader.max.pending.tasks int 100 r 1..
remote.log.reader.threads int 10 c 1..
remote.log.storage.manager.class.name string - r
remote.log.storage.manager.class.path string - r
remote.log.storage.manager.impl.prefix string rsm.config. r
remote.log.storage.system.enable boolean false r
replica.alter.log.dirs.io.max.bytes.per.second long 9223372036854775807 c 0..
replica.fetch.backoff.ms int 1000 r 0..
replica.fetch.max.bytes int 1048576 r 0..
replica.fetch.min.bytes int 1 r
replica.fetch.response.max.bytes int 10485760 r 0..
replica.fetch.wait.max.ms int 500 r
replica.high.watermark.checkpoint.interval.ms long 5000 r
replica.lag.time.max.ms long 30000 r
replica.selector.class string - r
replica.socket.receive.buffer.bytes int 65536 r
replica.socket.timeout.ms int 30000 r
replication.quota.window.num int 11 r 1..
replication.quota.window.size.seconds int 1 r 1..
request.timeout.ms int 30000 r
sasl.client.callback.handler.class class - r
sasl.enabled.mechanisms list GSSAPI b
sasl.jaas.config password - b
sasl.kerberos.kinit.cmd string /usr/bin/kinit b
sasl.kerberos.min.time.before.relogin long 60000 b
sasl.kerberos.principal.to.local.rules list DEFAULT b
sasl.kerberos.service.name string - b
sasl.kerberos.ticket.renew.jitter double 0.05 b
sasl.kerberos.ticket.renew.window.factor double 0.8 b
sasl.login.callback.handler.class class - r
sasl.login.class class - r
sasl.login.connect.timeout.ms int - r
sasl.login.read.timeout.ms int - r
sasl.login.refresh.buffer.seconds short 300 b
sasl.login.refresh.min.period.seconds short 60 b
sasl.login.refresh.window.factor double 0.8 b
sasl.login.refresh.window.jitter double 0.05 b
sasl.login.retry.backoff.max.ms long 10000 r
sasl.login.retry.backoff.ms long 100 r
sasl.mechanism.controller.protocol string GSSAPI r
sasl.mechanism.inter.broker.protocol string GSSAPI b
sasl.oauthbearer.assertion.algorithm string RS256 r
sasl.oauthbearer.assertion.claim.aud string - r
sasl.oauthbearer.assertion.claim.exp.seconds int 300 r 0..86400
sasl.oauthbearer.assertion.claim.iss string - r
sasl.oauthbearer.assertion.claim.jti.include boolean false r
sasl.oauthbearer.assertion.claim.nbf.seconds int 60 r 0..3600
sasl.oauthbearer.assertion.claim.sub string - r
sasl.oauthbearer.assertion.file string - r
sasl.oauthbearer.assertion.private.key.file string - r
sasl.oauthbearer.assertion.private.key.passphrase password - r
sasl.oauthbearer.assertion.template.file string - r
sasl.oauthbearer.client.credentials.client.id string - r
sasl.oauthbearer.client.credentials.client.secret password - r
sasl.oauthbearer.clock.skew.seconds int 30 r
sasl.oauthbearer.expected.audience list - r
sasl.oauthbearer.expected.issuer string - r
sasl.oauthbearer.jwks.endpoint.refresh.ms long 3600000 r
sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms long 10000 r
sasl.oauthbearer.jwks.endpoint.retry.backoff.ms long 100 r
sasl.oauthbearer.jwks.endpoint.url string - r
sasl.oauthbearer.jwt.retriever.class class * r
sasl.oauthbearer.jwt.validator.class class * r
sasl.oauthbearer.scope string - r
sasl.oauthbearer.scope.claim.name string scope r
sasl.oauthbearer.sub.claim.name string sub r
sasl.oauthbearer.token.endpoint.url string - r
sasl.server.callback.handler.class class - r
sasl.server.max.receive.size int 524288 r
security.inter.broker.protocol string PLAINTEXT r
security.providers string - r
share.coordinator.append.linger.ms int 5 r 0..
share.coordinator.load.buffer.size int 5242880 r 1..
share.coordinator.snapshot.update.records.per.snapshot int 500 r 0..
share.coordinator.state.topic.compression.codec int 0 r
share.coordinator.state.topic.min.isr short 2 r 1..
share.coordinator.state.topic.num.partitions int 50 r 1..
share.coordinator.state.topic.replication.factor short 3 r 1..
share.coordinator.state.topic.segment.bytes int 104857600 r 1..
share.coordinator.threads int 1 r 1..
share.coordinator.write.timeout.ms int 5000 r 1..
share.fetch.purgatory.purge.interval.requests int 1000 r
socket.connection.setup.timeout.max.ms long 30000 r
socket.connection.setup.timeout.ms long 10000 r
socket.listen.backlog.size int 50 r 1..
socket.receive.buffer.bytes int 102400 r
socket.request.max.bytes int 104857600 r 1..
socket.send.buffer.bytes int 102400 r
ssl.allow.dn.changes boolean false r
ssl.allow.san.changes boolean false r
ssl.cipher.suites list "" b
ssl.client.auth string none b
ssl.enabled.protocols list TLSv1.2,TLSv1.3 b
ssl.endpoint.identification.algorithm string https b
ssl.engine.factory.class class - b
ssl.key.password password - b
ssl.keymanager.algorithm string SunX509 b
ssl.keystore.certificate.chain password - b
ssl.keystore.key password - b
ssl.keystore.location string - b
ssl.keystore.password password - b
ssl.keystore.type string JKS b
ssl.principal.mapping.rules string DEFAULT r
ssl.protocol string TLSv1.3 b
ssl.provider string - b
ssl.secure.random.implementation string - b
ssl.trustmanager.algorithm string PKIX b
ssl.truststore.certificates password - b
ssl.truststore.location string - b
ssl.truststore.password password - b
ssl.truststore.type string JKS b
super.users string - r
telemetry.max.bytes int 1048576 r 1..
transaction.abort.timed.out.transaction.cleanup.interval.ms int 10000 r 1..
transaction.max.timeout.ms int 900000 r 1..
transaction.partition.verification.enable boolean true c
transaction.remove.expired.transaction.cleanup.interval.ms int 3600000 r 1..
transaction.state.log.load.buffer.size int 5242880 r 1..
transaction.state.log.min.isr int 2 r 1..
transaction.state.log.num.partitions int 50 r 1..
transaction.state.log.replication.factor short 3 r 1..
transaction.state.log.segment.bytes int 104857600 r 1..
transaction.two.phase.commit.enable boolean false r
transactional.id.expiration.ms int 604800000 r 1..
unclean.leader.election.enable boolean false c
"""

_INTEGER_BOUNDS: Final = {
    "short": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    name: str
    kind: str  # Kafka's type: boolean string int short long double list class password
    default: str | None
    mode: str
    low: float | None = None
    high: float | None = None

    @property
    def dynamic(self) -> bool:
        return self.mode != READ_ONLY

    @property
    def sensitive(self) -> bool:
        return self.kind == "password"

    def parse(self, key: str, raw: str) -> Any:
        """The typed value, or ConfigError with a one-line message naming ``key``."""
        text = raw.strip()
        if self.kind == "boolean":
            if text.lower() not in ("true", "false"):
                raise ConfigError(key, f"expected true or false, got {raw!r}")
            return text.lower() == "true"
        if self.kind in _INTEGER_BOUNDS:
            try:
                value: float = int(text)
            except ValueError:
                raise ConfigError(key, f"expected an integer, got {raw!r}") from None
            low, high = _INTEGER_BOUNDS[self.kind]
            if not low <= value <= high:
                raise ConfigError(key, f"{value} does not fit a {self.kind}")
        elif self.kind == "double":
            try:
                value = float(text)
            except ValueError:
                raise ConfigError(key, f"expected a number, got {raw!r}") from None
        else:
            return text
        if (self.low is not None and value < self.low) or (
            self.high is not None and value > self.high
        ):
            bounds = f"[{_show(self.low)}, {_show(self.high)}]"
            raise ConfigError(key, f"{_show(value)} is outside {bounds}")
        return value


def _show(value: float | None) -> str:
    if value is None:
        return "..."
    return str(int(value)) if float(value).is_integer() else str(value)


def _bound(text: str) -> float | None:
    return float(text) if text else None


def _load(table: str) -> dict[str, CatalogueEntry]:
    entries = {}
    for line in table.strip().splitlines():
        name, kind, default, mode, *limits = line.split()
        if default == "*":
            value: str | None = _LONG_DEFAULTS[name]
        elif default == "-":
            value = None
        elif default == '""':
            value = ""
        else:
            value = default.replace("o.a.k.", "org.apache.kafka.")
        low, _, high = (limits[0] if limits else "").partition("..")
        entries[name] = CatalogueEntry(name, kind, value, _MODES[mode], _bound(low), _bound(high))
    return entries


CATALOGUE: Final[dict[str, CatalogueEntry]] = _load(_TABLE)


def _definition(entry: CatalogueEntry) -> BrokerConfigDef:
    return BrokerConfigDef(entry.name, entry.parse, entry.default, dynamic=entry.dynamic)


# Kafka broker properties odradek accepts but does not use, in the table's order.
INERT_CONFIGS: Final[tuple[BrokerConfigDef, ...]] = tuple(
    _definition(e) for name, e in CATALOGUE.items() if name not in CONFIGS_BY_NAME
)
INERT_BY_NAME: Final = {d.name: d for d in INERT_CONFIGS}
ALL_BROKER_CONFIGS: Final = (*CONFIGS_BY_NAME.values(), *INERT_CONFIGS)
_LISTENER_NAME = re.compile(r"^listener\.name\.[a-z0-9_-]+\.(?P<rest>.+)$")


def listener_base(name: str) -> str | None:
    """For ``listener.name.<listener>[.<sasl mechanism>].<config>``, the config's name."""
    match = _LISTENER_NAME.match(name)
    if match is None:
        return None
    rest = match["rest"]
    if rest in CATALOGUE:
        return rest
    _, _, without_mechanism = rest.partition(".")
    return without_mechanism if without_mechanism in CATALOGUE else None


def definition(name: str) -> BrokerConfigDef | None:
    """The definition of any broker property name Kafka knows, or None."""
    found = CONFIGS_BY_NAME.get(name) or INERT_BY_NAME.get(name)
    if found is not None:
        return found
    prefixed = listener_definitions([name])
    return prefixed[0] if prefixed else None


def listener_definitions(names: Iterable[str]) -> list[BrokerConfigDef]:
    """Definitions of the listener-prefixed names among ``names``, sorted."""
    found = []
    for name in sorted(names):
        base = listener_base(name)
        if base is not None:
            found.append(BrokerConfigDef(name, CATALOGUE[base].parse, None, dynamic=True))
    return found


def is_inert(name: str) -> bool:
    """A Kafka broker property odradek accepts and ignores."""
    return name not in CONFIGS_BY_NAME and definition(name) is not None


def is_sensitive(name: str) -> bool:
    entry = CATALOGUE.get(listener_base(name) or name)
    return entry is not None and entry.sensitive


def update_mode(name: str) -> str | None:
    """Kafka's update mode of a property; listener-prefixed ones are per broker."""
    if listener_base(name) is not None:
        return PER_BROKER
    entry = CATALOGUE.get(name)
    return entry.mode if entry is not None else None


def kafka_type(name: str) -> str | None:
    entry = CATALOGUE.get(listener_base(name) or name)
    return entry.kind if entry is not None else None
