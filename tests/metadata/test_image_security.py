"""The security records in the image: SCRAM credentials, ACLs and client quotas."""

from __future__ import annotations

from odradek.metadata.delta import between
from odradek.metadata.image import (
    AclEntry,
    ImageReplay,
    MetadataImage,
    MetadataRecord,
    ScramEntry,
    acl_record,
    quota_record,
    scram_record,
)

ALICE = (("user", "alice"),)
BOB_DEFAULT_CLIENT = (("client-id", None), ("user", "bob"))


def security_image() -> MetadataImage:
    return MetadataImage().apply(
        [
            scram_record("alice", "SCRAM-SHA-256", ScramEntry(b"salt", b"stored", b"server", 4096)),
            acl_record("acl-1", AclEntry(2, "orders", 3, "User:alice", "*", 3, 3)),
            quota_record(ALICE, "producer_byte_rate", 1024.0),
            quota_record(BOB_DEFAULT_CLIENT, "consumer_byte_rate", 5.0),
        ],
        3,
    )


def test_records_build_the_security_maps() -> None:
    image = security_image()
    assert image.scram_credentials[("alice", "SCRAM-SHA-256")].stored_key == b"stored"
    assert image.acls["acl-1"].principal == "User:alice"
    assert dict(image.client_quotas[ALICE]) == {"producer_byte_rate": 1024.0}
    assert dict(image.client_quotas[BOB_DEFAULT_CLIENT]) == {"consumer_byte_rate": 5.0}


def test_snapshot_records_rebuild_the_same_security_state() -> None:
    image = security_image()
    replay = ImageReplay()
    replay.apply(image.to_records(), 10)
    rebuilt = replay.image()
    assert rebuilt.scram_credentials == image.scram_credentials
    assert rebuilt.acls == image.acls
    assert {k: dict(v) for k, v in rebuilt.client_quotas.items()} == {
        k: dict(v) for k, v in image.client_quotas.items()
    }


def test_removals_and_the_delta_flag() -> None:
    image = security_image()
    after = image.apply(
        [
            MetadataRecord("RemoveAccessControlEntry", {"id": "acl-1"}),
            MetadataRecord(
                "RemoveUserScramCredential", {"name": "alice", "mechanism": "SCRAM-SHA-256"}
            ),
            quota_record(ALICE, "producer_byte_rate", None),
        ],
        6,
    )
    assert not after.acls and not after.scram_credentials
    assert ALICE not in after.client_quotas  # its last key went: the entity goes too
    assert between(image, after).security
    assert not between(after, after).security
    assert between(after, after).is_empty()
