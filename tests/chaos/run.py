"""``make chaos``: many fault cycles against one broker, then a table and PASS/FAIL.

    python -m tests.chaos.run --cycles 50 [--seed N] [--rate 3000] [--keep]
    python -m tests.chaos.run --quorum --cycles 40 [--seed N] [--rate 1000]

``--quorum`` runs ``tests/chaos/quorum.py`` instead: three combined KRaft nodes, faults
on one or two nodes at a time (the active controller among them), an admin client
creating and deleting topics beside the idempotent producer, and the quorum's checks.

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
from tests.chaos.quorum import QuorumConfig, QuorumResult, run_quorum
from tests.chaos.scenario import Config, Result, run


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


def _others(counts: Counter[str]) -> str:
    others = [f"{kind} {counts[kind]}" for kind in KINDS if kind not in ("lost", "duplicate")]
    shown = [text for text in others if not text.endswith(" 0")]
    return ", ".join(shown) or "0"


def _errors(errors: Counter[str]) -> str:
    return ", ".join(f"{name} {n}" for name, n in errors.most_common(6)) or "-"


def details(result: Result | QuorumResult, broker_log_lines: int = 20) -> str:
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
    args = parser.parse_args(argv)
    seed = args.seed
    if seed is None:
        seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
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


def _verdict(result: Result | QuorumResult, workdir: Path, replay: str, *, keep: bool) -> int:
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
