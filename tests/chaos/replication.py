"""One replicated chaos run: three KRaft nodes behind proxies, a topic with RF=3 and
``min.insync.replicas=2``, faults on leaders, processes and links, then the checks.

``run_replication(config, workdir)``:
1. starts a ``NetProxy`` (tests/support/netproxy.py) with two proxies per node (its
   broker and its controller listener), then three combined nodes that listen on their
   own ports but advertise the proxies (``advertised.listeners``) and name the
   controllers' proxies in ``controller.quorum.voters``: Raft, heartbeats, forwarding
   and replica fetches between nodes all cross a proxy, so a link can be cut;
2. creates the topic (RF=3, ``min.insync.replicas=2``) and starts an idempotent acks=all
   confluent-kafka producer (unique values; every delivery report kept: acknowledged,
   failed, or none = in doubt), a two-member committing group (manual synchronous
   commits after each batch, every record handed kept by offset) and an observer of
   committed offsets and high watermarks;
3. applies the seeded nemesis of the mix (``nemesis.py``), one fault at a time, each
   undone before the next;
4. with everything healed, produces ``tail_s`` more, waits for every delivery report,
   for the ISR to be whole and the replicas' logs to stop changing, and for the group
   to commit up to every high watermark; reads the topic back;
5. stops the nodes (SIGTERM) and reads each replica's batches from its segment files
   (``read_replica``); runs ``replica_checks.check_replication``.

``ReplicationResult.replication_active`` says whether followers fetched at all; the
short test in ``make test`` reports a run without it as the missing feature rather
than a failure of the checks (see test_chaos.py).
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.chaos import nemesis
from tests.chaos.checks import Report
from tests.chaos.cluster import Cluster
from tests.chaos.history import OffsetSet, ReadLog
from tests.chaos.nemesis import NemesisOutcome, NemesisPlan
from tests.chaos.replica_checks import (
    BatchDigest,
    ReplicationHistory,
    check_replication,
    replicas_identical,
    replication_active,
)
from tests.chaos.workload import (
    QUIET,
    GroupMember,
    Observer,
    ProducerRunner,
    create_topic_retrying,
    read_log,
    watermarks,
)
from tests.support.kraft import quorum_behind_proxies
from tests.support.netproxy import NetProxy, Proxy

TOPIC = "chaos-replicated"
GROUP = "chaos-replicated-group"
MEMBERS = 2
# Kafka's names; faster than the defaults so a two-minute run sees fencing, ISR
# shrinks and elections several times (a cut longer than the session is fenced).
PROPERTIES = {
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "1000",
    "replica.lag.time.max.ms": "8000",
    "offsets.topic.replication.factor": "3",
}
BATCH_HEADER = struct.Struct(">qii")  # base offset, batch length, partition leader epoch
LAST_OFFSET_DELTA = struct.Struct(">i")
LAST_OFFSET_DELTA_AT = 23
BATCH_OVERHEAD = 61  # bytes of a v2 batch header
STABLE_POLLS = 3
STUCK_S = 10.0


@dataclass(frozen=True)
class ReplicationConfig:
    seed: int
    mix: str = "mixed"
    duration_s: float = 120.0
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    rate_per_s: int = 500
    value_bytes: int = 200
    tail_s: float = 3.0
    drain_timeout_s: float = 120.0
    converge_timeout_s: float = 60.0
    plan: NemesisPlan | None = None  # default: NemesisPlan(duration_s)
    properties: dict[str, str] = field(default_factory=dict)  # beside PROPERTIES

    @property
    def nemesis_plan(self) -> NemesisPlan:
        return self.plan or NemesisPlan(self.duration_s)


@dataclass
class ReplicationResult:
    config: ReplicationConfig
    workdir: Path
    outcomes: list[NemesisOutcome] = field(default_factory=list)
    report: Report | None = None
    acked: int = 0
    sent: int = 0
    failed: int = 0
    reads: int = 0
    unflushed: int = 0
    client_errors: Counter[str] = field(default_factory=Counter)
    producer_fatal: str = ""
    runner_crashes: list[str] = field(default_factory=list)
    broker_tracebacks: int = 0
    drained: bool = False
    isr_whole: bool = False
    replicas_settled: bool = False
    replication_active: bool = False
    replicas_identical: bool = False
    net: Counter[str] = field(default_factory=Counter)
    duration_s: float = 0.0
    error: str = ""

    @property
    def inconsistent(self) -> int:
        """Violations other than losses and duplicates (reads, replicas, commits)."""
        if self.report is None:
            return 0
        counts = self.report.counts
        return sum(n for kind, n in counts.items() if kind not in ("lost", "duplicate"))

    @property
    def passed(self) -> bool:
        return (
            not self.error
            and self.report is not None
            and self.report.ok
            and not self.producer_fatal
            and self.unflushed == 0
            and self.drained
            and self.broker_tracebacks == 0
            and not self.runner_crashes
            and all(not outcome.error for outcome in self.outcomes)
        )


# -- the cluster behind proxies ----------------------------------------------------------


def proxied_cluster(
    workdir: Path, net: NetProxy, properties: dict[str, str]
) -> tuple[Cluster, dict[int, Proxy]]:
    """Three formatted combined nodes whose links to each other cross ``net``: returns
    the cluster and each node's broker proxy (the addresses clients bootstrap from)."""
    quorum, brokers = quorum_behind_proxies(workdir, net, {**PROPERTIES, **properties})
    return Cluster.of_quorum(quorum), brokers


def read_replica(directory: Path) -> list[BatchDigest]:
    """A stopped replica's batches from its segment files, in offset order; a torn or
    zero-filled tail ends the read."""
    found = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        position = 0
        while position + BATCH_OVERHEAD <= len(data):
            base, length, epoch = BATCH_HEADER.unpack_from(data, position)
            end = position + 12 + length
            if length < BATCH_OVERHEAD - 12 or end > len(data):
                break
            (delta,) = LAST_OFFSET_DELTA.unpack_from(data, position + LAST_OFFSET_DELTA_AT)
            digest = hashlib.blake2b(data[position:end], digest_size=16).digest()
            found.append(BatchDigest(base, base + delta, epoch, digest))
            position = end
    return found


def log_bytes(cluster: Cluster, partitions: int) -> dict[int, tuple[int, ...]]:
    """Per partition, each node's segment bytes now (how far each replica got)."""
    return {
        p: tuple(
            sum(f.stat().st_size for f in (node.data_dir / f"{TOPIC}-{p}").glob("*.log"))
            for node in cluster.nodes
        )
        for p in range(partitions)
    }


class Leaders:
    """Who leads each partition, as Metadata from the (never partitioned) test process
    says; node ids mapped to the cluster's node indexes."""

    def __init__(self, bootstrap: str, cluster: Cluster) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
        self.index = {node.node_id: i for i, node in enumerate(cluster.nodes)}

    def describe(self, timeout_s: float = 5.0) -> dict[int, tuple[int, set[int], set[int]]]:
        """partition -> (leader id, replicas, isr)."""
        try:
            topic = self.admin.list_topics(TOPIC, timeout=timeout_s).topics.get(TOPIC)
        except Exception:
            return {}
        if topic is None or topic.error is not None:
            return {}
        return {
            p: (meta.leader, set(meta.replicas), set(meta.isrs))
            for p, meta in topic.partitions.items()
        }

    def leader_of(self, partition: int) -> int | None:
        described = self.describe().get(partition)
        return self.index.get(described[0]) if described is not None else None

    def isr_whole(self, partitions: int) -> bool:
        described = self.describe()
        return len(described) == partitions and all(
            leader >= 0 and replicas == isr for leader, replicas, isr in described.values()
        )


def wait_settled(
    cluster: Cluster, leaders: Leaders, partitions: int, timeout_s: float
) -> tuple[bool, bool]:
    """Wait until every partition's ISR is all its replicas and the replicas' logs are
    the same size and stay so; (ISR whole, logs settled) at the end. Logs that differ
    but have not changed for ``STUCK_S`` end the wait early: a replica that stopped
    fetching will not catch up by waiting (the checks report it)."""
    deadline = time.monotonic() + timeout_s
    whole = settled = False
    stable = 0
    last: dict[int, tuple[int, ...]] = {}
    changed = time.monotonic()
    while time.monotonic() < deadline:
        whole = leaders.isr_whole(partitions)
        sizes = log_bytes(cluster, partitions)
        same = all(len(set(each)) == 1 for each in sizes.values())
        if sizes != last:
            changed = time.monotonic()
        stable = stable + 1 if same and sizes == last else 0
        last = sizes
        settled = stable >= STABLE_POLLS
        if (whole and settled) or time.monotonic() - changed > STUCK_S:
            break
        time.sleep(0.5)
    return whole, settled


def _drain(observer: Observer, high: dict[int, int], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        latest = observer.latest_committed()
        if all(latest.get(p, -1) >= offset for p, offset in high.items()):
            return True
        time.sleep(0.5)
    return False


# -- the run -------------------------------------------------------------------------------


def run_replication(
    config: ReplicationConfig, workdir: Path, progress: Callable[[str], None] | None = None
) -> ReplicationResult:
    result = ReplicationResult(config, workdir)
    began = time.monotonic()
    cluster: Cluster | None = None
    net = NetProxy(lambda: cluster.pids() if cluster is not None else {})
    producer: ProducerRunner | None = None
    members: list[GroupMember] = []
    observer: Observer | None = None
    consumed = {p: OffsetSet() for p in range(config.partitions)}
    reads = ReadLog()
    commit_acks: list[tuple[int, int]] = []
    try:
        cluster, proxies = proxied_cluster(workdir, net, config.properties)
        bootstrap = ",".join(proxy.address for proxy in proxies.values())
        schedule = nemesis.schedule(
            config.seed, config.nemesis_plan, config.mix, len(cluster.nodes), config.partitions
        )
        cluster.start()
        create_topic_retrying(
            bootstrap,
            TOPIC,
            config.partitions,
            replication_factor=config.replication_factor,
            config={"min.insync.replicas": str(config.min_insync_replicas)},
        )
        leaders = Leaders(bootstrap, cluster)
        producer = ProducerRunner(
            bootstrap, TOPIC, config.partitions, config.rate_per_s, config.value_bytes
        )
        members = [
            GroupMember(
                f"member-{i}",
                bootstrap,
                TOPIC,
                GROUP,
                consumed,
                commit_acks,
                reads=reads,
                value_bytes=config.value_bytes,
            )
            for i in range(MEMBERS)
        ]
        observer = Observer(bootstrap, TOPIC, GROUP, config.partitions)
        workload_began = time.monotonic()
        for thread in (producer, *members, observer):
            thread.start()
        for cycle, fault in enumerate(schedule, 1):
            _sleep_until(workload_began + fault.at_s)
            outcome = nemesis.apply(
                fault, cluster, net, leaders.leader_of, time.monotonic() - workload_began
            )
            result.outcomes.append(outcome)
            if progress is not None:
                progress(
                    f"[{cycle:>{len(str(len(schedule)))}}/{len(schedule)}] "
                    f"{nemesis.describe(outcome, cluster)}; {len(producer.acked):,} acked"
                )
        _sleep_until(workload_began + config.duration_s - config.tail_s)
        net.heal()  # nothing is cut or down now; said again for a fault that raised
        time.sleep(config.tail_s)
        producer.stop(config.drain_timeout_s)
        result.unflushed = producer.unflushed
        result.isr_whole, result.replicas_settled = wait_settled(
            cluster, leaders, config.partitions, config.converge_timeout_s
        )
        marks = watermarks(bootstrap, TOPIC, config.partitions)
        high = {partition: offset for partition, (_, offset) in marks.items()}
        result.drained = _drain(observer, high, config.drain_timeout_s)
        for member in members:
            member.stop(30)
        observer.stop(30)
        observer.sample()
        log = read_log(bootstrap, TOPIC, config.partitions, config.value_bytes, 120)
        cluster.close()
        replicas = {
            p: {node.name: read_replica(node.data_dir / f"{TOPIC}-{p}") for node in cluster.nodes}
            for p in range(config.partitions)
        }
        result.replication_active = replication_active(replicas)
        result.replicas_identical = replicas_identical(replicas)
        history = ReplicationHistory(
            acked=producer.acked,
            failed=producer.failed,
            sent=producer.acked.sent_count,
            log=log,
            reads=reads.seqs,
            read_conflicts=reads.conflicts,
            committed=observer.committed,
            commit_acks=commit_acks,
            final_committed=observer.latest_committed(),
            high_watermarks=observer.high_watermarks,
            replicas=replicas,
        )
        result.report = check_replication(history)
    except Exception as exc:  # a node that did not come back, a client that gave up
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for member in members:
            member.stopping.set()
        if producer is not None:
            producer.stopping.set()
            producer.abandon.set()
        if observer is not None:
            observer.stopping.set()
        for runner in (producer, *members, observer):
            if runner is not None and runner.ident is not None:
                runner.join(30)
        if cluster is not None:
            cluster.close()
        net.close()
        if observer is not None:
            observer.close()
        if producer is not None:
            result.acked = len(producer.acked)
            result.sent = producer.acked.sent_count
            result.failed = len(producer.failed)
            result.producer_fatal = producer.fatal
            result.client_errors.update(producer.errors)
        for member in members:
            result.client_errors.update(member.errors)
        if observer is not None:
            result.client_errors.update(observer.errors)
        result.reads = len(reads)
        result.runner_crashes = [
            runner.crash for runner in (producer, *members, observer) if runner and runner.crash
        ]
        if cluster is not None:
            result.broker_tracebacks = sum(n.log().count("Traceback") for n in cluster.nodes)
        result.net = net.stats
        result.duration_s = time.monotonic() - began
    return result


def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)
