"""Cluster benchmark: three combined KRaft nodes on this machine, against the goals of
issue 11.

Run: ``make bench`` (every bench script) or
``.venv/bin/python bench/cluster.py [--quick] [--kills 20] [--terms 10] [--creates 300]``.

What is measured, and how (every node a real ``odradek serve`` process from a
Kafka-style properties file, ``tests/support/kraft.py``; default Raft timeouts: a
2 s fetch timeout, a 1 s election timeout, a 1 s election backoff ceiling):

- CreateTopics latency: ``--creates`` topics of one partition created one after the
  other over one connection, on a single zero-config node and on the 3-voter quorum
  (each request to the active controller's broker, the node DescribeQuorum names
  leader: followers do not forward yet); p50/p99 of the request round trip.
- Failover after kill -9 of the active controller, ``--kills`` times: the time from
  SIGKILL until a new leader is visible (DescribeCluster/DescribeQuorum on a survivor's
  controller listener, polled every 20 ms) and until a CreateTopics on the new
  leader's broker succeeds; the killed node is restarted and ready before the next
  round. Goal: p99 <= 3 s.
- Failover after SIGTERM, ``--terms`` times: the same, from the signal (the leader
  resigns with EndQuorumEpoch). Goal: <= 0.5 s.
- Restart of a follower whose metadata log holds 100,000 records (the ``churn`` log of
  ``bench/metadata_restart.py``: 1,000 topics, then config changes), with the same
  records appended offline to every node's log (in the log's epoch, so the logs agree
  and nothing is fetched): the time from exec to the ``odradek ready`` line, which a
  quorum's node prints once it has caught up with the leader and loaded. Without a
  snapshot, then with one: the node is run once with
  ``metadata.log.max.record.bytes.between.snapshots`` lowered until it writes its own
  snapshot (KIP-630), then restarted with the default config.

The table prints each goal beside the measurement; ``--strict`` exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kio.schema.errors import ErrorCode

from bench._support import finish, load_average, show_load, warn_if_busy
from bench.metadata_restart import append_history, history
from odradek.cli.metadata_quorum import QuorumToolError, describe
from odradek.server.metadata_log import METADATA_LOG_DIR
from tests.support.broker import BrokerProcess
from tests.support.kraft import HOST, Quorum
from tests.support.wire import WireClient, create_topic

SERVE_ARGS = ("--log-level", "WARNING")
KILL_GOAL_S = 3.0
TERM_GOAL_S = 0.5
POLL_S = 0.02
ROUND_TIMEOUT_S = 60.0
SNAPSHOT_BYTES = "1048576"  # the lowered snapshot threshold of the snapshot-writing run


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def create_latencies(bootstrap: str, count: int, prefix: str) -> list[float]:
    """Seconds per CreateTopics round trip, ``count`` one after the other."""
    latencies = []
    with WireClient(bootstrap) as client:
        for index in range(count):
            began = time.perf_counter()
            error = create_topic(client, f"{prefix}-{index}").error_code
            latencies.append(time.perf_counter() - began)
            if error != ErrorCode.none:
                raise RuntimeError(f"CreateTopics {prefix}-{index} on {bootstrap}: {error.name}")
    return latencies


def single_node_creates(base: Path, count: int) -> list[float]:
    node = BrokerProcess(base / "single", SERVE_ARGS).start()
    try:
        return create_latencies(node.bootstrap, count, "single")
    finally:
        node.stop()
        node.kill()


def create_succeeds(quorum: Quorum, leader: int, name: str, deadline: float) -> None:
    """CreateTopics on ``leader``'s broker until it succeeds (NOT_CONTROLLER while its
    controller takes over, a refused connection while it starts listening)."""
    while True:
        try:
            with WireClient(quorum.broker_address(leader), timeout_s=10) as client:
                while True:
                    error = create_topic(client, name).error_code
                    if error in (ErrorCode.none, ErrorCode.topic_already_exists):
                        return
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"CreateTopics on node {leader}: {error.name}")
                    time.sleep(POLL_S)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def failover_round(quorum: Quorum, hard: bool, name: str) -> tuple[float, float]:
    """One failover of the active controller; (seconds to a visible new leader, seconds
    to a successful CreateTopics on it). The old leader is back and ready after."""
    leader, _ = quorum.wait_for_leader(ROUND_TIMEOUT_S)
    process = quorum.nodes[leader].process
    assert process is not None
    survivors = [n for n in quorum.node_ids if n != leader]
    began = time.monotonic()
    process.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
    new_leader, _ = quorum.wait_for_leader(
        ROUND_TIMEOUT_S, frozenset({leader}), survivors, poll_s=POLL_S
    )
    visible = time.monotonic() - began
    create_succeeds(quorum, new_leader, name, began + ROUND_TIMEOUT_S)
    writable = time.monotonic() - began
    status = process.wait(30)
    if not hard and status != 0:
        raise RuntimeError(f"node {leader} exited {status} on SIGTERM")
    quorum.start_node(leader)
    return visible, writable


def failovers(quorum: Quorum, rounds: int, hard: bool, progress: bool) -> list[tuple[float, float]]:
    results = []
    how = "kill" if hard else "term"
    for index in range(rounds):
        results.append(failover_round(quorum, hard, f"after-{how}-{index}"))
        if progress:
            visible, writable = results[-1]
            print(
                f"  {how} {index + 1}/{rounds}: leader visible {visible:.2f} s, "
                f"CreateTopics ok {writable:.2f} s",
                flush=True,
            )
    return results


def wait_converged(quorum: Quorum) -> None:
    """Until every voter's log ends at the leader's high watermark."""
    addresses = [(HOST, port) for port in quorum.controller_ports.values()]
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            state = asyncio.run(describe(addresses))
        except QuorumToolError:
            state = None
        if state is not None and {v.log_end_offset for v in state.voters} == {state.high_watermark}:
            return
        time.sleep(0.1)
    raise RuntimeError("the voters' logs did not converge")


def snapshot_files(quorum: Quorum, node_id: int) -> list[Path]:
    return sorted((quorum.data_dir(node_id) / METADATA_LOG_DIR).glob("*.checkpoint"))


def restart_times(base: Path, rounds: int) -> tuple[list[float], list[float], int]:
    """(restart seconds of a follower without a snapshot, with one; log records)."""
    # No snapshot until the measured run asks for one (loading 100,000 records would
    # otherwise reach the default 20 MiB threshold at the first start).
    never = {"metadata.log.max.record.bytes.between.snapshots": str(2**62)}
    quorum = Quorum(base / "restart", properties=never, serve_args=SERVE_ARGS)
    try:
        quorum.start()
        leader, _ = quorum.wait_for_leader(ROUND_TIMEOUT_S)
        # Every log as long as the leader's (and flushed: a follower reports only what
        # it flushed), then all three killed at once: a clean stop would not do, as each
        # broker's controlled shutdown has the controller write a FenceBroker that the
        # nodes already stopped never receive (and a follower stopped last would elect
        # itself and write a LeaderChange).
        wait_converged(quorum)
        for node_id in quorum.node_ids:
            quorum.kill(node_id)
        records = history("churn")
        ends = {append_history(quorum.data_dir(n), records) for n in quorum.node_ids}
        if len(ends) != 1:
            raise RuntimeError(f"the nodes' metadata logs differ in length: {ends}")
        quorum.start()
        leader, _ = quorum.wait_for_leader(ROUND_TIMEOUT_S)
        follower = next(n for n in quorum.node_ids if n != leader)
        if snapshot_files(quorum, follower):
            raise RuntimeError("the follower wrote a snapshot before it was asked to")
        plain = []
        for _ in range(rounds):
            quorum.stop(follower)
            plain.append(quorum.start_node(follower))
        # One run with a low threshold: the node snapshots its image itself.
        node = quorum.nodes[follower]
        node.extra_args += [
            "--override",
            f"metadata.log.max.record.bytes.between.snapshots={SNAPSHOT_BYTES}",
        ]
        quorum.stop(follower)
        quorum.start_node(follower)
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        index = 0
        while not snapshot_files(quorum, follower):
            if time.monotonic() > deadline:
                raise RuntimeError("the follower wrote no snapshot")
            # Commits past the threshold make one due, whatever counted at load.
            create_succeeds(quorum, leader, f"snapshot-trigger-{index}", deadline)
            index += 1
            time.sleep(0.5)
        del node.extra_args[-2:]
        with_snapshot = []
        for _ in range(rounds):
            quorum.stop(follower)
            with_snapshot.append(quorum.start_node(follower))
        return plain, with_snapshot, len(records)
    finally:
        quorum.close()


def row(name: str, goal: str, values: Sequence[float], scale: float, unit: str) -> str:
    shown = [percentile(values, 0.5), percentile(values, 0.99), max(values)]
    digits = 1 if scale > 1 else 2
    cells = " ".join(f"{value * scale:>9.{digits}f}" for value in shown)
    return f"{name:<44} {goal:>10} {cells} {unit:<3} {len(values):>4}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds of each")
    parser.add_argument("--creates", type=int, default=300)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--terms", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=3, help="rounds per restart case")
    parser.add_argument(
        "--parts",
        default="creates,failover,restart",
        help="which parts to run (comma-separated: creates, failover, restart)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--verbose", action="store_true", help="print every failover round")
    args = parser.parse_args(argv)
    if args.quick:
        args.creates, args.kills, args.terms, args.restarts = 50, 3, 3, 1
    started = time.perf_counter()
    load_start = load_average()
    print(f"load average at start: {show_load(load_start)}", flush=True)
    warn_if_busy(load_start)
    errors: list[str] = []
    lines: list[str] = []
    misses = 0

    def measured(what: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as error:  # one failed part still prints the others
            errors.append(f"{what}: {type(error).__name__}: {error}")

    with tempfile.TemporaryDirectory(prefix="odradek-cluster-bench-") as tmp:
        base = Path(tmp)

        def creates() -> None:
            single = single_node_creates(base, args.creates)
            with Quorum(base / "quorum-creates", serve_args=SERVE_ARGS) as quorum:
                leader, _ = quorum.wait_for_leader(ROUND_TIMEOUT_S)
                quorum_ms = create_latencies(quorum.broker_address(leader), args.creates, "q")
            lines.append(row("CreateTopics, single node", "-", single, 1000, "ms"))
            lines.append(
                row("CreateTopics, 3-voter quorum (to the leader)", "-", quorum_ms, 1000, "ms")
            )
            ratio = statistics.median(quorum_ms) / statistics.median(single)
            lines.append(f"{'  quorum / single node, p50':<44} {'':>10} {ratio:>9.2f}")

        def failover() -> None:
            nonlocal misses
            with Quorum(base / "quorum-failover", serve_args=SERVE_ARGS) as quorum:
                kills = failovers(quorum, args.kills, True, args.verbose)
                terms = failovers(quorum, args.terms, False, args.verbose)
            kill_p99 = percentile([w for _, w in kills], 0.99)
            term_max = max(w for _, w in terms)
            misses += (kill_p99 > KILL_GOAL_S) + (term_max > TERM_GOAL_S)
            mark = {True: "met", False: "MISSED"}
            lines.append(
                row("failover, kill -9: new leader visible", "", [v for v, _ in kills], 1, "s")
            )
            lines.append(
                row(
                    f"failover, kill -9: CreateTopics ok ({mark[kill_p99 <= KILL_GOAL_S]})",
                    f"p99<={KILL_GOAL_S:g}",
                    [w for _, w in kills],
                    1,
                    "s",
                )
            )
            lines.append(
                row("failover, SIGTERM: new leader visible", "", [v for v, _ in terms], 1, "s")
            )
            lines.append(
                row(
                    f"failover, SIGTERM: CreateTopics ok ({mark[term_max <= TERM_GOAL_S]})",
                    f"<={TERM_GOAL_S:g}",
                    [w for _, w in terms],
                    1,
                    "s",
                )
            )

        def restarts() -> None:
            plain, snap, records = restart_times(base, args.restarts)
            lines.append(
                row(f"follower restart, {records:,} records, no snapshot", "", plain, 1, "s")
            )
            lines.append(row(f"follower restart, {records:,} records, snapshot", "", snap, 1, "s"))
            ratio = statistics.median(snap) / statistics.median(plain)
            lines.append(f"{'  snapshot / no snapshot, median':<44} {'':>10} {ratio:>9.2f}")

        parts = set(args.parts.split(","))
        if "creates" in parts:
            measured("CreateTopics latency", creates)
        if "failover" in parts:
            measured("failover", failover)
        if "restart" in parts:
            measured("restart", restarts)
    print(
        f"{'measurement':<44} {'goal':>10} {'p50':>9} {'p99':>9} {'max':>9} {'':<3} {'n':>4}",
        flush=True,
    )
    for line in lines:
        print(line, flush=True)
    if misses:
        print(f"{misses} goal(s) missed", flush=True)
    return finish("cluster", started, errors, misses, args.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
