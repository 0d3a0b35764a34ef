"""odradek metadata-quorum against three Raft controllers over real sockets.

The quorum is the driver test's: three RaftDrivers in this process, each behind its own
controller-listener SocketServer on a port of its own. The tool runs on a thread of its
own (it starts its own event loop, as from the command line) and asks whichever
controller it is given; it must find the leader through DescribeCluster and report
what the leader's DescribeQuorum says, in kafka-metadata-quorum.sh's layout.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.cli.main import main
from odradek.client._core.connection import BrokerAddress, BrokerConnection, request_entity
from tests.raft.test_driver import CLUSTER_ID, Cluster, batch, run, wait_until
from tests.support.broker import running_broker


async def tool(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = await asyncio.to_thread(main, ["metadata-quorum", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def fields(out: str) -> dict[str, str]:
    result = {}
    for line in out.splitlines():
        label, _, value = line.partition(":")
        result[label] = value.strip()
    return result


def test_status_and_replication_from_any_controller(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.wait_for_leader(5.0)
        assert leader.driver is not None
        offset = await leader.driver.append(batch(b"x"))

        async def all_caught_up() -> bool:
            return all(n.has(offset) for n in cluster.running())

        await wait_until(all_caught_up, 3.0, "every node caught up")
        follower = next(n for n in cluster.running() if n is not leader)
        status, out, err = await tool(
            capsys, "--bootstrap-controller", f"127.0.0.1:{follower.port}", "describe", "--status"
        )
        assert status == 0, err
        seen = fields(out)
        assert list(seen) == [
            "ClusterId",
            "LeaderId",
            "LeaderEpoch",
            "HighWatermark",
            "MaxFollowerLag",
            "MaxFollowerLagTimeMs",
            "CurrentVoters",
            "CurrentObservers",
        ]
        assert seen["ClusterId"] == CLUSTER_ID
        assert int(seen["LeaderId"]) == leader.node_id
        assert int(seen["LeaderEpoch"]) == leader.driver.epoch
        assert int(seen["HighWatermark"]) >= offset + 1
        voters = json.loads(seen["CurrentVoters"])
        assert [v["id"] for v in voters] == [1, 2, 3]
        ports = {n.node_id: n.port for n in cluster.nodes.values()}
        assert all(v["endpoints"] == [f"CONTROLLER://127.0.0.1:{ports[v['id']]}"] for v in voters)
        assert json.loads(seen["CurrentObservers"]) == []

        status, out, err = await tool(
            capsys,
            "--bootstrap-controller",
            f"127.0.0.1:{follower.port}",
            "describe",
            "--replication",
        )
        assert status == 0, err
        header, *rows = [line.split() for line in out.splitlines()]
        assert header == [
            "NodeId",
            "LogEndOffset",
            "Lag",
            "LastFetchTimestamp",
            "LastCaughtUpTimestamp",
            "Status",
        ]
        assert rows[0][0] == str(leader.node_id) and rows[0][-1] == "Leader"
        assert sorted(int(r[0]) for r in rows) == [1, 2, 3]
        assert {r[-1] for r in rows[1:]} == {"Follower"}
        assert all(int(r[1]) > offset for r in rows[:1])

    run(scenario, tmp_path)


def test_a_dead_first_address_falls_through_to_the_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.wait_for_leader(5.0)
        dead = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        dead_port = dead.sockets[0].getsockname()[1]
        dead.close()
        await dead.wait_closed()
        status, out, err = await tool(
            capsys,
            "--bootstrap-controller",
            f"127.0.0.1:{dead_port},127.0.0.1:{leader.port}",
            "describe",
            "--status",
        )
        assert status == 0, err
        assert int(fields(out)["LeaderId"]) == leader.node_id

    run(scenario, tmp_path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bootstrap-controller", "nowhere", "describe", "--status"], "is not HOST:PORT"),
        (["--bootstrap-controller", "127.0.0.1:1", "describe", "--status"], "cannot reach"),
        (["--bootstrap-server", "127.0.0.1:1", "describe", "--status"], "cannot reach"),
    ],
)
def test_failures_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["metadata-quorum", *args]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata-quorum", "describe", "--status"]) == 2
    assert main(["metadata-quorum", "--bootstrap-controller", "h:1", "describe"]) == 2


def test_a_controller_listener_refuses_to_describe_brokers(tmp_path: Path) -> None:
    """KIP-919: DescribeCluster for brokers (endpoint type 1) is for broker listeners."""

    async def scenario(cluster: Cluster) -> None:
        leader = await cluster.wait_for_leader(5.0)
        connection = BrokerConnection(
            BrokerAddress(-1, "127.0.0.1", leader.port),
            client_id="test",
            request_timeout_s=5.0,
            client_versions={18: (0, 3), 60: (1, 1)},
        )
        await connection.connect()
        try:
            for endpoint_type, expected in ((1, ErrorCode.unsupported_endpoint_type), (2, None)):
                response = await connection.send(
                    request_entity(
                        60,
                        1,
                        include_cluster_authorized_operations=False,
                        endpoint_type=endpoint_type,
                    )
                )
                if expected is None:
                    assert response.error_code == ErrorCode.none
                    assert response.controller_id == leader.node_id
                    assert sorted(b.broker_id for b in response.brokers) == [1, 2, 3]
                else:
                    assert response.error_code == expected and response.brokers == ()
        finally:
            await connection.close()

    run(scenario, tmp_path)


def test_bootstrap_server_on_the_zero_config_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broker listener answers DescribeQuorum; the zero-config node from its own
    single-voter quorum (nothing to forward to)."""
    with running_broker(tmp_path / "data") as broker:
        assert (
            main(
                ["metadata-quorum", "--bootstrap-server", broker.bootstrap, "describe", "--status"]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert int(fields(out)["LeaderId"]) == 1
        assert int(fields(out)["HighWatermark"]) > 0
        assert json.loads(fields(out)["CurrentObservers"]) == []
        assert (
            main(
                [
                    "metadata-quorum",
                    "--bootstrap-server",
                    broker.bootstrap,
                    "describe",
                    "--replication",
                ]
            )
            == 0
        )
        rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
        assert [(row[0], row[-1]) for row in rows] == [("1", "Leader")]
