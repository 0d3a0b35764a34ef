"""The crash harness in ``make test``: one short seeded run, every fault kind at least once.

A broker at default segment sizes (1 GiB) takes ~1 MB/s per partition from an
idempotent acks=all producer while a two-member group consumes and commits. The
broker is killed (SIGKILL), paused (SIGSTOP/SIGCONT), stopped (SIGTERM) and killed
again while it recovers from a kill, the first fault only after ~6 MiB sit unflushed
in each partition (past recovery's 4 MiB chunk), and killed once more at the end.
Every check of ``checks.py`` must pass. The seed is random unless ``CHAOS_SEED`` is
set, and also picks the producer's codec; a failure prints how to replay it.
``make chaos`` runs the same for many more cycles (``python -m tests.chaos.run``).

The quorum's short run: three combined KRaft nodes, each fault kind once and a few
more, on one node or two at once (the active controller among the targets), under an
idempotent producer and an admin client creating and deleting topics; every check of
``tests/chaos/quorum.py`` must pass (``make chaos CHAOS_ARGS=--quorum`` for long runs).

The replicated short run (``tests/chaos/replication.py``): three KRaft nodes behind TCP
proxies, a topic with RF=3 and min.insync.replicas=2, ~45 s of the mixed nemesis (kill
-9, SIGSTOP, SIGTERM, isolating a node, cutting a link both ways or one way, mostly on
partition leaders) under an idempotent acks=all producer and a committing group; then
every check of ``replica_checks.py``, replicas byte-identical included. Until partition
replication is merged, followers never copy a leader's batches: the run is then
reported as an expected failure naming that (with what the checker found: with
elections but no fetchers, thousands of lost acknowledged writes), after the harness's
own assertions (it ran, records were acknowledged, the proxies really cut links).
``make chaos CHAOS_ARGS=--replication`` runs 10 x 120 s per fault mix.

The transactional short run (``tests/chaos/transactions.py``): the same proxied
cluster, ~35 s of the mixed nemesis (the transaction coordinator's node among the
targets) under three transactional producers committing and aborting, with offsets
sent with each transaction, and a read_committed reader; then every check of
``txn_checks.py`` (no aborted record read under read_committed, no committed
transaction partly visible, every acknowledged commit fully visible, every
commit/abort answered). ``make chaos CHAOS_ARGS=--transactions`` runs longer ones.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.chaos.faults import FaultPlan, QuorumPlan
from tests.chaos.nemesis import NemesisPlan
from tests.chaos.quorum import QuorumConfig, run_quorum
from tests.chaos.replication import ReplicationConfig, run_replication
from tests.chaos.run import details, quorum_table, replication_summary, table
from tests.chaos.scenario import Config, run
from tests.chaos.transactions import TxnConfig, run_transactions
from tests.chaos.transactions import summary as transactions_summary

PROC_NET = Path("/proc/net/tcp").exists()
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PLAN = FaultPlan(
    cycles=8,
    first_after_s=6.0,
    gap_s=(2.0, 4.0),
    pause_s=(0.5, 7.0),  # up to past the members' 6 s session timeout
    down_s=(0.0, 1.0),
    every_kind=True,
)


@pytest.mark.slow
def test_acknowledged_records_and_commits_survive_kills_pauses_and_restarts(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    compression = random.Random(seed).choice(CODECS)
    result = run(Config(seed=seed, plan=PLAN, tail_s=2.0, compression=compression), tmp_path)
    summary = table(result)
    print(summary)
    assert result.passed, (
        f"{summary}\n{details(result, 40)}\n"
        f"replay: CHAOS_SEED={seed} python -m pytest tests/chaos/test_chaos.py"
    )
    assert result.report is not None and result.report.verified == result.acked > 0
    assert {o.fault.kind for o in result.outcomes} == {"kill", "pause", "term", "crashloop"}
    assert result.bytes_per_partition > 8 * 2**20  # well past one 4 MiB recovery chunk


QUORUM_PLAN = QuorumPlan(
    cycles=7,
    first_after_s=4.0,
    gap_s=(1.5, 3.0),
    pause_s=(0.5, 3.0),
    down_s=(0.0, 1.0),
    pair=0.3,
    every_kind=True,
)


@pytest.mark.slow
def test_a_quorum_keeps_acknowledged_topics_and_records_through_faults_on_any_node(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    result = run_quorum(QuorumConfig(seed=seed, plan=QUORUM_PLAN, tail_s=2.0), tmp_path)
    summary = quorum_table(result)
    print(summary)
    assert result.passed, (
        f"{summary}\n{details(result, 40)}\n"
        f"replay: CHAOS_SEED={seed} python -m pytest tests/chaos/test_chaos.py -k quorum"
    )
    assert result.report is not None and result.report.verified == result.acked > 0
    assert result.created > 0 and result.deleted > 0
    assert {o.fault.kind for o in result.outcomes} == {"kill", "pause", "term", "crashloop"}
    # The final kill always hits the active controller.
    assert any(o.leader is not None and o.leader in o.nodes for o in result.outcomes)


REPLICATION_PLAN = NemesisPlan(
    duration_s=45.0,
    first_after_s=4.0,
    gap_s=(1.0, 2.5),
    down_s=(0.0, 1.0),
    pause_s=(1.0, 7.0),  # past broker.session.timeout.ms (6 s) now and then
    cut_s=(2.0, 8.0),
    quiet_s=4.0,
)


@pytest.mark.slow
@pytest.mark.skipif(not PROC_NET, reason="netproxy tells nodes apart through /proc (Linux)")
def test_replicated_topic_keeps_acknowledged_writes_through_kills_pauses_and_partitions(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    config = ReplicationConfig(
        seed=seed,
        mix="mixed",
        duration_s=REPLICATION_PLAN.duration_s,
        plan=REPLICATION_PLAN,
        drain_timeout_s=60.0,
    )
    result = run_replication(config, tmp_path)
    summary = replication_summary(result)
    print(summary)
    replay = f"replay: CHAOS_SEED={seed} python -m pytest tests/chaos/test_chaos.py -k replicated"
    # The harness itself: it ran to the end, the workload was acknowledged, and every
    # isolated node really was cut off (its Raft fetches to or from the others were
    # dropped or held; a bridge or one-way cut may meet no connection on its links).
    assert not result.error and not result.runner_crashes, f"{summary}\n{replay}"
    assert result.acked > 0 and result.report is not None, summary
    isolated = [o for o in result.outcomes if o.fault.kind == "isolate"]
    assert all(o.blocked > 0 for o in isolated), f"{summary}\n{isolated}"
    if not result.replication_active:
        pytest.xfail(
            "partition replication is missing: after healing, no batch of any partition "
            "is on two replicas byte for byte (followers never copied a leader's log); "
            "the checker found "
            + ", ".join(f"{k} {n}" for k, n in sorted(result.report.counts.items()))
        )
    assert result.passed and result.replicas_identical, (
        f"{summary}\n{details(result, 40)}\n{replay}"
    )
    assert result.report.verified == result.acked


TRANSACTIONS_PLAN = NemesisPlan(
    duration_s=35.0,
    first_after_s=4.0,
    gap_s=(1.0, 2.5),
    down_s=(0.0, 1.0),
    pause_s=(1.0, 5.0),
    cut_s=(2.0, 6.0),
    quiet_s=5.0,
)


@pytest.mark.slow
@pytest.mark.skipif(not PROC_NET, reason="netproxy tells nodes apart through /proc (Linux)")
def test_transactions_stay_whole_through_kills_pauses_and_partitions(tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    config = TxnConfig(
        seed=seed,
        mix="mixed",
        duration_s=TRANSACTIONS_PLAN.duration_s,
        plan=TRANSACTIONS_PLAN,
        settle_timeout_s=60.0,
    )
    result = run_transactions(config, tmp_path)
    summary = transactions_summary(result)
    print(summary)
    replay = f"replay: CHAOS_SEED={seed} python -m pytest tests/chaos/test_chaos.py -k transactions"
    assert result.passed, f"{summary}\n{details(result, 40)}\n{replay}"
    assert result.report is not None and result.report.verified > 0
    assert result.outcomes, summary  # faults were applied
