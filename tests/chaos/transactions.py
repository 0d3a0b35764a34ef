"""One transactional chaos run: three KRaft nodes behind proxies, transactional producers
committing and aborting, a read_committed reader, faults, then ``txn_checks``.

``run_transactions(config, workdir)``:
1. starts the three combined nodes behind a ``NetProxy`` exactly as the replicated
   run does (``replication.proxied_cluster``: every link between nodes crosses a
   proxy), with ``__transaction_state`` replicated three ways
   (``transaction.state.log.replication.factor``=3, ``.min.isr``=2);
2. creates the topic (RF=3, ``min.insync.replicas=2``) and a one-partition source
   topic whose offsets the producers send with their transactions, then starts
   ``config.producers`` transactional producers (``txn_workload.TransactionalRunner``:
   seeded sizes, about ``abort_ratio`` of the transactions aborted on purpose, every
   value naming its transaction and intended outcome, each producer's own group) and
   a read_committed reader of the whole topic;
3. applies the seeded nemesis of the mix (``nemesis.py``), one fault at a time; its
   targets are partition leaders, seeded nodes, and (drawn as one more "partition")
   the transaction coordinator of the first producer's id, as FindCoordinator names it;
4. with everything healed, lets the producers run ``tail_s`` more and stops them
   (each finishes its transaction; one left in doubt is fenced by a new producer),
   waits until no transaction is open (LSO = high watermark everywhere), and reads the
   topic back under both isolation levels and each group's offset;
5. runs ``txn_checks.check_transactions``: no aborted record under read_committed, no
   committed transaction partly visible, every acknowledged commit fully visible,
   every end call answered, the offsets following the transactions.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from tests.chaos import nemesis
from tests.chaos.checks import Report
from tests.chaos.cluster import Cluster
from tests.chaos.nemesis import NemesisOutcome, NemesisPlan
from tests.chaos.replication import Leaders, proxied_cluster
from tests.chaos.txn_checks import (
    ABANDONED,
    ABORTED,
    COMMITTED,
    FAILED,
    TxnHistory,
    TxnOutcome,
    decode_value,
)
from tests.chaos.txn_checks import check_transactions as check
from tests.chaos.txn_workload import (
    ReadCommittedReader,
    TransactionalRunner,
    group_offsets,
    read_topic,
    wait_stable,
)
from tests.chaos.workload import create_topic_retrying
from tests.groups.wire import find_coordinator
from tests.support.netproxy import NetProxy
from tests.support.wire import WireClient

TOPIC = "chaos-txn"
SOURCE = "chaos-txn-source"
PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


class TopicLeaders(Leaders):
    """``replication.Leaders`` of another topic than the replicated run's."""

    def __init__(self, bootstrap: str, cluster: Cluster, topic: str) -> None:
        super().__init__(bootstrap, cluster)
        self.topic = topic

    def describe(self, timeout_s: float = 5.0) -> dict[int, tuple[int, set[int], set[int]]]:
        try:
            found = self.admin.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
        except Exception:
            return {}
        if found is None or found.error is not None:
            return {}
        return {
            p: (meta.leader, set(meta.replicas), set(meta.isrs))
            for p, meta in found.partitions.items()
        }


@dataclass(frozen=True)
class TxnConfig:
    seed: int
    mix: str = "mixed"
    duration_s: float = 120.0
    partitions: int = 3
    producers: int = 3
    abort_ratio: float = 0.3
    records: tuple[int, int] = (2, 10)
    gap_s: float = 0.02  # between a producer's transactions
    tail_s: float = 3.0
    settle_timeout_s: float = 90.0
    plan: NemesisPlan | None = None  # default: NemesisPlan(duration_s)
    properties: dict[str, str] = field(default_factory=dict)  # beside PROPERTIES

    @property
    def nemesis_plan(self) -> NemesisPlan:
        return self.plan or NemesisPlan(self.duration_s)


@dataclass
class TxnResult:
    config: TxnConfig
    workdir: Path
    outcomes: list[NemesisOutcome] = field(default_factory=list)
    report: Report | None = None
    transactions: dict[tuple[str, int], TxnOutcome] = field(default_factory=dict)
    visible: int = 0  # transactions visible to read_committed in the end
    reads: int = 0  # records the read_committed reader was handed during the run
    on_coordinator: int = 0  # faults on the transaction coordinator's node
    client_hangs: int = 0  # send_offsets_to_transaction calls given up (librdkafka#5456)
    client_errors: Counter[str] = field(default_factory=Counter)
    runner_crashes: list[str] = field(default_factory=list)
    broker_tracebacks: int = 0
    duration_s: float = 0.0
    error: str = ""

    def count(self, result: str, commit: bool | None = None) -> int:
        return sum(
            o.result == result and (commit is None or o.commit == commit)
            for o in self.transactions.values()
        )

    @property
    def passed(self) -> bool:
        return (
            not self.error
            and self.report is not None
            and self.report.ok
            and self.count(COMMITTED) > 0
            and self.broker_tracebacks == 0
            and not self.runner_crashes
            and all(not outcome.error for outcome in self.outcomes)
        )


def coordinator_index(addresses: list[str], cluster: Cluster, txn_id: str) -> int | None:
    """The node index of ``txn_id``'s transaction coordinator (None: none answered)."""
    index = {node.node_id: i for i, node in enumerate(cluster.nodes)}
    for address in addresses:
        try:
            with WireClient(address, timeout_s=5) as client:
                ((_, node, _, _, error),) = find_coordinator(client, 4, [txn_id], key_type=1)
        except OSError:
            continue
        if error is ErrorCode.none:
            return index.get(int(node))
    return None


def run_transactions(
    config: TxnConfig, workdir: Path, progress: Callable[[str], None] | None = None
) -> TxnResult:
    result = TxnResult(config, workdir)
    began = time.monotonic()
    cluster: Cluster | None = None
    net = NetProxy(lambda: cluster.pids() if cluster is not None else {})
    runners: list[TransactionalRunner] = []
    reader: ReadCommittedReader | None = None
    try:
        cluster, proxies = proxied_cluster(workdir, net, {**PROPERTIES, **config.properties})
        addresses = [proxy.address for proxy in proxies.values()]
        bootstrap = ",".join(addresses)
        # one more "partition" than the topic has: the transaction coordinator
        schedule = nemesis.schedule(
            config.seed, config.nemesis_plan, config.mix, len(cluster.nodes), config.partitions + 1
        )
        cluster.start()
        create_topic_retrying(
            bootstrap,
            TOPIC,
            config.partitions,
            replication_factor=3,
            config={"min.insync.replicas": "2"},
        )
        create_topic_retrying(bootstrap, SOURCE, 1, replication_factor=3)
        leaders = TopicLeaders(bootstrap, cluster, TOPIC)
        txn_ids = [f"chaos-txn-{i}" for i in range(config.producers)]
        groups = {txn_id: f"{txn_id}-group" for txn_id in txn_ids}

        def target(partition: int) -> int | None:
            assert cluster is not None
            if partition >= config.partitions:
                return coordinator_index(addresses, cluster, txn_ids[0])
            return leaders.leader_of(partition)

        runners = [
            TransactionalRunner(
                txn_id,
                bootstrap,
                TOPIC,
                config.partitions,
                seed=config.seed * 1000 + i,
                records=config.records,
                abort_ratio=config.abort_ratio,
                source=SOURCE,
                group=groups[txn_id],
                gap_s=config.gap_s,
            )
            for i, txn_id in enumerate(txn_ids)
        ]
        reader = ReadCommittedReader(bootstrap, TOPIC, config.partitions)
        workload_began = time.monotonic()
        for thread in (reader, *runners):
            thread.start()
        for cycle, fault in enumerate(schedule, 1):
            _sleep_until(workload_began + fault.at_s)
            outcome = nemesis.apply(fault, cluster, net, target, time.monotonic() - workload_began)
            result.outcomes.append(outcome)
            on_coordinator = fault.partition >= config.partitions and outcome.was_leader
            result.on_coordinator += on_coordinator
            if progress is not None:
                line = nemesis.describe(outcome, cluster)
                if fault.partition >= config.partitions:
                    line = line.replace(f"leader of p{fault.partition}", "txn coordinator")
                committed = sum(r.committed() for r in runners)
                progress(
                    f"[{cycle:>{len(str(len(schedule)))}}/{len(schedule)}] {line}; "
                    f"{committed:,} transactions committed"
                )
        _sleep_until(workload_began + config.duration_s - config.tail_s)
        net.heal()
        time.sleep(config.tail_s)
        for runner in runners:
            runner.stopping.set()
        for runner in runners:
            runner.join(config.settle_timeout_s + 60)
        stuck = [f"{r.name}: {r.phase}; {list(r.trace)[-8:]}" for r in runners if r.is_alive()]
        if stuck:
            raise RuntimeError(f"producers still ending a transaction: {stuck}")
        reader.stop(30)
        wait_stable(bootstrap, TOPIC, config.partitions, config.settle_timeout_s)
        committed = read_topic(bootstrap, TOPIC, config.partitions, "read_committed", 120)
        uncommitted = read_topic(bootstrap, TOPIC, config.partitions, "read_uncommitted", 120)
        offsets = group_offsets(bootstrap, groups, SOURCE)
        for runner in runners:
            result.transactions.update(runner.outcomes)
        history = TxnHistory(
            outcomes=result.transactions,
            reads=reader.reads,
            committed=committed,
            uncommitted=uncommitted,
            offsets=offsets,
        )
        result.report = check(history)
        result.visible = _visible_transactions(history)
    except Exception as exc:  # a node that did not come back, a client that gave up
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for runner in runners:
            runner.stopping.set()
        if reader is not None:
            reader.stopping.set()
        for thread in (*runners, reader):
            if thread is not None and thread.ident is not None:
                thread.join(30)
        if cluster is not None:
            cluster.close()
        net.close()
        if not result.transactions:
            for runner in runners:
                result.transactions.update(runner.outcomes)
        for runner in runners:
            result.client_errors.update(runner.errors)
            result.client_hangs += runner.client_hangs
        if reader is not None:
            result.client_errors.update(reader.errors)
            result.reads = len(reader.reads)
        result.runner_crashes = [t.crash for t in (*runners, reader) if t is not None and t.crash]
        if cluster is not None:
            result.broker_tracebacks = sum(n.log().count("Traceback") for n in cluster.nodes)
        result.duration_s = time.monotonic() - began
    return result


def _visible_transactions(history: TxnHistory) -> int:
    keys = set()
    for _, _, value in history.committed:
        record = decode_value(value)
        if record is not None:
            keys.add(record.key)
    return len(keys)


def summary(result: TxnResult) -> str:
    """One run in a few lines (``make chaos CHAOS_ARGS=--transactions``)."""
    counts = result.report.counts if result.report is not None else Counter()
    kinds = Counter(o.fault.kind for o in result.outcomes)
    rows = [
        ("seed / mix", f"{result.config.seed} / {result.config.mix}"),
        ("duration", f"{result.duration_s:.0f} s ({result.config.duration_s:g} s of workload)"),
        ("faults", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "-"),
        ("faults on a partition leader", str(sum(o.was_leader for o in result.outcomes))),
        ("faults on the txn coordinator", str(result.on_coordinator)),
        (
            "transactions begun",
            f"{len(result.transactions):,} by {result.config.producers} producers",
        ),
        (
            "meant to commit: committed / aborted / in doubt",
            f"{result.count(COMMITTED, True):,} / {result.count(ABORTED, True):,} / "
            f"{result.count(FAILED, True):,}",
        ),
        (
            "meant to abort: aborted / in doubt",
            f"{result.count(ABORTED, False):,} / {result.count(FAILED, False):,}",
        ),
        ("abandoned: librdkafka blocked (#5456)", str(result.count(ABANDONED))),
        ("visible to read_committed", f"{result.visible:,}"),
        ("records read during the run", f"{result.reads:,}"),
        ("violations", ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "0"),
        ("broker tracebacks", str(result.broker_tracebacks)),
        ("client thread crashes", "; ".join(result.runner_crashes) or "-"),
        (
            "client errors",
            ", ".join(f"{k} {n}" for k, n in result.client_errors.most_common(6)) or "-",
        ),
    ]
    if result.error:
        rows.append(("run error", result.error))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines.append(f"{'result':<{width}}  {'PASS' if result.passed else 'FAIL'}")
    return "\n".join(lines)


def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)
