"""One-line documentation of broker properties, for DescribeConfigs ``include_documentation``.

Topic configs carry their doc in ``storage/log_config.py``; a broker ``log.*``
property that provides a topic config's default is documented from that entry
(``config_describe.broker_documentation``), so only the other properties are here.
"""

from __future__ import annotations

from typing import Final

BROKER_DOCS: Final[dict[str, str]] = {
    "log.cleaner.enable": "run the log cleaner, which compacts cleanup.policy=compact topics",
    "log.cleaner.threads": "logs cleaned at the same time (each on a worker thread)",
    "log.cleaner.dedupe.buffer.size": "memory for the cleaners' key-to-offset maps, all "
    "threads together (about 120 bytes per key in odradek, 24 in Kafka)",
    "log.cleaner.io.buffer.load.factor": "how full a cleaner's key map may get",
    "log.cleaner.io.max.bytes.per.second": "most bytes per second the cleaners read and write",
    "log.cleaner.backoff.ms": "how long a cleaner sleeps when no log needs cleaning",
    "offsets.topic.compression.codec": "codec of __consumer_offsets batches (0 none, 1 gzip, "
    "2 snappy, 3 lz4, 4 zstd)",
    "remote.log.storage.system.enable": "allow tiered storage (KIP-405): topics may then set "
    "remote.storage.enable",
    "remote.log.manager.task.interval.ms": "how often rolled segments of tiered topics are "
    "copied to remote storage and expired remote segments deleted",
    "remote.log.reader.threads": "threads that read fetches below the local log from remote "
    "storage",
    "remote.log.storage.manager.class.name": "the remote storage backend: filesystem, s3 or "
    "package.module:Class",
    "remote.log.storage.manager.impl.prefix": "prefix of the properties passed to the remote "
    "storage backend (without the prefix)",
    "remote.log.metadata.manager.impl.prefix": "prefix of the properties passed to the remote "
    "log metadata manager",
    "remote.log.metadata.manager.class.name": "where remote segment metadata lives: topic "
    "(__remote_log_metadata, shared by all replicas; Kafka's TopicBasedRemoteLogMetadataManager "
    "names it too) or file (one broker's own files: single node only)",
    "remote.log.index.file.cache.total.size.bytes": "disk space for remote segments' indexes "
    "cached under remote-log-index-cache/ in the first log dir",
    "metrics.listener": "http://HOST:PORT where the broker serves Prometheus /metrics "
    "(port 0: any free port, named on the ready line); unset: no endpoint",
    "node.id": "the id of this node in the cluster",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer to "
    "authorize every request with the cluster's ACLs; empty: everything is allowed",
    "super.users": "principals allowed everything, separated by semicolons (User:admin;User:ops)",
    "allow.everyone.if.no.acl.found": "allow a request on a resource no ACL matches "
    "(default false: only super users may)",
    "broker.id": "legacy name of node.id; must match it when both are set",
    "process.roles": "broker, controller, or both (combined mode)",
    "listeners": "NAME://HOST:PORT addresses to accept connections on",
    "advertised.listeners": "addresses given to clients, when they differ from listeners",
    "controller.listener.names": "listeners that serve the controller quorum, not clients",
    "controller.quorum.voters": "id@host:port of each controller voter",
    "controller.quorum.bootstrap.servers": "host:port of controllers to discover the quorum",
    "inter.broker.listener.name": "listener brokers use to talk to each other",
    "listener.security.protocol.map": "listener name to security protocol",
    "log.dirs": "directories that hold partition logs",
    "log.dir": "the log directory when log.dirs is not set",
    "metadata.log.dir": "the log dir that holds __cluster_metadata (default: the first log dir)",
    "controller.quorum.election.timeout.ms": "a voter that hears no leader this long runs "
    "for election",
    "controller.quorum.fetch.timeout.ms": "a follower that fetches nothing this long looks "
    "for a new leader",
    "controller.quorum.election.backoff.max.ms": "most a candidate waits before its next election",
    "controller.quorum.request.timeout.ms": "how long a quorum request waits for its answer",
    "controller.quorum.retry.backoff.ms": "wait before retrying a failed quorum request",
    "metadata.log.max.record.bytes.between.snapshots": "metadata bytes appended before the "
    "next snapshot",
    "metadata.log.max.snapshot.interval.ms": "most time between metadata snapshots; 0 = never "
    "by time",
    "broker.session.timeout.ms": "a broker that sends no heartbeat this long is fenced",
    "broker.heartbeat.interval.ms": "how often a broker heartbeats to the controller",
    "broker.rack": "the rack of this broker, for rack-aware replica placement",
    "leader.replication.throttled.rate": "bytes/s this broker sends to followers of the "
    "replicas in leader.replication.throttled.replicas (KIP-73)",
    "follower.replication.throttled.rate": "bytes/s this broker fetches for the replicas in "
    "follower.replication.throttled.replicas (KIP-73)",
    "replica.alter.log.dirs.io.max.bytes.per.second": "bytes/s of copies between this "
    "broker's log dirs (AlterReplicaLogDirs)",
    "replication.quota.window.num": "windows the replication rates are measured over",
    "replication.quota.window.size.seconds": "length of each replication quota window",
    "quota.window.num": "windows client quotas (byte rates, request time) are measured over",
    "quota.window.size.seconds": "length of each client quota window",
    "num.partitions": "partition count of topics created without one",
    "default.replication.factor": "replication factor of topics created without one",
    "auto.create.topics.enable": "create a topic when a client asks for metadata of it",
    "delete.topic.enable": "allow DeleteTopics",
    "socket.request.max.bytes": "largest request frame accepted",
    "connections.max.idle.ms": "close connections idle for this long",
    "max.connections": "connections the broker holds at once; at the limit it stops accepting "
    "until one closes (also capped by the open-file limit minus a reserve for log files)",
    "max.connections.per.ip": "connections one address may hold; more are closed at once",
    "max.connections.per.ip.overrides": "per-address limits, host:count,host:count",
    "queued.max.request.bytes": "bytes of requests read and not yet handled, across all "
    "connections, before sockets are no longer read; <= 0 = unbounded",
    "queued.max.requests": "requests queued per connection before reading pauses",
    "num.network.threads": "accepted for compatibility; one event loop serves all sockets",
    "num.io.threads": "accepted for compatibility; one event loop serves all requests",
    "num.recovery.threads.per.data.dir": "threads recovering logs at start-up",
    "socket.send.buffer.bytes": "SO_SNDBUF of client sockets; -1 = OS default",
    "socket.receive.buffer.bytes": "SO_RCVBUF of client sockets; -1 = OS default",
    "offsets.topic.num.partitions": "partitions of __consumer_offsets",
    "offsets.topic.replication.factor": "replication factor of __consumer_offsets",
    "transaction.state.log.num.partitions": "partitions of __transaction_state",
    "transaction.state.log.replication.factor": "replication factor of __transaction_state",
    "transaction.state.log.min.isr": "min.insync.replicas of __transaction_state",
    "transaction.state.log.segment.bytes": "segment.bytes of __transaction_state",
    "transaction.max.timeout.ms": "largest transaction.timeout.ms a producer may ask for",
    "transactional.id.expiration.ms": "an idle transactional id is forgotten after this",
    "transaction.partition.verification.enable": (
        "a partition leader checks with the coordinator that a transactional write's "
        "partition is in the transaction (KIP-890 part 1)"
    ),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "how often the coordinator aborts transactions past their timeout"
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "how often the coordinator removes expired transactional ids"
    ),
    "group.initial.rebalance.delay.ms": "wait before a new group's first rebalance",
    "group.min.session.timeout.ms": "smallest session timeout a group member may ask for",
    "group.max.session.timeout.ms": "largest session timeout a group member may ask for",
    "group.max.size": "most members a consumer group may have",
    "group.consumer.session.timeout.ms": "KIP-848 groups: a member silent this long is removed",
    "group.consumer.heartbeat.interval.ms": "KIP-848 groups: how often members heartbeat",
    "group.consumer.min.session.timeout.ms": "smallest consumer.session.timeout.ms of a group",
    "group.consumer.max.session.timeout.ms": "largest consumer.session.timeout.ms of a group",
    "group.consumer.min.heartbeat.interval.ms": "least consumer.heartbeat.interval.ms of a group",
    "group.consumer.max.heartbeat.interval.ms": "most consumer.heartbeat.interval.ms of a group",
    "group.consumer.assignors": "KIP-848 server-side assignors (uniform, range); first = default",
    "group.consumer.max.size": "most members a KIP-848 consumer group may have",
    "offsets.topic.segment.bytes": "segment size of __consumer_offsets",
    "offset.metadata.max.bytes": "largest metadata string of a committed offset",
    "offsets.retention.minutes": "how long offsets of an empty group are kept",
    "offsets.retention.check.interval.ms": "how often expired offsets are removed",
    "producer.id.expiration.ms": "forget an idle producer id after this long",
    "log.retention.check.interval.ms": "how often retention deletes old segments",
    "log.flush.scheduler.interval.ms": "how often logs are checked for a time-based flush",
    "log.flush.offset.checkpoint.interval.ms": "how often recovery points are checkpointed",
    "replica.high.watermark.checkpoint.interval.ms": "how often high watermarks are checkpointed",
    "replica.fetch.wait.max.ms": "max wait of a follower's fetch",
    "num.replica.fetchers": "fetchers (connections) per source broker a follower copies with",
    "replica.fetch.max.bytes": "bytes a follower's fetch asks of each partition",
    "replica.fetch.response.max.bytes": "bytes a follower's fetch asks in all",
    "replica.fetch.min.bytes": "bytes a leader gathers before answering a follower's fetch",
    "replica.fetch.backoff.ms": "a follower's wait before refetching a partition after an error",
    "replica.socket.timeout.ms": "a follower's fetch timeout beyond its max wait",
    "replica.lag.time.max.ms": "a follower this far behind leaves the ISR",
    "replica.selector.class": "which replica a consumer with client.rack reads from "
    "(RackAwareReplicaSelector: one in its rack; unset: the leader)",
    "unclean.leader.election.enable": "allow an out-of-sync replica to become leader",
    "auto.leader.rebalance.enable": "move leaders back to preferred replicas periodically",
    "leader.imbalance.check.interval.seconds": "how often the controller checks leader balance",
    # SASL (server/sasl_settings.py); each also per listener (listener.name.<l>.)
    "sasl.enabled.mechanisms": "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, "
    "SCRAM-SHA-512, OAUTHBEARER (GSSAPI is not implemented)",
    "sasl.jaas.config": "JAAS login module line; PLAIN's users are its user_<name> options, "
    "a node's own login its username/password options",
    "sasl.mechanism.inter.broker.protocol": "the mechanism brokers log in to each other with "
    "(PLAIN or SCRAM) on a SASL inter-broker listener",
    "sasl.mechanism.controller.protocol": "the mechanism nodes log in to the controllers with "
    "(PLAIN or SCRAM) on a SASL controller listener",
    "sasl.server.max.receive.size": "largest SASL token a client may send, in bytes",
    "connections.max.reauth.ms": "SASL session lifetime (KIP-368): a connection must "
    "re-authenticate within it or is closed; 0: no limit",
    "connection.failed.authentication.delay.ms": "how long a failed SASL authentication waits "
    "before its answer (and the close)",
    # OAUTHBEARER (server/oauth_settings.py)
    "sasl.server.callback.handler.class": "OAUTHBEARER's validator: Kafka's "
    "OAuthBearerValidatorCallbackHandler (signed tokens, JWKS) or the unsecured one",
    "sasl.oauthbearer.jwks.endpoint.url": "the identity provider's JWKS (https or file URL) "
    "signed OAUTHBEARER tokens are checked against",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": "how often the JWKS is fetched again",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "first wait after a failed JWKS fetch",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "longest wait between JWKS fetches "
    "that fail",
    "sasl.oauthbearer.expected.audience": "audiences a token's aud must name one of (empty: "
    "not checked)",
    "sasl.oauthbearer.expected.issuer": "the iss a token must carry (unset: not checked)",
    "sasl.oauthbearer.sub.claim.name": "the claim naming the principal",
    "sasl.oauthbearer.scope.claim.name": "the claim listing the token's scopes",
    "sasl.oauthbearer.clock.skew.seconds": "clock difference allowed when checking exp, iat, nbf",
    # TLS (network/tls.py); each also per listener (listener.name.<l>.)
    "ssl.keystore.location": "the listener's key and certificate chain (PEM file or PKCS12)",
    "ssl.keystore.type": "PEM or PKCS12 (JKS is not readable: convert it to PKCS12)",
    "ssl.keystore.password": "the PKCS12 keystore's password",
    "ssl.key.password": "the password of an encrypted private key",
    "ssl.truststore.location": "the CAs client certificates (mTLS) and peers are checked against",
    "ssl.truststore.type": "PEM or PKCS12",
    "ssl.truststore.password": "the PKCS12 truststore's password",
    "ssl.client.auth": "none, requested or required: whether clients present a certificate",
    "ssl.enabled.protocols": "TLS versions a listener accepts (TLSv1.2, TLSv1.3)",
    "ssl.cipher.suites": "TLS 1.2 cipher suites by IANA name (empty: OpenSSL's defaults)",
    "ssl.principal.mapping.rules": "RULE:pattern/replacement/[LU] and DEFAULT: a client "
    "certificate's DN to the principal's name",
    "ssl.endpoint.identification.algorithm": "https: a node checks its peers' host names; "
    "empty: it does not",
}
