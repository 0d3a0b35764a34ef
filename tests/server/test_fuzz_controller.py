"""Hostile requests on the CONTROLLER plane of a real single-voter ``odradek serve``.

A combined node (process.roles=broker,controller, controller.quorum.voters naming only
itself, formatted with ``odradek storage format``) runs under ``RLIMIT_AS`` = 4 GiB,
as in test_fuzz_requests.py, and every API its controller listener serves (Vote,
BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot, DescribeQuorum, ApiVersions,
DescribeCluster) gets, on its controller port:

* bytes: every count and length inflated (one frame per connection; each must close
  it), set to null, random bodies behind valid headers, mutated full requests, raw
  random bytes;
* meaning: well-formed quorum requests that no honest peer sends — another cluster's
  id, voter ids that are not voters (or the node itself), epochs far in the future
  and negative, fetch offsets beyond the log end and negative, a last fetched epoch
  from the future, a FetchSnapshot for a snapshot that does not exist or a position
  past the end of one that does, a topic or partition other than
  ``__cluster_metadata``-0 — each answered with the error Kafka's KafkaRaftClient
  answers (INCONSISTENT_CLUSTER_ID and INVALID_REQUEST for a foreign partition at the
  top level, the rest per partition).

Afterwards the node must be alive with nothing committed lost: it still leads in its
epoch, DescribeQuorum and ``odradek metadata-quorum describe`` work, CreateTopics
works and the topic created before the fuzzing is still there; RSS stayed bounded and
the log holds no traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.raft import wire, wire_describe_quorum
from odradek.raft.disk_log import metadata_log_directory
from odradek.raft.log import SnapshotId
from odradek.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    Request,
    VoteRequest,
)
from odradek.raft.snapshots import SNAPSHOT_SUFFIX
from odradek.server.handlers import Plane
from tests.server.test_fuzz_requests import (
    ADDRESS_SPACE_LIMIT,
    RANDOM_RAW_CONNECTIONS,
    RSS_GROWTH_LIMIT_KIB,
    frame,
    inflated_frames,
    null_frames,
    random_frames,
    send_all,
    status_kib,
)
from tests.server.test_protocol import assert_clean_log
from tests.support.broker import BrokerProcess
from tests.support.kraft import free_ports
from tests.support.wire import WireClient, create_topic

NODE_ID = 1
NOT_A_VOTER = 7
FAR_EPOCH = 2**31 - 1


@dataclass
class Voter:
    process: BrokerProcess
    cluster_id: str
    controller: str  # host:port of the CONTROLLER listener

    @property
    def controller_port(self) -> int:
        return int(self.controller.rsplit(":", 1)[1])


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def voter(tmp_path: Path) -> Iterator[Voter]:
    (port,) = free_ports(1)
    data_dir = tmp_path / "node"
    properties = tmp_path / "node.properties"
    properties.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={NODE_ID}",
                f"controller.quorum.voters={NODE_ID}@127.0.0.1:{port}",
                f"listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
                "inter.broker.listener.name=PLAINTEXT",
                "controller.listener.names=CONTROLLER",
                f"log.dirs={data_dir}",
                # A snapshot after every change, so FetchSnapshot has one to read.
                "metadata.log.max.record.bytes.between.snapshots=1",
                "",
            ]
        )
    )
    cluster_id = odradek("storage", "random-uuid").stdout.strip()
    formatted = odradek("storage", "format", "-t", cluster_id, "-c", str(properties))
    assert formatted.returncode == 0, formatted.stderr
    process = BrokerProcess(data_dir, ["--config", str(properties)]).start()
    try:
        resource.prlimit(
            process.pid, resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT)
        )
        yield Voter(process, cluster_id, process.urls["CONTROLLER"])
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def describe(voter: Voter) -> Any:
    """DescribeQuorum's one partition, asked of the controller listener."""
    with WireClient(voter.controller) as client:
        response = client.request(wire_describe_quorum.describe_quorum_request(2))
    assert response.error_code == ErrorCode.none, response
    (topic,) = response.topics
    (partition,) = topic.partitions
    return partition


def assert_still_leads(voter: Voter, epoch: int, topics: list[str]) -> None:
    """Alive, leading in the same epoch, committed metadata intact, writes work."""
    assert voter.process.alive(), voter.process.log()[-3000:]
    partition = describe(voter)
    assert partition.error_code == ErrorCode.none
    assert (partition.leader_id, partition.leader_epoch) == (NODE_ID, epoch)
    status = odradek(
        "metadata-quorum", "--bootstrap-controller", voter.controller, "describe", "--status"
    )
    assert status.returncode == 0, status.stderr
    fields = dict(line.split(":", 1) for line in status.stdout.splitlines() if ":" in line)
    assert int(fields["LeaderId"]) == NODE_ID
    assert [v["id"] for v in json.loads(fields["CurrentVoters"])] == [NODE_ID]
    with WireClient(voter.process.bootstrap) as client:
        for name in topics:
            assert create_topic(client, name).error_code == ErrorCode.topic_already_exists
        fresh = f"after-{len(topics)}"
        assert create_topic(client, fresh).error_code == ErrorCode.none
        topics.append(fresh)


def test_bytes_on_every_controller_api_and_version(voter: Voter) -> None:
    epoch = describe(voter).leader_epoch
    topics: list[str] = []
    assert_still_leads(voter, epoch, topics)
    pid = voter.process.pid
    rss_before = status_kib(pid, "VmRSS")

    inflated = inflated_frames(Plane.CONTROLLER)
    assert len(inflated) > 300  # every controller API contributes its positions
    closed = asyncio.run(send_all(voter.controller_port, [frame(f) for f in inflated]))
    assert closed == len(inflated), "every inflated request closes its connection"
    assert_still_leads(voter, epoch, topics)

    rng = random.Random(595)
    garbage = [frame(f) for f in null_frames(Plane.CONTROLLER)]
    garbage += [frame(f) for f in random_frames(rng, Plane.CONTROLLER)]
    garbage += [rng.randbytes(rng.randrange(1, 300)) for _ in range(RANDOM_RAW_CONNECTIONS)]
    asyncio.run(send_all(voter.controller_port, garbage))

    assert_still_leads(voter, epoch, topics)
    peak = status_kib(pid, "VmHWM")
    assert peak - rss_before < RSS_GROWTH_LIMIT_KIB, (rss_before, peak)
    assert_clean_log(voter.process)


# --- meaning ---------------------------------------------------------------------------


def partition_error(response: Any) -> ErrorCode:
    """The one partition's error of a quorum response (Fetch's is in ``responses``)."""
    topics = getattr(response, "topics", None)
    if topics is None:
        topics = response.responses
    (topic,) = topics
    (partition,) = topic.partitions
    return ErrorCode(partition.error_code)


def ask(client: WireClient, message: Request, version: int | None = None) -> Any:
    api_key = wire.api_key_of(message)
    if version is None:
        version = wire.VERSIONS[api_key][1]
    return client.request(wire.request_to_kio(message, version))


def foreign_topic(entity: Any, name: str | None = "other-topic", index: int = 0) -> Any:
    """``entity`` with its one topic renamed (and its one partition renumbered)."""
    (topic,) = entity.topics
    (partition,) = topic.partitions
    field = next(f for f in ("partition_index", "partition", "index") if hasattr(partition, f))
    partition = dataclasses.replace(partition, **{field: index})
    changes: dict[str, Any] = {"partitions": (partition,)}
    if name is not None:
        if hasattr(topic, "topic_name"):
            changes["topic_name"] = name
        elif hasattr(topic, "topic"):
            changes["topic"] = name
        elif hasattr(topic, "name"):
            changes["name"] = name
        if hasattr(topic, "topic_id"):
            changes["topic_id"] = uuid.uuid4()
    return dataclasses.replace(entity, topics=(dataclasses.replace(topic, **changes),))


def snapshot_on_disk(voter: Voter) -> tuple[SnapshotId, int]:
    directory = metadata_log_directory(voter.process.data_dir)
    paths = sorted(directory.glob("*" + SNAPSHOT_SUFFIX))
    assert paths, "no metadata snapshot was written"
    newest = max(paths, key=lambda p: int(p.name.split("-")[0]))
    end_text, epoch_text = newest.name[: -len(SNAPSHOT_SUFFIX)].split("-")
    return SnapshotId(end_offset=int(end_text), epoch=int(epoch_text)), newest.stat().st_size


def test_meaningful_but_wrong_quorum_requests_get_kafkas_errors(voter: Voter) -> None:
    epoch = describe(voter).leader_epoch
    topics: list[str] = []
    assert_still_leads(voter, epoch, topics)  # a change, and with it a snapshot
    for _ in range(200):
        try:
            snapshot, size = snapshot_on_disk(voter)
            break
        except AssertionError:
            time.sleep(0.05)
    else:
        raise AssertionError("no metadata snapshot was written")
    cid = voter.cluster_id

    def vote(**changes: Any) -> VoteRequest:
        base = VoteRequest(
            cluster_id=cid,
            voter_id=NODE_ID,
            replica_epoch=epoch + 1,
            replica_id=NOT_A_VOTER,
            last_offset_epoch=epoch,
            last_offset=10**9,
            pre_vote=False,
        )
        return dataclasses.replace(base, **changes)

    def begin(**changes: Any) -> BeginQuorumEpochRequest:
        base = BeginQuorumEpochRequest(
            cluster_id=cid, voter_id=NODE_ID, leader_id=NOT_A_VOTER, leader_epoch=FAR_EPOCH
        )
        return dataclasses.replace(base, **changes)

    def end_epoch(**changes: Any) -> EndQuorumEpochRequest:
        base = EndQuorumEpochRequest(
            cluster_id=cid,
            leader_id=NOT_A_VOTER,
            leader_epoch=FAR_EPOCH,
            preferred_candidates=(NODE_ID,),
        )
        return dataclasses.replace(base, **changes)

    def fetch(**changes: Any) -> FetchRequest:
        base = FetchRequest(
            cluster_id=cid,
            replica_id=NOT_A_VOTER,
            replica_epoch=-1,
            current_leader_epoch=epoch,
            fetch_offset=0,
            last_fetched_epoch=0,
            log_start_offset=0,
            partition_max_bytes=1 << 20,
        )
        return dataclasses.replace(base, **changes)

    def fetch_snapshot(**changes: Any) -> FetchSnapshotRequest:
        base = FetchSnapshotRequest(
            cluster_id=cid,
            replica_id=NOT_A_VOTER,
            max_bytes=1 << 20,
            current_leader_epoch=epoch,
            snapshot_id=snapshot,
            position=0,
        )
        return dataclasses.replace(base, **changes)

    partition_level: list[tuple[str, Request, ErrorCode]] = [
        ("vote from a non-voter", vote(), ErrorCode.inconsistent_voter_set),
        ("pre-vote from a non-voter", vote(pre_vote=True), ErrorCode.inconsistent_voter_set),
        ("vote far ahead", vote(replica_epoch=FAR_EPOCH), ErrorCode.inconsistent_voter_set),
        ("vote from itself", vote(replica_id=NODE_ID), ErrorCode.invalid_request),
        ("vote from -1", vote(replica_id=-1), ErrorCode.inconsistent_voter_set),
        ("begin from a non-voter", begin(), ErrorCode.inconsistent_voter_set),
        ("begin from itself", begin(leader_id=NODE_ID), ErrorCode.inconsistent_voter_set),
        ("begin in a past epoch", begin(leader_epoch=-5), ErrorCode.fenced_leader_epoch),
        ("end from a non-voter", end_epoch(), ErrorCode.inconsistent_voter_set),
        ("end from itself", end_epoch(leader_id=NODE_ID), ErrorCode.inconsistent_voter_set),
        ("end from -1", end_epoch(leader_id=-1), ErrorCode.inconsistent_voter_set),
        ("end in a past epoch", end_epoch(leader_epoch=-1), ErrorCode.fenced_leader_epoch),
        ("fetch far ahead", fetch(current_leader_epoch=FAR_EPOCH), ErrorCode.unknown_leader_epoch),
        ("fetch in a past epoch", fetch(current_leader_epoch=-1), ErrorCode.fenced_leader_epoch),
        ("fetch a negative offset", fetch(fetch_offset=-3), ErrorCode.invalid_request),
        ("fetch from itself", fetch(replica_id=NODE_ID), ErrorCode.invalid_request),
        ("fetch from -1", fetch(replica_id=-1), ErrorCode.invalid_request),
        (
            "fetch a future last epoch",
            fetch(last_fetched_epoch=epoch + 5),
            ErrorCode.invalid_request,
        ),
        (
            "snapshot that does not exist",
            fetch_snapshot(snapshot_id=SnapshotId(end_offset=snapshot.end_offset + 99, epoch=9)),
            ErrorCode.snapshot_not_found,
        ),
        (
            "snapshot id -1",
            fetch_snapshot(snapshot_id=SnapshotId(end_offset=-1, epoch=-1)),
            ErrorCode.snapshot_not_found,
        ),
        (
            "snapshot position past its end",
            fetch_snapshot(position=size + 1),
            ErrorCode.position_out_of_range,
        ),
        ("snapshot position -1", fetch_snapshot(position=-1), ErrorCode.position_out_of_range),
        (
            "snapshot in a past epoch",
            fetch_snapshot(current_leader_epoch=-1),
            ErrorCode.fenced_leader_epoch,
        ),
    ]
    top_level: list[tuple[str, Any, ErrorCode]] = []
    for maker in (vote, begin, end_epoch, fetch, fetch_snapshot):
        message = maker(cluster_id="another-cluster")
        api_key = wire.api_key_of(message)
        low, high = wire.VERSIONS[api_key]
        for version in (low, high):
            entity = wire.request_to_kio(message, version)
            top_level.append(
                (
                    f"{type(message).__name__} v{version} foreign cluster",
                    entity,
                    ErrorCode.inconsistent_cluster_id,
                )
            )
            proper = wire.request_to_kio(maker(), version)
            top_level.append(
                (
                    f"{type(message).__name__} v{version} other topic",
                    foreign_topic(proper),
                    ErrorCode.invalid_request,
                )
            )
            top_level.append(
                (
                    f"{type(message).__name__} v{version} partition 3",
                    foreign_topic(proper, None, 3),
                    ErrorCode.invalid_request,
                )
            )

    wrong = []
    with WireClient(voter.controller) as client:
        for name, message, expected in partition_level:
            for version in sorted(set(wire.VERSIONS[wire.api_key_of(message)])):
                try:
                    response = ask(client, message, version)
                except wire.WireError:  # a pre-vote cannot be said below Vote v2
                    continue
                got = ErrorCode(response.error_code)
                if got == ErrorCode.none:
                    got = partition_error(response)
                if got != expected:
                    wrong.append(f"{name} v{version}: {got.name}, not {expected.name}")
        for name, entity, expected in top_level:
            response = client.request(entity)
            if ErrorCode(response.error_code) != expected:
                wrong.append(f"{name}: {ErrorCode(response.error_code).name}, not {expected.name}")

        # KIP-853 (v1): a Vote or BeginQuorumEpoch addressed to another voter.
        for message in (vote(voter_id=5, replica_id=NODE_ID), begin(voter_id=5)):
            got = partition_error(ask(client, message, 1))
            if got != ErrorCode.invalid_voter_key:
                wrong.append(f"{type(message).__name__} for voter 5: {got.name}")

        # A fetch beyond the log end is a follower with a longer log: the leader answers
        # with where its epoch ends (the follower truncates), never with entries.
        response = ask(client, fetch(fetch_offset=10**12, last_fetched_epoch=epoch))
        (topic,) = response.responses
        (partition,) = topic.partitions
        assert partition.error_code == ErrorCode.none
        assert partition.diverging_epoch.epoch == epoch
        assert partition.diverging_epoch.end_offset < 10**12
        assert not partition.records

        # The snapshot that does exist reads whole, and an empty chunk at its end.
        whole = ask(client, fetch_snapshot())
        (topic,) = whole.topics
        (partition,) = topic.partitions
        assert partition.error_code == ErrorCode.none and partition.size == size
        at_end = ask(client, fetch_snapshot(position=size))
        assert partition_error(at_end) == ErrorCode.none
    assert not wrong, "\n".join(wrong)
    assert_still_leads(voter, epoch, topics)
    assert_clean_log(voter.process)
