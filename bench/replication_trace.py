"""Where the time of an acks=all produce goes on three nodes: a timestamped trace of the
replication chain.

Run: ``PYTHONPATH=. .venv/bin/python bench/replication_trace.py [--partitions 1]
[--seconds 3] [--latency] [--quick]``.

How this works and why: ``bench/replication.py`` measures rates; this splits one of its
runs (acks=all to RF=3, ``bench/broker.py``'s load generator; ``--latency``: its paced
20 MB/s latency pair instead) into the hops of the chain. The three ``odradek serve``
processes start with a ``sitecustomize`` on their ``PYTHONPATH`` (written to a temporary
directory, nothing in ``odradek/`` knows of it) that wraps a few functions and records
CLOCK_MONOTONIC in milliseconds, which all processes share: the leader's append, its
follower-fetch reads (``update_follower_fetch_state``: a follower's fetch offset and
the HW before and after), the return of each ``ReplicaManager.fetch``, the wait of each
acks=all produce (``await_replication``); the follower's Fetch built and its response
applied; every ``pwritev`` into a segment, segment roll and fsynced checkpoint file.
The wrappers cost a few microseconds a call, so traced runs are a little slower.

With one partition every leader append (its offset) is followed through each follower:
append end → the follower's parked fetch answered (response ready) → the follower's
apply start (the response crossed the socket and was parsed) → its next Fetch built →
the leader reading that Fetch (the follower's log end known, the HW moved). It also
says whether the producer pipelines: the gap from a produce's answer to the next
append (librdkafka's idempotent producer keeps one request per partition in flight).
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HOOK = """
import os
import threading
import time

_DIR = os.environ.get("ODRADEK_TRACE_DIR")
_lines = []


def _now():
    return time.monotonic_ns() / 1e6


def _flush():
    items = _lines[:]
    if items:
        del _lines[: len(items)]
        with open(os.path.join(_DIR, f"trace-{os.getpid()}.log"), "a") as out:
            out.write("\\n".join(items) + "\\n")


def _flusher():
    while True:
        time.sleep(0.5)
        _flush()


def _span(owner, name, tag, detail=None):
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        began = _now()
        result = original(*args, **kwargs)
        extra = "" if detail is None else " " + detail(args, result)
        _lines.append(f"{began:.3f} {_now():.3f} {tag}{extra}")
        return result

    setattr(owner, name, wrapper)


def _install():
    from odradek.replica import fetcher_state, partition, replica_manager
    from odradek.storage import checkpoint, epoch_cache, log, segment

    try:  # absent before the deferred writes (to trace older code with this script)
        from odradek.storage import deferred_files
    except ImportError:
        deferred_files = None

    P = partition.Partition
    _span(P, "append_as_leader", "LAPP", lambda a, r: f"{a[0].index} {r.last_offset + 1}")
    original_ufs = P.update_follower_fetch_state

    def ufs(self, replica_id, fetch_offset, *args, **kwargs):
        before = self.log.high_watermark
        result = original_ufs(self, replica_id, fetch_offset, *args, **kwargs)
        _lines.append(
            f"{_now():.3f} {_now():.3f} FFETCH {self.index} {replica_id} {fetch_offset} "
            f"{before} {self.log.high_watermark}"
        )
        return result

    P.update_follower_fetch_state = ufs
    RM = replica_manager.ReplicaManager
    original_fetch, original_wait = RM.fetch, RM.await_replication

    async def fetch(self, params):
        began = _now()
        result = await original_fetch(self, params)
        _lines.append(f"{began:.3f} {_now():.3f} RMFETCH {params.replica_id}")
        return result

    async def await_replication(self, statuses, timeout_ms):
        began = _now()
        await original_wait(self, statuses, timeout_ms)
        _lines.append(f"{began:.3f} {_now():.3f} AWAIT")

    RM.fetch, RM.await_replication = fetch, await_replication
    core = fetcher_state.FetcherCore
    _span(
        core,
        "build_fetch",
        "FBUILD",
        lambda a, r: " ".join(f"{tp[1]}:{s.fetch_offset}" for tp, s in r.partitions.items())
        if r is not None
        else "",
    )
    _span(core, "apply_fetch", "FAPPLY", lambda a, r: str(sum(r.appended_bytes.values())))
    _span(segment.LogSegment, "_write_all", "WRITE", lambda a, r: str(a[2]))
    _span(log.Log, "roll", "ROLL")
    _span(checkpoint, "_write_atomically", "CHECKPOINT")
    if deferred_files is not None:
        _span(deferred_files, "write_durably", "CHECKPOINT")  # epoch cache, snapshots
    _span(epoch_cache.LeaderEpochCache, "_replace", "EPOCH")


if _DIR:
    _install()
    threading.Thread(target=_flusher, daemon=True).start()
    import atexit

    atexit.register(_flush)
"""


def read_trace(directory: Path, pid: int) -> list[list[str]]:
    path = directory / f"trace-{pid}.log"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda row: float(row[0]))


def summary(name: str, values: Sequence[float]) -> str:
    if not values:
        return f"  {name:46s} (none)"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (
        f"  {name:46s} n={len(ordered):5d} mean={statistics.mean(ordered):7.2f} "
        f"p50={statistics.median(ordered):7.2f} p90={p90:7.2f} max={ordered[-1]:7.2f} ms"
    )


def spans(rows: list[list[str]], tag: str) -> list[tuple[float, float, list[str]]]:
    return [(float(r[0]), float(r[1]), r[3:]) for r in rows if r[2] == tag]


def durations(rows: list[list[str]], tag: str) -> list[float]:
    return [end - began for began, end, _ in spans(rows, tag)]


def chain(leader: list[list[str]], followers: dict[int, list[list[str]]]) -> list[str]:
    """One partition: each leader append followed through each follower."""
    lines = []
    appends = spans(leader, "LAPP")
    waits = spans(leader, "AWAIT")
    lines.append(summary("leader append", [e - b for b, e, _ in appends]))
    lines.append(
        summary(
            "append end -> acks=all answered",
            [w[1] - a[1] for a, w in zip(appends, waits, strict=False)],
        )
    )
    lines.append(
        summary(
            "answered -> next append starts",
            [appends[i + 1][0] - waits[i][1] for i in range(min(len(appends) - 1, len(waits)))],
        )
    )
    for node, rows in sorted(followers.items()):
        answered = sorted(e for _, e, rest in spans(leader, "RMFETCH") if rest == [str(node)])
        seen: dict[int, float] = {}
        for _, end, rest in spans(leader, "FFETCH"):
            if rest[1] == str(node):
                seen.setdefault(int(rest[2]), end)
        built: dict[int, float] = {}
        for began, _, rest in spans(rows, "FBUILD"):
            for item in rest:
                built.setdefault(int(item.split(":")[1]), began)
        applies = [(b, e) for b, e, rest in spans(rows, "FAPPLY") if rest and rest[0] != "0"]
        starts = [b for b, _ in applies]
        hops: dict[str, list[float]] = defaultdict(list)
        for _, end, rest in appends:
            offset = int(rest[1])
            i = bisect.bisect_left(answered, end)
            j = bisect.bisect_right(starts, built.get(offset, -1.0)) - 1
            if i >= len(answered) or offset not in built or offset not in seen or j < 0:
                continue
            hops["append end -> its parked fetch answered"].append(answered[i] - end)
            hops["answered -> follower's apply starts"].append(applies[j][0] - answered[i])
            hops["apply starts -> next Fetch built"].append(built[offset] - applies[j][0])
            hops["next Fetch built -> leader reads it"].append(seen[offset] - built[offset])
            hops["append end -> follower's log end known"].append(seen[offset] - end)
        lines.append(f" follower {node}:")
        lines.extend(summary(name, values) for name, values in hops.items())
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--latency", action="store_true", help="the 20 MB/s latency pair")
    parser.add_argument("--quick", action="store_true", help="2 s (bench/run.py passes it)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 2.0)
    with tempfile.TemporaryDirectory(prefix="odradek-trace-") as temp:
        base = Path(temp)
        (base / "hook").mkdir()
        (base / "hook" / "sitecustomize.py").write_text(HOOK)
        (base / "trace").mkdir()
        root = str(Path(__file__).resolve().parent.parent)
        os.environ["ODRADEK_TRACE_DIR"] = str(base / "trace")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(base / "hook"), root])
        from bench import replication as bench

        load_start = os.getloadavg()
        cluster = bench.Cluster(base / "cluster")
        try:
            config = {**bench.REPLICATED}
            if not args.latency:
                config.update(bench.load.RETENTION_CONFIG)
            cluster.create_topic("t", args.partitions, config)
            leader_id, _ = cluster.partition("t")
            pids = {node: cluster.pid(node) for node in cluster.quorum.node_ids}
            if args.latency:
                result = bench.latency_once(cluster, "t", 20 * bench.MB, 1.0, args.seconds)
                print(
                    f"latency at 20 MB/s: p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} "
                    f"ms ({result.rate / bench.MB:.1f} MB/s sent) {result.error or ''}"
                )
            else:
                spec = {
                    **bench.produce_spec("t", args.partitions, "all", args.seconds, 1.0),
                    "bootstrap": cluster.bootstrap,
                    "broker_pid": pids[leader_id],
                }
                run = bench.run_of("t", spec, args.seconds + 120)
                rate = f"{run.mb_s:.1f} MB/s" if run.seconds else run.error
                print(f"acks=all RF=3, {args.partitions} partition(s): {rate}")
        finally:
            cluster.close()
        time.sleep(0.6)  # the nodes' last flush
        traces = {node: read_trace(base / "trace", pid) for node, pid in pids.items()}
    print(f"load average at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    for tag, label in (
        ("LAPP", "leader appends"),
        ("FAPPLY", "follower applies (whole responses)"),
        ("WRITE", "pwritev into a segment"),
        ("ROLL", "segment rolls"),
        ("CHECKPOINT", "fsynced checkpoint files (any thread)"),
        ("EPOCH", "epoch cache changes on the loop"),
        ("AWAIT", "acks=all waits"),
    ):
        print(summary(label, [d for rows in traces.values() for d in durations(rows, tag)]))
    if args.partitions == 1:
        followers = {node: rows for node, rows in traces.items() if node != leader_id}
        print(f"the chain, leader {leader_id}:")
        print("\n".join(chain(traces[leader_id], followers)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
