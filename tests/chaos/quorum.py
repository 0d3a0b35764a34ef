"""One chaos run on a three-node KRaft quorum: faults on any node, admin and produce
clients, then the checks.

``run_quorum(config, workdir)``:
1. starts three combined nodes (``Cluster.kraft``: one quorum, default Raft timeouts)
   and creates the produce topic (RF=1: replication is the next issue's);
2. starts an idempotent acks=all producer (``ProducerRunner``) and the admin workload
   (``AdminRunner``: creates ``admin-<n>`` topics and deletes some, re-asking through
   NOT_CONTROLLER and timeouts);
3. applies the seeded faults (``schedule_quorum``): kill -9, SIGSTOP/SIGCONT, SIGTERM
   and restart, a kill during recovery, on one node or two at once, the active
   controller among the targets about half the time;
4. stops the clients (every delivery report and every admin answer awaited), kills
   the active controller once more and restarts it;
5. waits until every voter's log reaches the leader's and the high watermark, then
   checks: every acknowledged record is readable at its offset (no loss, duplicate,
   gap, damage); every acknowledged create is listed by every node unless a delete
   was sent for it, no acknowledged delete is; the nodes list the same topics;
6. stops the nodes (SIGTERM) and compares their ``__cluster_metadata`` logs below the
   high watermark batch by batch; counts tracebacks in the nodes' logs.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from odradek.cli.metadata_quorum import Quorum as QuorumState
from odradek.cli.metadata_quorum import QuorumToolError, describe
from odradek.server.metadata_log import METADATA_LOG_CONFIG, METADATA_LOG_DIR
from odradek.storage.log_loader import open_log
from tests.chaos import faults
from tests.chaos.checks import (
    Report,
    check_acked_present,
    check_contiguous,
    check_metadata_logs,
    check_no_duplicates,
    check_readable,
    check_topics,
)
from tests.chaos.cluster import Cluster
from tests.chaos.faults import LEADER, QuorumFault, QuorumOutcome, QuorumPlan
from tests.chaos.workload import (
    AdminRunner,
    ProducerRunner,
    create_topic_retrying,
    read_log,
    topics_on,
)

TOPIC = "chaos"
ADMIN_PREFIX = "admin-"
HOST = "127.0.0.1"
CONVERGE_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class QuorumConfig:
    seed: int
    plan: QuorumPlan
    partitions: int = 3
    rate_per_s: int = 1000
    value_bytes: int = 200
    compression: str = "none"
    admin_interval_s: float = 0.05
    tail_s: float = 3.0
    drain_timeout_s: float = 180.0
    properties: dict[str, str] = field(default_factory=dict)  # on every node


@dataclass
class QuorumResult:
    config: QuorumConfig
    workdir: Path
    outcomes: list[QuorumOutcome] = field(default_factory=list)
    report: Report | None = None
    acked: int = 0
    sent: int = 0
    unflushed: int = 0
    created: int = 0
    deleted: int = 0
    admin_attempts: int = 0
    admin_unanswered: list[str] = field(default_factory=list)
    client_errors: Counter[str] = field(default_factory=Counter)
    producer_fatal: str = ""
    runner_crashes: list[str] = field(default_factory=list)
    broker_tracebacks: int = 0
    high_watermark: int = -1
    leaders_seen: set[int] = field(default_factory=set)
    duration_s: float = 0.0
    error: str = ""

    @property
    def passed(self) -> bool:
        return (
            not self.error
            and self.report is not None
            and self.report.ok
            and not self.producer_fatal
            and self.unflushed == 0
            and not self.admin_unanswered
            and self.broker_tracebacks == 0
            and not self.runner_crashes
            and all(not outcome.error for outcome in self.outcomes)
        )


def quorum_state(cluster: Cluster) -> QuorumState | None:
    assert cluster.quorum is not None
    addresses = [(HOST, port) for port in cluster.quorum.controller_ports.values()]
    try:
        return asyncio.run(describe(addresses))
    except QuorumToolError:
        return None


def wait_converged(cluster: Cluster, timeout_s: float) -> QuorumState:
    """The quorum once every voter's log ends where the leader's does, at the high
    watermark, and every node lists the same topics."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        state = quorum_state(cluster)
        if state is not None:
            ends = {voter.log_end_offset for voter in state.voters}
            if ends == {state.high_watermark}:
                try:
                    listed = {frozenset(topics_on(node.listen, 10)) for node in cluster.nodes}
                except OSError as error:
                    listed = {frozenset({str(error)}), frozenset()}
                if len(listed) == 1:
                    return state
            last = (state.high_watermark, [(v.node_id, v.log_end_offset) for v in state.voters])
        time.sleep(0.5)
    raise RuntimeError(f"the quorum did not converge in {timeout_s:g} s: {last}")


def metadata_batches(data_dir: Path) -> tuple[dict[int, bytes], int]:
    """A stopped node's ``__cluster_metadata`` batches (base offset -> bytes), log end."""
    log, _ = open_log(data_dir / METADATA_LOG_DIR, METADATA_LOG_CONFIG)
    try:
        batches = {
            int.from_bytes(raw[:8], "big"): raw for raw in log.read_batches(log.log_start_offset)
        }
        return batches, log.log_end_offset
    finally:
        log.close()


def run_quorum(
    config: QuorumConfig, workdir: Path, progress: Callable[[str], None] | None = None
) -> QuorumResult:
    result = QuorumResult(config, workdir)
    began = time.monotonic()
    cluster = Cluster.kraft(workdir, config.properties)
    schedule = faults.schedule_quorum(config.seed, config.plan, len(cluster.nodes))
    producer: ProducerRunner | None = None
    admin: AdminRunner | None = None
    report = Report(Counter(), [], 0)
    try:
        cluster.start()
        create_topic_retrying(cluster.bootstrap, TOPIC, config.partitions)
        producer = ProducerRunner(
            cluster.bootstrap,
            TOPIC,
            config.partitions,
            config.rate_per_s,
            config.value_bytes,
            {"compression.type": config.compression},
        )
        admin = AdminRunner(cluster.bootstrap, config.admin_interval_s, config.seed)
        workload_began = time.monotonic()
        producer.start()
        admin.start()
        for cycle, fault in enumerate(schedule, 1):
            _sleep_until(workload_began + fault.at_s)
            outcome = faults.apply_quorum(fault, cluster, time.monotonic() - workload_began)
            result.outcomes.append(outcome)
            if outcome.leader is not None:
                result.leaders_seen.add(outcome.leader)
            if progress is not None:
                progress(_progress_line(cycle, len(schedule), outcome, cluster, producer, admin))
        time.sleep(config.tail_s)
        producer.stop(config.drain_timeout_s)
        result.unflushed = producer.unflushed
        admin.stop(config.drain_timeout_s)
        final = QuorumFault(time.monotonic() - workload_began, "kill", (LEADER,), 0.0)
        result.outcomes.append(faults.apply_quorum(final, cluster, final.at_s))
        state = wait_converged(cluster, CONVERGE_TIMEOUT_S)
        result.high_watermark = state.high_watermark
        log = read_log(
            cluster.bootstrap, TOPIC, config.partitions, config.value_bytes, config.drain_timeout_s
        )
        violations, report.verified = check_acked_present(producer.acked, log)
        report.add(violations)
        report.add(check_no_duplicates(log))
        report.add(check_readable(log))
        report.add(check_contiguous(log))
        listed = {node.name: topics_on(node.listen) for node in cluster.nodes}
        report.add(
            check_topics(admin.created, admin.deleted, admin.delete_sent, listed, ADMIN_PREFIX)
        )
        cluster.close()
        found = {node.name: metadata_batches(node.data_dir) for node in cluster.nodes}
        report.add(
            check_metadata_logs(
                {name: batches for name, (batches, _) in found.items()},
                {name: end for name, (_, end) in found.items()},
                state.high_watermark,
            )
        )
        result.report = report
    except Exception as exc:  # a node that did not come back, a client that gave up
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for runner in (producer, admin):
            if runner is not None:
                runner.stopping.set()
        if producer is not None:
            producer.abandon.set()
        for runner in (producer, admin):
            if runner is not None and runner.ident is not None:
                runner.join(30)
        cluster.close()
        if producer is not None:
            result.acked = len(producer.acked)
            result.sent = producer.acked.sent_count
            result.producer_fatal = producer.fatal
            result.client_errors.update(producer.errors)
        if admin is not None:
            result.created, result.deleted = len(admin.created), len(admin.deleted)
            result.admin_attempts = admin.attempts
            result.admin_unanswered = admin.unanswered
            result.client_errors.update(admin.errors)
        result.runner_crashes = [r.crash for r in (producer, admin) if r and r.crash]
        result.broker_tracebacks = sum(node.log().count("Traceback") for node in cluster.nodes)
        result.duration_s = time.monotonic() - began
    return result


def _progress_line(
    cycle: int,
    cycles: int,
    outcome: QuorumOutcome,
    cluster: Cluster,
    producer: ProducerRunner,
    admin: AdminRunner,
) -> str:
    fault = outcome.fault
    names = ", ".join(
        cluster.nodes[i].name + (" (leader)" if i == outcome.leader else "") for i in outcome.nodes
    )
    line = (
        f"[{cycle:>{len(str(cycles))}}/{cycles}] {outcome.started_s:7.1f}s {fault.kind:<9} "
        f"{names} for {fault.hold_s:.2f}s"
    )
    if fault.kind == "crashloop" and outcome.interrupted:
        line += " (killed before ready)"
    if fault.kind != "pause":
        line += f", ready after {outcome.recovery_s:.2f}s"
    if outcome.error:
        line += f", {outcome.error}"
    return (
        f"{line}; {len(producer.acked):,} acked, {len(admin.created)} topics created, "
        f"{len(admin.deleted)} deleted"
    )


def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)
