"""DescribeClientQuotas / AlterClientQuotas (KIP-546) on real brokers: kafka-python's
protocol messages as the foreign client, odradek's admin client, ``odradek configs``
with kafka-configs.sh's words and lines, and a quorum whose follower forwards the
change to the active controller (every node then answers it)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin.client_quotas import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)
from kio.schema.errors import ErrorCode

from odradek.cli.main import main
from odradek.client._core.connection import request_entity
from odradek.client._core.types import KafkaException
from odradek.client.admin.aio import AIOKafkaAdminClient
from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.quotas import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ClientQuotaFilterComponent,
)
from tests.server.test_kraft_cluster import TIMEOUTS, quorum_status
from tests.support.broker import BrokerProcess, running_broker
from tests.support.kraft import Quorum
from tests.support.wire import WireClient

INVALID_REQUEST = 42
Alter = AlterClientQuotasRequest
Describe = DescribeClientQuotasRequest


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("quota-apis") / "data") as process:
        yield process


class KafkaPython:
    """kafka-python's own request classes over its own connection manager."""

    def __init__(self, bootstrap: str) -> None:
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap)

    def send(self, request: Any) -> Any:
        manager = self.admin._manager

        async def call() -> Any:
            return await manager.send(request)

        return manager.run(call)

    def alter(self, entries: list[tuple[dict[str, str | None], dict[str, float | None]]]) -> Any:
        return self.send(
            Alter(
                entries=[
                    Alter.EntryData(
                        entity=[
                            Alter.EntryData.EntityData(entity_type=t, entity_name=n)
                            for t, n in entity.items()
                        ],
                        ops=[
                            Alter.EntryData.OpData(key=k, value=v or 0.0, remove=v is None)
                            for k, v in ops.items()
                        ],
                    )
                    for entity, ops in entries
                ],
                validate_only=False,
            )
        )

    def describe(self, components: list[tuple[str, int, str | None]], strict: bool) -> Any:
        return self.send(
            Describe(
                components=[
                    Describe.ComponentData(entity_type=t, match_type=m, match=n)
                    for t, m, n in components
                ],
                strict=strict,
            )
        )

    def close(self) -> None:
        self.admin.close()


def _entries(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


def test_kafka_python_alters_and_describes_client_quotas(broker: BrokerProcess) -> None:
    client = KafkaPython(broker.bootstrap)
    try:
        response = client.alter(
            [
                ({"user": "kp-alice"}, {"producer_byte_rate": 1024.0}),
                ({"user": "kp-alice", "client-id": None}, {"consumer_byte_rate": 2048.0}),
                ({"client-id": "kp-app"}, {"request_percentage": 12.5}),
                ({"user": "kp-bad"}, {"no_such_key": 1.0}),
                ({"ip": "10.0.0.7", "user": "x"}, {"connection_creation_rate": 5.0}),
                ({"ip": "10.0.0.7"}, {"connection_creation_rate": 5.0}),
            ]
        )
        codes = [e.error_code for e in response.entries]
        assert codes == [0, 0, 0, INVALID_REQUEST, INVALID_REQUEST, 0], response
        assert "no_such_key" in response.entries[3].error_message

        exact = client.describe([("user", 0, "kp-alice")], strict=False)
        assert exact.error_code == 0
        assert _entries(exact) == {
            (("user", "kp-alice"),): {"producer_byte_rate": 1024.0},
            (("client-id", None), ("user", "kp-alice")): {"consumer_byte_rate": 2048.0},
        }
        strict = client.describe([("user", 0, "kp-alice")], strict=True)
        assert list(_entries(strict)) == [(("user", "kp-alice"),)]
        by_ip = client.describe([("ip", 2, None)], strict=True)
        assert _entries(by_ip) == {(("ip", "10.0.0.7"),): {"connection_creation_rate": 5.0}}
        bad = client.describe([("user", 0, None)], strict=False)
        assert bad.error_code == INVALID_REQUEST and bad.entries is None

        removed = client.alter([({"client-id": "kp-app"}, {"request_percentage": None})])
        assert removed.entries[0].error_code == 0
        assert _entries(client.describe([("client-id", 0, "kp-app")], strict=True)) == {}
    finally:
        client.close()


def test_odradek_admin_client_quotas(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        default_user = ClientQuotaEntity({"user": None})
        pair = ClientQuotaEntity({"user": "od-bob", "client-id": "od-app"})
        futures = admin.alter_client_quotas(
            [
                ClientQuotaAlteration(default_user, {"producer_byte_rate": 4096}),
                ClientQuotaAlteration(pair, {"consumer_byte_rate": 8192, "request_percentage": 25}),
            ]
        )
        for future in futures.values():
            assert future.result(30) is None
        found = admin.describe_client_quotas(
            ClientQuotaFilter.contains([ClientQuotaFilterComponent.of_entity("user", "od-bob")])
        ).result(30)
        assert found == {pair: {"consumer_byte_rate": 8192.0, "request_percentage": 25.0}}
        defaults = admin.describe_client_quotas(
            ClientQuotaFilter.contains_only([ClientQuotaFilterComponent.of_default_entity("user")])
        ).result(30)
        assert defaults == {default_user: {"producer_byte_rate": 4096.0}}
        # validate_only checks and stores nothing
        check = admin.alter_client_quotas(
            [ClientQuotaAlteration(pair, {"producer_byte_rate": 1})], validate_only=True
        )
        assert check[pair].result(30) is None
        assert "producer_byte_rate" not in admin.describe_client_quotas().result(30)[pair]
        wrong = admin.alter_client_quotas(
            [ClientQuotaAlteration(pair, {"connection_creation_rate": 3})]
        )
        with pytest.raises(KafkaException, match=r"INVALID_REQUEST|invalid quota key"):
            wrong[pair].result(30)
    finally:
        admin.close()


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def odradek_process(broker: BrokerProcess, *args: str) -> Done:
    """``python -m odradek configs ...`` as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "odradek", "configs", *args, "--bootstrap-server", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr
    return Done(done.returncode, done.stdout, done.stderr)


def test_configs_cli_speaks_kafka_configs_for_quotas(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    def odradek(broker: BrokerProcess, *args: str) -> Done:
        """The same command in this process (each process start costs a second)."""
        status = main(["configs", *args, "--bootstrap-server", broker.bootstrap])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return Done(status, out, err)

    def ok(*args: str) -> str:
        done = odradek(broker, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = odradek_process(
        broker,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "cli-alice",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "Completed updating config for user cli-alice."
    ok("--alter", "--entity-type", "clients", "--entity-name", "cli-app", "--add-config",
       "request_percentage=50")  # fmt: skip
    pair = ["--entity-type", "users", "--entity-name", "cli-alice"]
    pair += ["--entity-type", "clients", "--entity-name", "cli-app"]
    ok("--alter", *pair, "--add-config", "producer_byte_rate=10240000")
    out = ok("--alter", "--entity-type", "clients", "--entity-default", "--add-config",
             "consumer_byte_rate=1000")  # fmt: skip
    assert out.strip() == "Completed updating default config for clients."

    lines = ok("--describe", "--entity-type", "users", "--entity-name", "cli-alice").splitlines()
    assert lines == [
        "Quota configs for user-principal 'cli-alice' are "
        "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0"
    ]
    both = ok("--describe", "--entity-type", "users", "--entity-name", "cli-alice",
              "--entity-type", "clients", "--entity-name", "cli-app")  # fmt: skip
    assert both.strip() == (
        "Quota configs for user-principal 'cli-alice', client-id 'cli-app' are "
        "producer_byte_rate=1.024E7"
    )
    defaults = ok("--describe", "--entity-type", "clients", "--entity-default")
    assert (
        defaults.strip() == "Quota configs for the default client-id are consumer_byte_rate=1000.0"
    )
    every_client = ok("--describe", "--entity-type", "clients")
    assert "client-id 'cli-app' are request_percentage=50.0" in every_client
    assert "the default client-id" in every_client

    ok("--alter", "--entity-type", "users", "--entity-name", "cli-alice", "--delete-config",
       "consumer_byte_rate")  # fmt: skip
    after = ok("--describe", "--entity-type", "users", "--entity-name", "cli-alice")
    assert after.strip().endswith("are producer_byte_rate=1048576.0")

    bad_key = odradek(broker, "--alter", "--entity-type", "users", "--entity-name", "x",
                      "--add-config", "bogus=1")  # fmt: skip
    assert bad_key.returncode != 0 and "invalid quota key" in bad_key.stderr
    assert len(bad_key.stderr.strip().splitlines()) == 1
    no_name = odradek(broker, "--alter", "--entity-type", "users", "--add-config", "x=1")
    assert no_name.returncode != 0 and "name each entity" in no_name.stderr


def test_quota_change_through_a_follower_reaches_every_node(tmp_path: Path) -> None:
    with Quorum(tmp_path, properties=TIMEOUTS) as quorum:
        nodes = quorum.nodes
        status = quorum_status(nodes[1])
        assert status is not None
        leader = int(status["LeaderId"])
        follower = next(n for i, n in nodes.items() if i != leader)
        client = KafkaPython(follower.bootstrap)
        try:
            response = client.alter([({"user": "q-carol"}, {"producer_byte_rate": 777.0})])
            assert response.entries[0].error_code == 0, response
            # The follower answered once its own image had the quota.
            found = _entries(client.describe([("user", 0, "q-carol")], strict=True))
            assert found == {(("user", "q-carol"),): {"producer_byte_rate": 777.0}}
        finally:
            client.close()
        for node in nodes.values():
            deadline = time.monotonic() + 20
            while True:
                other = KafkaPython(node.bootstrap)
                try:
                    found = _entries(other.describe([("user", 0, "q-carol")], strict=True))
                finally:
                    other.close()
                if found or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert found == {(("user", "q-carol"),): {"producer_byte_rate": 777.0}}


def test_asyncio_admin_client_quotas(broker: BrokerProcess) -> None:
    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            entity = ClientQuotaEntity({"client-id": "aio-app"})
            done = await admin.alter_client_quotas(
                [ClientQuotaAlteration(entity, {"producer_byte_rate": 300})]
            )
            assert done == {entity: None}
            exact = ClientQuotaFilterComponent.of_entity("client-id", "aio-app")
            found = await admin.describe_client_quotas(ClientQuotaFilter.contains_only([exact]))
            assert found == {entity: {"producer_byte_rate": 300.0}}
            bad = await admin.alter_client_quotas(
                [ClientQuotaAlteration(entity, {"request_percentage": -1})]
            )
            assert bad[entity] is not None and "positive" in str(bad[entity])
        finally:
            await admin.close()

    asyncio.run(main())


def test_configs_cli_odradek_spelling_and_errors(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(*args: str) -> tuple[int, str, str]:
        status = main(["configs", *args, "--bootstrap-server", broker.bootstrap])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return status, out, err

    assert run("alter", "sp-user", "-t", "users", "--add-config", "producer_byte_rate=5")[0] == 0
    status, out, _ = run("describe", "sp-user", "-t", "users")
    assert status == 0 and out.strip() == (
        "Quota configs for user-principal 'sp-user' are producer_byte_rate=5.0"
    )
    for args, message in [
        (
            (
                "--alter",
                "--entity-type",
                "ips",
                "--entity-name",
                "nope",
                "--add-config",
                "connection_creation_rate=3",
            ),
            "not a valid IP",
        ),
        (
            (
                "--alter",
                "--entity-type",
                "ips",
                "--entity-name",
                "1.2.3.4",
                "--entity-type",
                "users",
                "--entity-name",
                "u",
                "--add-config",
                "x=1",
            ),
            "cannot be combined",
        ),
        (
            (
                "--alter",
                "--entity-type",
                "users",
                "--entity-default",
                "--add-config",
                "producer_byte_rate=1.5",
            ),
            "whole number",
        ),
        (("--alter", "--user-defaults", "--add-config", "SCRAM-SHA-256=[password=p]"), "SCRAM"),
        (
            (
                "--alter",
                "--user",
                "u",
                "--add-config",
                "SCRAM-SHA-256=[password=p],producer_byte_rate=1",
            ),
            "Cannot alter both quota and SCRAM",
        ),
        (("--describe", "--user", "u", "--bogus", "1"), "no such option"),
    ]:
        status, _, err = run(*args)
        assert status != 0 and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err
    ok_ip = run("--alter", "--ip", "1.2.3.4", "--add-config", "connection_creation_rate=3")
    assert ok_ip[0] == 0
    status, out, _ = run("--describe", "--entity-type", "ips")
    assert "Quota configs for ip '1.2.3.4' are connection_creation_rate=3.0" in out


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    """Quotas are metadata records: a restarted broker (metadata log replayed) and
    its enforcement see them."""
    process = BrokerProcess(tmp_path / "data").start()
    try:
        entity = ClientQuotaEntity({"user": "kept", "client-id": None})
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        try:
            done = admin.alter_client_quotas(
                [ClientQuotaAlteration(entity, {"request_percentage": 7})]
            )
            assert done[entity].result(30) is None
        finally:
            admin.close()
        assert process.stop() == 0
        process.process = None
        process.start()
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        try:
            assert admin.describe_client_quotas().result(30) == {
                entity: {"request_percentage": 7.0}
            }
        finally:
            admin.close()
    finally:
        process.stop()
        process.kill()


def test_a_users_quotas_and_scram_credentials_side_by_side(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """kafka-configs.sh's users entity carries both: SCRAM keys go to the SCRAM path,
    quota keys to AlterClientQuotas, and a describe prints both kinds of line."""
    bootstrap = ["--bootstrap-server", broker.bootstrap]
    user = ["--entity-type", "users", "--entity-name", "both-user"]
    scram = "SCRAM-SHA-256=[iterations=4096,password=both-secret]"
    assert main(["configs", "--alter", *user, "--add-config", scram, *bootstrap]) == 0
    quota = "producer_byte_rate=2048"
    assert main(["configs", "--alter", *user, "--add-config", quota, *bootstrap]) == 0
    capsys.readouterr()
    assert main(["configs", "--describe", *user, *bootstrap]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Quota configs for user-principal 'both-user' are producer_byte_rate=2048.0",
        "SCRAM credential configs for user-principal 'both-user' are SCRAM-SHA-256=iterations=4096",
    ]
    assert main(["configs", "--describe", *user, "-o", "json", *bootstrap]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"entity": {"user": "both-user"}, "quotas": {"producer_byte_rate": 2048.0}} in rows
    assert {"user": "both-user", "mechanism": "SCRAM-SHA-256", "iterations": 4096} in rows


@pytest.mark.parametrize("version", [0, 1])
def test_every_version_round_trips(broker: BrokerProcess, version: int) -> None:
    """v0 (classic encoding) and v1 (flexible) of both APIs, raw on the wire."""
    name = f"wire-v{version}"
    entity = request_entity(49, version, "EntityData", entity_type="client-id", entity_name=name)
    op = request_entity(49, version, "OpData", key="consumer_byte_rate", value=99.0, remove=False)
    entry = request_entity(49, version, "EntryData", entity=(entity,), ops=(op,))
    with WireClient(broker.bootstrap) as client:
        altered = client.request(request_entity(49, version, entries=(entry,), validate_only=False))
        assert [e.error_code for e in altered.entries] == [ErrorCode.none]
        component = request_entity(
            48, version, "ComponentData", entity_type="client-id", match_type=0, match=name
        )
        found = client.request(request_entity(48, version, components=(component,), strict=True))
        assert found.error_code == ErrorCode.none
        (described,) = found.entries
        assert [(e.entity_type, e.entity_name) for e in described.entity] == [("client-id", name)]
        assert [(v.key, v.value) for v in described.values] == [("consumer_byte_rate", 99.0)]
