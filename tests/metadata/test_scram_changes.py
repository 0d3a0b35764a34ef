"""The controller's SCRAM decisions (metadata/scram_changes.py), pure: Kafka's per-user
results of AlterUserScramCredentials and what DescribeUserScramCredentials answers."""

from __future__ import annotations

import hashlib

import pytest

from odradek.metadata.image import MetadataImage, ScramEntry, scram_record
from odradek.metadata.scram_changes import (
    DUPLICATE_MESSAGE,
    ScramDeletion,
    ScramUpsertion,
    alter_credentials,
    describe_credentials,
)
from odradek.security.scram import MECHANISMS, credential_from_salted

SHA256, SHA512 = 1, 2
SALT = b"0123456789abcdef"


def salted(password: bytes, mechanism: int = SHA256, iterations: int = 4096) -> bytes:
    name = "sha256" if mechanism == SHA256 else "sha512"
    return hashlib.pbkdf2_hmac(name, password, SALT, iterations)


def upsert(user: str, mechanism: int = SHA256, iterations: int = 4096) -> ScramUpsertion:
    return ScramUpsertion(user, mechanism, iterations, SALT, salted(b"pw", mechanism, iterations))


def holding(*keys: tuple[str, str]) -> MetadataImage:
    entry = ScramEntry(SALT, b"stored", b"server", 8192)
    return MetadataImage().apply([scram_record(u, m, entry) for u, m in keys], 0)


def codes(results: list[tuple[str, object]]) -> dict[str, str | None]:
    return {user: getattr(error, "code", None) for user, error in results}


def test_an_upsertion_becomes_stored_and_server_keys_never_the_salted_password() -> None:
    change = upsert("alice", SHA512, 8192)
    results, records = alter_credentials(MetadataImage(), [], [change])
    assert results == [("alice", None)]
    (record,) = records
    expected = credential_from_salted(
        MECHANISMS["SCRAM-SHA-512"], change.salted_password, SALT, 8192
    )
    assert record.kind == "UserScramCredential"
    assert record.fields == {
        "name": "alice",
        "mechanism": "SCRAM-SHA-512",
        "salt": SALT.hex(),
        "stored_key": expected.stored_key.hex(),
        "server_key": expected.server_key.hex(),
        "iterations": 8192,
    }
    encoded = b"".join(record.encode())
    assert (
        change.salted_password not in encoded
        and change.salted_password.hex().encode() not in encoded
    )
    shown = repr(change)  # what a log line or a traceback would print
    assert str(change.salted_password) not in shown and change.salted_password.hex() not in shown


def test_each_validation_error_is_the_users_own_result() -> None:
    image = holding(("dora", "SCRAM-SHA-256"))
    results, records = alter_credentials(
        image,
        [ScramDeletion("carol", SHA256), ScramDeletion("dora", SHA256), ScramDeletion("eve", 3)],
        [
            upsert(""),
            upsert("frank", 0),
            upsert("gina", SHA256, 4095),
            upsert("hank", SHA512, 16385),
            upsert("ivy", SHA256, 4096),
            upsert("jo", SHA512, 16384),
        ],
    )
    assert codes(results) == {
        "carol": "RESOURCE_NOT_FOUND",
        "dora": None,
        "eve": "UNSUPPORTED_SASL_MECHANISM",
        "": "UNACCEPTABLE_CREDENTIAL",
        "frank": "UNSUPPORTED_SASL_MECHANISM",
        "gina": "UNACCEPTABLE_CREDENTIAL",
        "hank": "UNACCEPTABLE_CREDENTIAL",
        "ivy": None,
        "jo": None,
    }
    assert [str(e) for u, e in results if u in ("gina", "hank")] == [
        "Too few iterations",
        "Too many iterations",
    ]
    assert [(r.kind, r.fields["name"]) for r in records] == [
        ("RemoveUserScramCredential", "dora"),
        ("UserScramCredential", "ivy"),
        ("UserScramCredential", "jo"),
    ]
    assert records[0].fields["mechanism"] == "SCRAM-SHA-256"


@pytest.mark.parametrize(
    ("deletions", "upsertions"),
    [
        ([], [upsert("alice", SHA256), upsert("alice", SHA512)]),  # two mechanisms: still twice
        ([ScramDeletion("alice", SHA256)], [upsert("alice", SHA512)]),
        ([ScramDeletion("alice", SHA256), ScramDeletion("alice", SHA512)], []),
        ([], [upsert("alice"), upsert("alice"), upsert("alice")]),
    ],
)
def test_a_user_named_twice_is_duplicate_and_none_of_its_changes_is_made(
    deletions: list[ScramDeletion], upsertions: list[ScramUpsertion]
) -> None:
    image = holding(("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512"))
    results, records = alter_credentials(image, deletions, [*upsertions, upsert("bob")])
    assert codes(results) == {"alice": "DUPLICATE_RESOURCE", "bob": None}
    assert str(results[0][1]) == DUPLICATE_MESSAGE
    assert [r.fields["name"] for r in records] == ["bob"]


def test_a_users_first_error_wins_over_a_later_duplicate() -> None:
    results, records = alter_credentials(
        MetadataImage(), [ScramDeletion("alice", SHA256)], [upsert("alice")]
    )
    assert codes(results) == {"alice": "RESOURCE_NOT_FOUND"}
    assert records == []


def test_describe_lists_mechanism_and_iterations_per_user() -> None:
    image = holding(
        ("bob", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-256")
    )
    every = describe_credentials(image, None)
    assert [(a.user, a.error, a.infos) for a in every] == [
        ("alice", None, ((SHA256, 8192), (SHA512, 8192))),
        ("bob", None, ((SHA512, 8192),)),
    ]
    assert describe_credentials(image, []) == every
    named = describe_credentials(image, ["bob", "nobody", "alice", "alice"])
    assert [(a.user, getattr(a.error, "code", None)) for a in named] == [
        ("bob", None),
        ("nobody", "RESOURCE_NOT_FOUND"),
        ("alice", "DUPLICATE_RESOURCE"),
    ]
    assert (
        str(named[1].error) == "Attempt to describe a user credential that does not exist: nobody"
    )
    assert named[2].infos == ()
