"""SCRAM credentials on a cluster: ``storage format --add-scram`` seeds a credential
before any broker runs (applied once, never again on restart), and a credential
changed through a broker-only node reaches every node's image through the controller.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from odradek.metadata.writer import read_committed_batches
from odradek.security.scram import make_credential
from odradek.server.metadata_log import METADATA_LOG_CONFIG
from odradek.storage.log_loader import open_log
from tests.security.scram_support import describe_on, metadata_log_bytes
from tests.support.broker import running_broker
from tests.support.kraft import Quorum

SHA256, SHA512 = 1, 2


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60
    )


def scram_records(data_dir: Path) -> list[dict[str, object]]:
    log, _ = open_log(data_dir / "__cluster_metadata-0", METADATA_LOG_CONFIG)
    try:
        return [
            dict(r.fields)
            for _, batch, _, _ in read_committed_batches(log)
            for r in batch
            if r.kind == "UserScramCredential"
        ]
    finally:
        log.close()


def test_storage_format_add_scram_seeds_the_first_start_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={data}\n")
    cluster_id = odradek("storage", "random-uuid").stdout.strip()
    bad = odradek(
        "storage", "format", "-t", cluster_id, "-c", str(config),
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret,iterations=99]",
    )  # fmt: skip
    assert bad.returncode == 2 and not data.exists()
    assert bad.stderr.strip() == (
        "odradek storage: --add-scram: SCRAM-SHA-256: iterations 99 outside [4096, 16384]"
    )
    formatted = odradek(
        "storage", "format", "-t", cluster_id, "-c", str(config),
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "-S", 'SCRAM-SHA-512=[name=admin,iterations=8192,salt="N3E=",saltedpassword="YCE="]',
    )  # fmt: skip
    assert formatted.returncode == 0, formatted.stderr
    assert b"admin-secret" not in (data / "bootstrap.checkpoint").read_bytes()
    for _ in range(2):  # first start, then a restart
        with running_broker(data, ["--config", str(config)]) as broker:
            assert describe_on(broker.bootstrap, ["admin"]) == {
                "admin": ("NONE", ((SHA256, 4096), (SHA512, 8192)))
            }
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            try:  # a change after the bootstrap must survive the restart
                info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
                futures = admin.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion("after", info, b"after-pw")]
                )
                futures["after"].result(30)
            finally:
                admin.close()
    records = scram_records(data)
    assert sorted((r["name"], r["mechanism"]) for r in records) == [
        ("admin", "SCRAM-SHA-256"),
        ("admin", "SCRAM-SHA-512"),
        ("after", "SCRAM-SHA-256"),
        ("after", "SCRAM-SHA-256"),
    ]  # the bootstrap once; the later change once per run
    admin_256 = next(r for r in records if r["mechanism"] == "SCRAM-SHA-256")
    salt = bytes.fromhex(str(admin_256["salt"]))
    expected = make_credential("SCRAM-SHA-256", "admin-secret", salt=salt, iterations=4096)
    assert admin_256["stored_key"] == expected.stored_key.hex()
    assert b"admin-secret" not in metadata_log_bytes(data)


def test_a_credential_changed_through_a_broker_only_node_reaches_every_node(
    tmp_path: Path,
) -> None:
    roles = {1: "controller", 2: "broker", 3: "broker"}
    properties = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000"}
    with Quorum(tmp_path / "quorum", roles=roles, properties=properties) as quorum:
        brokers = {n: quorum.nodes[n].bootstrap for n in (2, 3)}
        admin = AdminClient({"bootstrap.servers": brokers[2]})
        try:  # node 2 is no controller: it forwards to node 1 over the controller listener
            info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
            futures = admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion("alice", info, b"alice-pw", b"salt-1")]
            )
            futures["alice"].result(30)
            # node 2 waited for its own image before answering; node 3 follows the log
            assert describe_on(brokers[2], ["alice"]) == {"alice": ("NONE", ((SHA512, 8192),))}
            expected = make_credential("SCRAM-SHA-512", "alice-pw", salt=b"salt-1", iterations=8192)
            for node in (1, 2, 3):
                wait_for(lambda n=node: expected.stored_key.hex().encode() in log_of(quorum, n))
            wait_for(lambda: describe_on(brokers[3], ["alice"])["alice"][0] == "NONE")
            assert describe_on(brokers[3]) == {"alice": ("NONE", ((SHA512, 8192),))}
        finally:
            admin.close()
        other = AdminClient({"bootstrap.servers": brokers[3]})
        try:
            gone = other.alter_user_scram_credentials(
                [UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)]
            )
            gone["alice"].result(30)
        finally:
            other.close()
        assert describe_on(brokers[3], ["alice"]) == {"alice": ("RESOURCE_NOT_FOUND", ())}
        wait_for(lambda: describe_on(brokers[2]) == {})
        for node in (1, 2, 3):
            assert b"alice-pw" not in log_of(quorum, node)


def log_of(quorum: Quorum, node: int) -> bytes:
    return metadata_log_bytes(quorum.data_dir(node))


def wait_for(condition: object, timeout_s: float = 15.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_add_scram_refuses_a_node_formatted_before(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'data'}\n")
    cluster_id = odradek("storage", "random-uuid").stdout.strip()
    assert odradek("storage", "format", "-t", cluster_id, "-c", str(config)).returncode == 0
    again = odradek(
        "storage", "format", "-t", cluster_id, "-c", str(config), "--ignore-formatted",
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
    )  # fmt: skip
    assert again.returncode == 1
    assert "already formatted: --add-scram applies only" in again.stderr
    assert "admin-secret" not in again.stderr
    assert not (tmp_path / "data" / "bootstrap.checkpoint").exists()
