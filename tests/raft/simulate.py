"""Run the KRaft simulation over many seeds: ``python -m tests.raft.simulate --seeds 1000``.

How this works and why: each seed is an independent, deterministic run of
``tests.raft.simulation`` (3 voters for odd seeds, 5 for even ones unless ``--voters``
says otherwise); ``--disk`` keeps every node's log in a DiskRaftLog of real batches
(files on tmpfs) instead of memory. Failures print the seed's replay command and its
last events; the exit status is 1 if any seed failed, so ``make simulate`` can gate on it.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.raft.simulation import SimulationFailure, run_seed


def voters_for(seed: int, voters: int | None) -> int:
    if voters is not None:
        return voters
    return 3 if seed % 2 else 5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--voters", type=int, choices=(1, 2, 3, 4, 5, 6, 7))
    parser.add_argument("--max-failures", type=int, default=5, help="stop after this many")
    parser.add_argument("--disk", action="store_true", help="DiskRaftLogs of real batches")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    started = time.monotonic()
    failures: list[int] = []
    events = commits = elections = crashes = snapshots = runs = truncated = installs = 0
    parked = released = flushes = voided = 0
    for seed in seeds:
        voters = voters_for(seed, args.voters)
        try:
            sim = run_seed(seed, voters, disk=args.disk)
        except SimulationFailure as failure:
            print(failure, file=sys.stderr)
            failures.append(seed)
            if len(failures) >= args.max_failures:
                break
            continue
        runs += 1
        events += sim.events
        commits += sim.committed_end
        elections += sim.elections
        crashes += sim.crashes
        snapshots += sim.snapshots_taken
        truncated += sim.truncated_entries
        installs += sim.snapshot_installs
        parked += sim.fetches_parked
        released += sim.fetches_released
        flushes += sim.flushes_started
        voided += sim.flushes_voided
    elapsed = time.monotonic() - started
    print(
        f"{runs} seeds passed, {len(failures)} failed in {elapsed:.1f} s: {events} events, "
        f"{elections} leaders elected, {crashes} crashes, {snapshots} snapshots, "
        f"{commits} entries committed, {truncated} divergent entries truncated, "
        f"{installs} snapshots installed from the leader, {parked} fetches parked by "
        f"leaders and {released} released later, {flushes} split fsyncs "
        f"({voided} voided or no-ops)"
    )
    if failures:
        print(f"FAIL seeds: {failures}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
