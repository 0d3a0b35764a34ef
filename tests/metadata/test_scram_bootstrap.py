"""``storage format --add-scram``'s bootstrap records (metadata/bootstrap.py): parsed
as Kafka's kafka-storage.sh takes them, written and read back whole, and committed by
the controller once, as the first batch of an empty metadata log."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import pytest

from odradek.metadata.bootstrap import (
    BOOTSTRAP_FILE,
    BootstrapError,
    read_bootstrap,
    scram_bootstrap_record,
    write_bootstrap,
)
from odradek.metadata.controller import Controller
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.scram_changes import ScramDeletion
from odradek.metadata.writer import LocalMetadataWriter, read_committed_batches
from odradek.security.scram import MECHANISMS, credential_from_salted, make_credential
from odradek.server.metadata_log import METADATA_LOG_CONFIG
from odradek.storage.log_loader import open_log
from tests.support.brokers import register_unfenced


def test_the_password_form_stores_keys_derived_with_a_fresh_salt() -> None:
    record = scram_bootstrap_record("SCRAM-SHA-256=[name=alice,password=alice-secret]")
    fields = record.fields
    assert (record.kind, fields["name"], fields["mechanism"]) == (
        "UserScramCredential",
        "alice",
        "SCRAM-SHA-256",
    )
    assert fields["iterations"] == 4096
    salt = bytes.fromhex(fields["salt"])
    expected = make_credential("SCRAM-SHA-256", "alice-secret", salt=salt, iterations=4096)
    assert fields["stored_key"] == expected.stored_key.hex()
    assert fields["server_key"] == expected.server_key.hex()
    assert b"alice-secret" not in b"".join(record.encode())
    other = scram_bootstrap_record("SCRAM-SHA-256=[name=alice,password=alice-secret]")
    assert other.fields["salt"] != fields["salt"]  # random per credential


def test_the_salted_form_takes_base64_salt_and_salted_password_quoted_or_not() -> None:
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"7q", 8192)
    text = (
        'SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",'
        f'saltedpassword="{base64.b64encode(salted).decode()}"]'
    )
    fields = scram_bootstrap_record(text).fields
    expected = credential_from_salted(MECHANISMS["SCRAM-SHA-512"], salted, b"7q", 8192)
    assert (fields["salt"], fields["iterations"]) == (b"7q".hex(), 8192)
    assert fields["stored_key"] == expected.stored_key.hex()
    unquoted = text.replace('"', "")
    assert scram_bootstrap_record(unquoted).fields == fields


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SCRAM-SHA-1=[name=a,password=secret1]", "unknown SCRAM mechanism"),
        ("SCRAM-SHA-256=[password=secret1]", "name= is required"),
        ("SCRAM-SHA-256=[name=a]", "password= or salt= with saltedpassword= is required"),
        ("SCRAM-SHA-256=[name=a,password=secret1,iterations=4095]", "outside [4096, 16384]"),
        ("SCRAM-SHA-256=[name=a,password=secret1,iterations=lots]", "must be a number"),
        ("SCRAM-SHA-256=[name=a,pasword=secret1]", "'pasword' is not one of"),
        ("SCRAM-SHA-256=[name=a,saltedpassword=c2VjcmV0MQ==]", "needs salt="),
        ("SCRAM-SHA-256=[name=a,salt=!!,saltedpassword=c2VjcmV0MQ==]", "salt is not base64"),
        ("SCRAM-SHA-256=name=a,password=secret1", "expected MECHANISM=[name=...,password=...]"),
    ],
)
def test_a_bad_value_is_one_line_that_never_shows_the_password(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        scram_bootstrap_record(text)
    shown = str(caught.value)
    assert message in shown and "\n" not in shown
    assert "secret1" not in shown


def test_the_file_round_trips_and_damage_is_refused(tmp_path: Path) -> None:
    assert read_bootstrap(tmp_path) == []
    records = [
        scram_bootstrap_record("SCRAM-SHA-256=[name=admin,password=admin-secret]"),
        scram_bootstrap_record("SCRAM-SHA-512=[name=admin,password=admin-secret]"),
    ]
    path = write_bootstrap(tmp_path, records)
    assert path == tmp_path / BOOTSTRAP_FILE
    assert read_bootstrap(tmp_path) == records
    assert b"admin-secret" not in path.read_bytes()
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BootstrapError, match="damaged"):
        read_bootstrap(tmp_path)


def test_the_controller_commits_the_bootstrap_first_and_never_again(tmp_path: Path) -> None:
    bootstrap = [scram_bootstrap_record("SCRAM-SHA-256=[name=admin,password=admin-secret]")]
    metadata = tmp_path / "__cluster_metadata-0"

    async def start(broker_id: int, then_delete: bool) -> dict[tuple[str, str], object]:
        log, _ = open_log(metadata, METADATA_LOG_CONFIG)
        try:
            loader = MetadataLoader()
            writer = LocalMetadataWriter(log, loader)
            controller = Controller(writer, loader, 1, lambda: {}, bootstrap=bootstrap)
            controller.replay()
            await register_unfenced(controller, broker_id)  # a change: the first one or not
            if then_delete:
                results = await controller.alter_user_scram_credentials(
                    [ScramDeletion("admin", 1)], []
                )
                assert results == [("admin", None)]
            return dict(controller.image.scram_credentials)
        finally:
            log.close()

    first = asyncio.run(start(1, then_delete=False))
    assert list(first) == [("admin", "SCRAM-SHA-256")]
    assert asyncio.run(start(2, then_delete=True)) == {}  # a restart: the deletion stays
    assert asyncio.run(start(3, then_delete=False)) == {}  # and the bootstrap is not re-applied
    log, _ = open_log(metadata, METADATA_LOG_CONFIG)
    try:
        kinds = [r.kind for _, batch, _, _ in read_committed_batches(log) for r in batch]
    finally:
        log.close()
    assert kinds.count("UserScramCredential") == 1
    assert kinds[0] == "UserScramCredential"  # before the cluster's first change
