"""``make chaos``: many fault cycles against one broker, then a table and PASS/FAIL.

    python -m tests.chaos.run --cycles 50 [--seed N] [--rate 3000] [--keep]
    python -m tests.chaos.run --quorum --cycles 40 [--seed N] [--rate 1000]

``--quorum`` runs ``tests/chaos/quorum.py`` instead: three combined KRaft nodes, faults
on one or two nodes at a time (the active controller among them), an admin client
creating and deleting topics beside the idempotent producer, and the quorum's checks.

    python -m tests.chaos.run --replication [--mix kill,pause,partition,mixed]
        [--runs 10] [--duration 120] [--seed N]

``--replication`` runs ``tests/chaos/replication.py``: three KRaft nodes behind TCP
proxies, a topic with RF=3 and min.insync.replicas=2, ``--runs`` runs of ``--duration``
seconds per fault mix (run ``i`` of a mix uses seed ``N + i``), then one table row per
mix (runs, acknowledged, lost, duplicated, inconsistent, replicas identical); each
failing run prints the line that replays it alone.

    python -m tests.chaos.run --transactions [--mix kill,pause,partition,mixed]
        [--runs 10] [--duration 120] [--producers 3] [--abort-ratio 0.3] [--seed N]

``--transactions`` runs ``tests/chaos/transactions.py`` on the same proxied cluster:
transactional producers committing and aborting (each value names its transaction and
intended outcome, offsets sent with each transaction), a read_committed reader, faults
on partition leaders and on the transaction coordinator's node; then
``txn_checks.py`` (no aborted record read under read_committed, no committed
transaction partly visible, every acknowledged commit fully visible), one summary per
run and one table row per mix.

The seed (``--seed`` or ``CHAOS_SEED``, else random) is printed first; a failing run
prints the line that replays its fault schedule. The data directory is removed after a
pass and kept after a failure (its path is printed, with the broker log's tail).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from tests.chaos.checks import KINDS, QUORUM_KINDS
from tests.chaos.faults import FaultPlan, QuorumPlan
from tests.chaos.nemesis import MIXES
from tests.chaos.quorum import QuorumConfig, QuorumResult, run_quorum
from tests.chaos.replication import ReplicationConfig, ReplicationResult, run_replication
from tests.chaos.scenario import Config, Result, run
from tests.chaos.transactions import TxnConfig, TxnResult, run_transactions
from tests.chaos.transactions import summary as transactions_summary
from tests.chaos.txn_checks import COMMITTED


def table(result: Result) -> str:
    kinds = Counter(outcome.fault.kind for outcome in result.outcomes)
    recoveries = [o.recovery_s for o in result.outcomes if o.fault.kind != "pause"]
    counts = result.report.counts if result.report is not None else Counter()
    rows = [
        ("seed", str(result.config.seed)),
        ("duration", f"{result.duration_s:.0f} s"),
        (
            "workload",
            f"{result.config.partitions} partitions, {result.config.rate_per_s:,} records/s "
            f"of ~{result.config.value_bytes} B, compression {result.config.compression}, "
            f"{result.config.group_protocol} group protocol",
        ),
        ("cycles (faults)", str(len(result.outcomes))),
        ("faults by kind", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "-"),
        ("recoveries interrupted", str(sum(o.interrupted for o in result.outcomes))),
        ("records sent", f"{result.sent:,}"),
        ("records acked", f"{result.acked:,}"),
        ("records verified", f"{result.report.verified:,}" if result.report else "-"),
        ("losses", str(counts["lost"])),
        ("duplicates", str(counts["duplicate"])),
        ("other violations", _others(counts)),
        ("largest partition", f"{result.bytes_per_partition / 2**20:.1f} MiB"),
        ("max recovery time", f"{max(recoveries, default=0.0):.2f} s"),
        ("consumers drained", "yes" if result.drained else "NO"),
        ("unflushed at end", str(result.unflushed)),
        ("producer fatal error", result.producer_fatal or "-"),
        ("broker tracebacks", str(result.broker_tracebacks)),
        ("client thread crashes", "; ".join(result.runner_crashes) or "-"),
        ("client errors", _errors(result.client_errors)),
    ]
    if result.error:
        rows.append(("run error", result.error))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines.append(f"{'result':<{width}}  {'PASS' if result.passed else 'FAIL'}")
    return "\n".join(lines)


def quorum_table(result: QuorumResult) -> str:
    kinds = Counter(o.fault.kind for o in result.outcomes)
    widths = Counter(len(o.nodes) for o in result.outcomes)
    on_leader = sum(o.leader is not None and o.leader in o.nodes for o in result.outcomes)
    recoveries = [o.recovery_s for o in result.outcomes if o.fault.kind != "pause"]
    counts = result.report.counts if result.report is not None else Counter()
    violations = [f"{kind} {counts[kind]}" for kind in (*KINDS, *QUORUM_KINDS) if counts[kind]]
    rows = [
        ("seed", str(result.config.seed)),
        ("duration", f"{result.duration_s:.0f} s"),
        (
            "workload",
            f"3 combined KRaft nodes; producer {result.config.rate_per_s:,} records/s of "
            f"~{result.config.value_bytes} B to {result.config.partitions} RF=1 partitions; "
            "admin creating and deleting topics",
        ),
        ("cycles (faults)", str(len(result.outcomes))),
        ("faults by kind", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "-"),
        ("nodes per fault", ", ".join(f"{k}: {n}" for k, n in sorted(widths.items())) or "-"),
        ("faults on the active controller", str(on_leader)),
        ("recoveries interrupted", str(sum(o.interrupted for o in result.outcomes))),
        ("records sent / acked", f"{result.sent:,} / {result.acked:,}"),
        ("records verified", f"{result.report.verified:,}" if result.report else "-"),
        ("topics created / deleted", f"{result.created} / {result.deleted}"),
        ("admin requests (with re-asks)", str(result.admin_attempts)),
        ("admin operations unanswered", "; ".join(result.admin_unanswered[:5]) or "0"),
        ("metadata high watermark", str(result.high_watermark)),
        ("violations", ", ".join(violations) or "0"),
        ("max recovery time", f"{max(recoveries, default=0.0):.2f} s"),
        ("unflushed at end", str(result.unflushed)),
        ("producer fatal error", result.producer_fatal or "-"),
        ("broker tracebacks", str(result.broker_tracebacks)),
        ("client thread crashes", "; ".join(result.runner_crashes) or "-"),
        ("client errors", _errors(result.client_errors)),
    ]
    if result.error:
        rows.append(("run error", result.error))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines.append(f"{'result':<{width}}  {'PASS' if result.passed else 'FAIL'}")
    return "\n".join(lines)


def replication_summary(result: ReplicationResult) -> str:
    """One run of the replicated harness in a few lines."""
    counts = result.report.counts if result.report is not None else Counter()
    kinds = Counter(o.fault.kind for o in result.outcomes)
    on_leader = sum(o.was_leader for o in result.outcomes)
    rows = [
        ("seed / mix", f"{result.config.seed} / {result.config.mix}"),
        ("duration", f"{result.duration_s:.0f} s ({result.config.duration_s:g} s of workload)"),
        ("faults", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "-"),
        ("faults on a partition leader", str(on_leader)),
        (
            "connections cut per network fault",
            ", ".join(str(o.blocked) for o in result.outcomes if o.cut) or "-",
        ),
        (
            "records sent / acked / failed / in doubt",
            f"{result.sent:,} / {result.acked:,} / {result.failed:,} / "
            f"{result.sent - result.acked - result.failed:,}",
        ),
        ("records read by the group", f"{result.reads:,}"),
        ("records verified", f"{result.report.verified:,}" if result.report else "-"),
        ("violations", ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "0"),
        (
            "ISR whole / replicas settled",
            f"{_yes(result.isr_whole)} / {_yes(result.replicas_settled)}",
        ),
        ("followers fetched", _yes(result.replication_active)),
        ("replicas byte-identical", _yes(result.replicas_identical)),
        ("group drained", _yes(result.drained)),
        ("proxy", ", ".join(f"{k} {n}" for k, n in sorted(result.net.items())) or "-"),
        ("unflushed at end", str(result.unflushed)),
        ("producer fatal error", result.producer_fatal or "-"),
        ("broker tracebacks", str(result.broker_tracebacks)),
        ("client thread crashes", "; ".join(result.runner_crashes) or "-"),
        ("client errors", _errors(result.client_errors)),
    ]
    if result.error:
        rows.append(("run error", result.error))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines.append(f"{'result':<{width}}  {'PASS' if result.passed else 'FAIL'}")
    return "\n".join(lines)


def replication_table(results: dict[str, list[ReplicationResult]]) -> str:
    """One row per fault mix: what the README quotes."""
    header = (
        "mix",
        "runs",
        "passed",
        "acknowledged",
        "lost",
        "duplicated",
        "inconsistent",
        "replicas identical",
    )
    rows = [header]
    for mix, runs in results.items():
        counts: Counter[str] = Counter()
        for result in runs:
            if result.report is not None:
                counts.update(result.report.counts)
        rows.append(
            (
                mix,
                str(len(runs)),
                str(sum(r.passed for r in runs)),
                f"{sum(r.acked for r in runs):,}",
                str(counts["lost"]),
                str(counts["duplicate"]),
                str(sum(r.inconsistent for r in runs)),
                f"{sum(r.replicas_identical for r in runs)}/{len(runs)}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def _others(counts: Counter[str]) -> str:
    others = [f"{kind} {counts[kind]}" for kind in KINDS if kind not in ("lost", "duplicate")]
    shown = [text for text in others if not text.endswith(" 0")]
    return ", ".join(shown) or "0"


def _errors(errors: Counter[str]) -> str:
    return ", ".join(f"{name} {n}" for name, n in errors.most_common(6)) or "-"


def details(
    result: Result | QuorumResult | ReplicationResult | TxnResult, broker_log_lines: int = 20
) -> str:
    """What a failed run found: violation examples, fault errors, the broker logs' tails."""
    lines = []
    if result.report is not None:
        lines += [f"  {v.kind} p{v.partition}: {v.detail}" for v in result.report.examples]
    lines += [f"  fault {o.fault}: {o.error}" for o in result.outcomes if o.error]
    for log_path in sorted(result.workdir.glob("*-broker.log")):
        tail = log_path.read_text(errors="replace").splitlines()[-broker_log_lines:]
        lines += [f"--- {log_path} (last lines)", *tail]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument(
        "--rate", type=int, default=None, help="records per second (3000; quorum: 1000)"
    )
    parser.add_argument("--value-bytes", type=int, default=None, help="1000; quorum: 200")
    parser.add_argument(
        "--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd")
    )
    parser.add_argument(
        "--gap",
        type=float,
        nargs=2,
        default=None,
        metavar=("MIN", "MAX"),
        help="seconds between faults (5 15; quorum: 2 6)",
    )
    parser.add_argument("--group-protocol", default="classic", choices=("classic", "consumer"))
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument(
        "--quorum", action="store_true", help="three KRaft nodes, admin and producer clients"
    )
    parser.add_argument(
        "--replication",
        action="store_true",
        help="three KRaft nodes behind proxies, RF=3 min.insync.replicas=2, partitions too",
    )
    parser.add_argument(
        "--transactions",
        action="store_true",
        help="the proxied three-node cluster under transactional producers and a "
        "read_committed reader",
    )
    parser.add_argument(
        "--mix",
        default=",".join(MIXES),
        help=f"replication, transactions: fault mixes ({', '.join(MIXES)})",
    )
    parser.add_argument(
        "--runs", type=int, default=10, help="replication, transactions: runs per mix"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=120.0,
        help="replication, transactions: seconds of workload a run",
    )
    parser.add_argument(
        "--producers", type=int, default=3, help="transactions: transactional producers"
    )
    parser.add_argument(
        "--abort-ratio",
        type=float,
        default=0.3,
        help="transactions: share of transactions aborted on purpose",
    )
    args = parser.parse_args(argv)
    seed = args.seed
    if seed is None:
        seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    if args.replication and args.transactions:
        parser.error("--replication and --transactions are separate runs")
    if args.replication:
        return main_replication(args, seed)
    if args.transactions:
        return main_transactions(args, seed)
    if args.quorum:
        args.rate, args.value_bytes = args.rate or 1000, args.value_bytes or 200
        args.gap = args.gap or (2.0, 6.0)
        return main_quorum(args, seed)
    args.rate, args.value_bytes = args.rate or 3000, args.value_bytes or 1000
    args.gap = args.gap or (5.0, 15.0)
    replay = (
        f"CHAOS_SEED={seed} make chaos CHAOS_ARGS='--cycles {args.cycles} "
        f"--partitions {args.partitions} --rate {args.rate} --value-bytes {args.value_bytes} "
        f"--gap {args.gap[0]:g} {args.gap[1]:g} --compression {args.compression} "
        f"--group-protocol {args.group_protocol}'"
    )
    print(f"chaos: seed {seed} (replay: {replay})", flush=True)
    config = Config(
        seed=seed,
        plan=FaultPlan(cycles=args.cycles, gap_s=tuple(args.gap)),
        partitions=args.partitions,
        rate_per_s=args.rate,
        value_bytes=args.value_bytes,
        compression=args.compression,
        group_protocol=args.group_protocol,
    )
    workdir = Path(tempfile.mkdtemp(prefix="odradek-chaos-"))
    result = run(config, workdir, progress=lambda line: print(line, flush=True))
    print(table(result))
    return _verdict(result, workdir, replay, keep=args.keep)


def main_quorum(args: argparse.Namespace, seed: int) -> int:
    replay = (
        f"CHAOS_SEED={seed} make chaos CHAOS_ARGS='--quorum --cycles {args.cycles} "
        f"--partitions {args.partitions} --rate {args.rate} --value-bytes {args.value_bytes} "
        f"--gap {args.gap[0]:g} {args.gap[1]:g} --compression {args.compression}'"
    )
    print(f"chaos: seed {seed} (replay: {replay})", flush=True)
    config = QuorumConfig(
        seed=seed,
        plan=QuorumPlan(cycles=args.cycles, gap_s=tuple(args.gap)),
        partitions=args.partitions,
        rate_per_s=args.rate,
        value_bytes=args.value_bytes,
        compression=args.compression,
    )
    workdir = Path(tempfile.mkdtemp(prefix="odradek-chaos-quorum-"))
    result = run_quorum(config, workdir, progress=lambda line: print(line, flush=True))
    print(quorum_table(result))
    return _verdict(result, workdir, replay, keep=args.keep)


def main_replication(args: argparse.Namespace, seed: int) -> int:
    mixes = [mix.strip() for mix in args.mix.split(",") if mix.strip()]
    unknown = [mix for mix in mixes if mix not in MIXES]
    if unknown or not mixes:
        print(f"chaos: unknown mix {unknown or args.mix!r}; choose from {', '.join(MIXES)}")
        return 2
    rate = args.rate or 500
    value_bytes = args.value_bytes or 200
    print(
        f"chaos: replication, seed {seed}, {args.runs} x {args.duration:g} s per mix "
        f"({', '.join(mixes)})",
        flush=True,
    )
    results: dict[str, list[ReplicationResult]] = {}
    failures = 0
    for mix in mixes:
        for i in range(args.runs):
            run_seed = seed + i
            replay = (
                f"make chaos CHAOS_ARGS='--replication --mix {mix} --runs 1 --seed {run_seed} "
                f"--duration {args.duration:g} --partitions {args.partitions} --rate {rate} "
                f"--value-bytes {value_bytes}'"
            )
            print(f"--- {mix} run {i + 1}/{args.runs}, seed {run_seed}", flush=True)
            config = ReplicationConfig(
                seed=run_seed,
                mix=mix,
                duration_s=args.duration,
                partitions=args.partitions,
                rate_per_s=rate,
                value_bytes=value_bytes,
            )
            workdir = Path(tempfile.mkdtemp(prefix=f"odradek-chaos-{mix}-"))
            result = run_replication(config, workdir, progress=lambda line: print(line, flush=True))
            results.setdefault(mix, []).append(result)
            print(replication_summary(result), flush=True)
            failures += _verdict(result, workdir, replay, keep=args.keep)
    print()
    print(replication_table(results))
    print(f"result: {'PASS' if not failures else f'FAIL ({failures} failing runs)'}")
    return 1 if failures else 0


def transactions_table(results: dict[str, list[TxnResult]]) -> str:
    """One row per fault mix of the transactional runs."""
    header = (
        "mix",
        "runs",
        "passed",
        "transactions",
        "commits acked",
        "visible",
        "aborted read",
        "partly visible",
        "acked commit lost",
    )
    rows = [header]
    for mix, runs in results.items():
        counts: Counter[str] = Counter()
        for result in runs:
            if result.report is not None:
                counts.update(result.report.counts)
        rows.append(
            (
                mix,
                str(len(runs)),
                str(sum(r.passed for r in runs)),
                f"{sum(len(r.transactions) for r in runs):,}",
                f"{sum(r.count(COMMITTED) for r in runs):,}",
                f"{sum(r.visible for r in runs):,}",
                str(counts["aborted_read"]),
                str(counts["partial_txn"]),
                str(counts["commit_lost"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def main_transactions(args: argparse.Namespace, seed: int) -> int:
    mixes = [mix.strip() for mix in args.mix.split(",") if mix.strip()]
    unknown = [mix for mix in mixes if mix not in MIXES]
    if unknown or not mixes:
        print(f"chaos: unknown mix {unknown or args.mix!r}; choose from {', '.join(MIXES)}")
        return 2
    print(
        f"chaos: transactions, seed {seed}, {args.runs} x {args.duration:g} s per mix "
        f"({', '.join(mixes)}), {args.producers} producers",
        flush=True,
    )
    results: dict[str, list[TxnResult]] = {}
    failures = 0
    for mix in mixes:
        for i in range(args.runs):
            run_seed = seed + i
            replay = (
                f"make chaos CHAOS_ARGS='--transactions --mix {mix} --runs 1 --seed {run_seed} "
                f"--duration {args.duration:g} --partitions {args.partitions} "
                f"--producers {args.producers} --abort-ratio {args.abort_ratio:g}'"
            )
            print(f"--- {mix} run {i + 1}/{args.runs}, seed {run_seed}", flush=True)
            config = TxnConfig(
                seed=run_seed,
                mix=mix,
                duration_s=args.duration,
                partitions=args.partitions,
                producers=args.producers,
                abort_ratio=args.abort_ratio,
            )
            workdir = Path(tempfile.mkdtemp(prefix=f"odradek-chaos-txn-{mix}-"))
            result = run_transactions(
                config, workdir, progress=lambda line: print(line, flush=True)
            )
            results.setdefault(mix, []).append(result)
            print(transactions_summary(result), flush=True)
            failures += _verdict(result, workdir, replay, keep=args.keep)
    print()
    print(transactions_table(results))
    print(f"result: {'PASS' if not failures else f'FAIL ({failures} failing runs)'}")
    return 1 if failures else 0


def _verdict(
    result: Result | QuorumResult | ReplicationResult | TxnResult,
    workdir: Path,
    replay: str,
    *,
    keep: bool,
) -> int:
    """Exit status 1 with the details and the replay line on a failure (the data kept);
    0 otherwise, the data removed unless asked to keep it."""
    if not result.passed:
        print(details(result))
        print(f"data kept in {workdir}")
        print(f"replay: {replay}")
        return 1
    if keep:
        print(f"data kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
