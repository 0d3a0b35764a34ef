"""SCRAM credential management against a real broker (KIP-554): odradek's admin client,
confluent-kafka's AdminClient (a client nobody here wrote), raw requests for the
errors a well-behaved client never sends, and the kafka-configs.sh-style CLI.

What the broker keeps is checked at the source: the metadata log holds the salt, the
iteration count and the stored/server keys that security/scram.py derives from the
password — and neither the password nor the salted password, in any form.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException as ConfluentKafkaException
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ScramCredentialInfo as CkInfo
from confluent_kafka.admin import ScramMechanism as CkMechanism
from confluent_kafka.admin import UserScramCredentialDeletion as CkDeletion
from confluent_kafka.admin import UserScramCredentialUpsertion as CkUpsertion

from odradek.client._core.types import KafkaException
from odradek.client.admin.blocking import AdminClient
from odradek.client.admin.scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from odradek.security.scram import make_credential
from tests.security.scram_support import (
    ALTER,
    deletion,
    describe_on,
    metadata_log_bytes,
    send,
    upsertion,
)
from tests.support.broker import BrokerProcess, running_broker

SHA256, SHA512 = 1, 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("scram") / "data") as process:
        yield process


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[AdminClient]:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        yield client
    finally:
        client.close()


def outcome(future: object) -> str | None:
    try:
        future.result(30)  # type: ignore[attr-defined]
    except (KafkaException, ConfluentKafkaException) as error:
        return error.args[0].name()
    return None


def test_created_credentials_are_described_and_stored_as_keys_only(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    salt = b"a fixed salt for the test"
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "alice",
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                b"alice-pw-1",
                salt,
            ),
            UserScramCredentialUpsertion(
                "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-pw-1"
            ),
        ]
    )
    assert {user: outcome(f) for user, f in futures.items()} == {"alice": None, "bob": None}
    every = admin.describe_user_scram_credentials().result(30)
    shown = {
        u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in every.items()
    }
    assert shown["alice"] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    assert shown["bob"] == [(ScramMechanism.SCRAM_SHA_512, 4096)]
    named = admin.describe_user_scram_credentials(["alice", "nobody"])
    assert named["alice"].result(30).scram_credential_infos == [
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    assert outcome(named["nobody"]) == "RESOURCE_NOT_FOUND"

    # The log holds what security/scram.py derives from the password and the salt...
    expected = make_credential("SCRAM-SHA-256", "alice-pw-1", salt=salt, iterations=8192)
    log = metadata_log_bytes(broker.data_dir)
    assert expected.stored_key.hex().encode() in log
    assert expected.server_key.hex().encode() in log
    assert salt.hex().encode() in log
    # ...and no password, salted or not, in any encoding.
    salted = hashlib.pbkdf2_hmac("sha256", b"alice-pw-1", salt, 8192)
    for secret in (b"alice-pw-1", b"bob-pw-1", salted, salted.hex().encode()):
        assert secret not in log
    segment = sorted((broker.data_dir / "__cluster_metadata-0").glob("*.log"))[0]
    dumped = subprocess.run(
        [sys.executable, "-m", "odradek", "dump-log", "--print-data-log", str(segment)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dumped.returncode == 0, dumped.stderr
    assert expected.stored_key.hex() in dumped.stdout
    assert "alice-pw-1" not in dumped.stdout and salted.hex() not in dumped.stdout


def test_every_error_is_answered_for_its_own_user(broker: BrokerProcess) -> None:
    salt = b"salt"
    good = hashlib.pbkdf2_hmac("sha256", b"pw", salt, 4096)
    response = send(
        broker.bootstrap,
        ALTER,
        deletions=(deletion("carol", SHA256), deletion("eve", 7)),
        upsertions=(
            upsertion("", SHA256, 4096, salt, good),
            upsertion("frank", 0, 4096, salt, good),
            upsertion("gina", SHA256, 4095, salt, good),
            upsertion("hank", SHA512, 16385, salt, good),
            upsertion("dup", SHA256, 4096, salt, good),
            upsertion("dup", SHA512, 4096, salt, good),
            upsertion("ivy", SHA256, 16384, salt, good),
        ),
    )
    answered = {r.user: (r.error_code.name.upper(), r.error_message) for r in response.results}
    assert answered == {
        "carol": (
            "RESOURCE_NOT_FOUND",
            "Attempt to delete a user credential that does not exist",
        ),
        "eve": ("UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism"),
        "": ("UNACCEPTABLE_CREDENTIAL", "Username must not be empty"),
        "frank": ("UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism"),
        "gina": ("UNACCEPTABLE_CREDENTIAL", "Too few iterations"),
        "hank": ("UNACCEPTABLE_CREDENTIAL", "Too many iterations"),
        "dup": (
            "DUPLICATE_RESOURCE",
            "A user credential cannot be altered twice in the same request",
        ),
        "ivy": ("NONE", None),
    }
    shown = describe_on(broker.bootstrap, ["ivy", "dup", "gina", "ivy"])
    assert shown == {
        "ivy": ("DUPLICATE_RESOURCE", ()),
        "dup": ("RESOURCE_NOT_FOUND", ()),
        "gina": ("RESOURCE_NOT_FOUND", ()),
    }
    assert describe_on(broker.bootstrap, ["ivy"]) == {"ivy": ("NONE", ((SHA256, 16384),))}


def test_confluent_kafka_admin_alters_and_describes(broker: BrokerProcess) -> None:
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    try:
        futures = admin.alter_user_scram_credentials(
            [
                CkUpsertion("ck-user", CkInfo(CkMechanism.SCRAM_SHA_512, 8192), b"ck-pw"),
                CkUpsertion("ck-twice", CkInfo(CkMechanism.SCRAM_SHA_256, 4096), b"x"),
                CkUpsertion("ck-twice", CkInfo(CkMechanism.SCRAM_SHA_512, 4096), b"x"),
            ],
            request_timeout=30,
        )
        assert {u: outcome(f) for u, f in futures.items()} == {
            "ck-user": None,
            "ck-twice": "DUPLICATE_RESOURCE",
        }
        described = admin.describe_user_scram_credentials(["ck-user", "ck-twice"])
        infos = described["ck-user"].result(30).scram_credential_infos
        assert [(i.mechanism, i.iterations) for i in infos] == [(CkMechanism.SCRAM_SHA_512, 8192)]
        assert outcome(described["ck-twice"]) == "RESOURCE_NOT_FOUND"
        every = admin.describe_user_scram_credentials().result(30)
        assert "ck-user" in every and "ck-twice" not in every
        gone = admin.alter_user_scram_credentials(
            [CkDeletion("ck-user", CkMechanism.SCRAM_SHA_512)], request_timeout=30
        )
        assert outcome(gone["ck-user"]) is None
        again = admin.alter_user_scram_credentials(
            [CkDeletion("ck-user", CkMechanism.SCRAM_SHA_512)], request_timeout=30
        )
        assert outcome(again["ck-user"]) == "RESOURCE_NOT_FOUND"
    finally:
        del admin
        gc.collect()


def test_odradek_admin_refuses_malformed_alterations_before_sending(admin: AdminClient) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    with pytest.raises(ValueError, match="at least one"):
        admin.alter_user_scram_credentials([])
    with pytest.raises(ValueError, match="'user' cannot be empty"):
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("", info, b"pw")])
    with pytest.raises(TypeError, match="'password' must be bytes"):
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("u", info, "pw")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ScramMechanism"):
        admin.alter_user_scram_credentials([UserScramCredentialDeletion("u", 1)])  # type: ignore[arg-type]
    assert "pw" not in repr(UserScramCredentialUpsertion("u", info, b"hunter2-pw"))


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60
    )


def test_configs_cli_adds_describes_and_deletes_as_kafka_configs(broker: BrokerProcess) -> None:
    user = ["--bootstrap-server", broker.bootstrap, "--entity-type", "users"]
    added = odradek(
        "configs",
        "--alter",
        *user,
        "--entity-name",
        "cli-user",
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=cli-secret],SCRAM-SHA-512=[password=cli-secret]",
    )
    assert added.returncode == 0, added.stderr
    described = odradek("configs", "--describe", *user, "--entity-name", "cli-user")
    assert described.stdout == (
        "SCRAM credential configs for user-principal 'cli-user' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"
    )
    deleted = odradek(
        "configs", "--alter", *user, "--entity-name", "cli-user", "--delete-config", "SCRAM-SHA-512"
    )
    assert deleted.returncode == 0, deleted.stderr
    every = odradek("configs", "--describe", *user)
    assert (
        "SCRAM credential configs for user-principal 'cli-user' are SCRAM-SHA-256=iterations=8192\n"
        in every.stdout
    )
    as_json = json.loads(odradek("configs", "--describe", *user, "-o", "json").stdout)
    assert {"user": "cli-user", "mechanism": "SCRAM-SHA-256", "iterations": 8192} in as_json
    nobody = odradek("configs", "--describe", *user, "--entity-name", "nobody")
    assert (nobody.returncode, nobody.stdout) == (0, "")
    missing = odradek(
        "configs", "--alter", *user, "--entity-name", "cli-user", "--delete-config", "SCRAM-SHA-512"
    )
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "Error: user cli-user: RESOURCE_NOT_FOUND: "
        "Attempt to delete a user credential that does not exist"
    )
    weak = odradek(
        "configs",
        "--alter",
        *user,
        "--entity-name",
        "cli-user",
        "--add-config",
        "SCRAM-SHA-256=[iterations=100,password=cli-secret]",
    )
    assert weak.returncode == 1 and "Too few iterations" in weak.stderr
    assert "cli-secret" not in weak.stderr + weak.stdout
    mixed = odradek(
        "configs",
        "--alter",
        *user,
        "--entity-name",
        "cli-user",
        "--add-config",
        "SCRAM-SHA-256=[password=cli-secret],producer_byte_rate=1024",
    )
    assert mixed.returncode == 2 and "Cannot alter both quota and SCRAM" in mixed.stderr


def test_kafka_python_admin_alters_and_describes(broker: BrokerProcess) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin._users import (
        UserScramCredentialDeletion as KpDeletion,
    )
    from kafka.admin._users import (
        UserScramCredentialUpsertion as KpUpsertion,
    )

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        salt = b"kafka-python salt"
        answered = admin.alter_user_scram_credentials(
            [
                KpUpsertion("kp-user", "SCRAM-SHA-256", "kp-pw", iterations=4096, salt=salt),
                KpDeletion("kp-none", "SCRAM-SHA-512"),
            ]
        )
        assert answered == {
            "kp-user": None,
            "kp-none": "Attempt to delete a user credential that does not exist",
        }
        described = admin.describe_user_scram_credentials(["kp-user"])
        infos = described["kp-user"]["credential_infos"]
        assert [(int(i["mechanism"]), i["iterations"]) for i in infos] == [(SHA256, 4096)]
        expected = make_credential("SCRAM-SHA-256", "kp-pw", salt=salt, iterations=4096)
        assert expected.stored_key.hex().encode() in metadata_log_bytes(broker.data_dir)
    finally:
        admin.close()


def test_the_asyncio_admin_alters_and_describes(broker: BrokerProcess) -> None:
    from odradek.client.admin.aio import AIOKafkaAdminClient

    async def scenario() -> None:
        async with AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
            info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
            answered = await admin.alter_user_scram_credentials(
                [
                    UserScramCredentialUpsertion("aio-user", info, b"aio-pw"),
                    UserScramCredentialDeletion("aio-none", ScramMechanism.SCRAM_SHA_256),
                ]
            )
            assert answered == {
                "aio-user": None,
                "aio-none": "Attempt to delete a user credential that does not exist",
            }
            described = await admin.describe_user_scram_credentials(["aio-user", "aio-none"])
            assert described["aio-user"] == {
                "error": None,
                "credential_infos": [
                    {"mechanism": ScramMechanism.SCRAM_SHA_512, "iterations": 4096}
                ],
            }
            assert "does not exist" in described["aio-none"]["error"]

    asyncio.run(scenario())
