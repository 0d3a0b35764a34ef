"""Bootstrap metadata: records ``odradek storage format`` leaves for a cluster's first start.

How this works and why (Kafka's ``kafka-storage.sh format --add-scram`` and its
``bootstrap.checkpoint``): a cluster secured with SCRAM needs an admin credential
before any broker is reachable, so the credential cannot come through
AlterUserScramCredentials. ``format`` writes the records into ``bootstrap.checkpoint``
in the metadata log dir — one record batch v2 (CRC-checked, the same encoding as
``__cluster_metadata``'s batches), written to a temporary file, fsynced and renamed, so
a torn write leaves no file rather than half of one. At start-up the node reads it
(``read_bootstrap``; damage stops the node with one line) and hands the records to its
controller, which commits them as the first batch of a log that holds nothing yet
(``Controller._commit``: before the first change of the cluster, on whichever node is
the active controller then). Once anything is committed the image's offset is past -1
and the file is never applied again, on this node or any other formatted with it: a
restart does not duplicate the credential, and a credential changed or deleted later
stays changed.

``scram_bootstrap_record`` parses one ``--add-scram`` value, Kafka's forms:
``SCRAM-SHA-256=[name=alice,password=alice-secret]`` (iterations default 4096, a random
salt) or ``SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]``
(salt and salted password base64; values may be double-quoted). The record holds the
salt, StoredKey, ServerKey and iterations only; the password is never written.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from odradek.metadata.image import MetadataRecord, ScramEntry, scram_record
from odradek.records.codec import Record, decode_batch, encode_batch
from odradek.security.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    credential_from_salted,
    make_credential,
)
from odradek.storage.errors import StorageError

BOOTSTRAP_FILE: Final = "bootstrap.checkpoint"
_KEYS: Final = ("name", "password", "iterations", "salt", "saltedpassword")


class BootstrapError(StorageError):
    """``bootstrap.checkpoint`` cannot be read: the node refuses to start."""


def write_bootstrap(directory: Path, records: Sequence[MetadataRecord]) -> Path:
    """Write ``records`` as the bootstrap file of ``directory`` (atomically); its path."""
    now = int(time.time() * 1000)
    batch = encode_batch([Record(i, now, *r.encode()) for i, r in enumerate(records)])
    path = directory / BOOTSTRAP_FILE
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as out:
        out.write(batch)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return path


def read_bootstrap(directory: Path) -> list[MetadataRecord]:
    """The records of ``directory``'s bootstrap file (none when there is no file)."""
    path = directory / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise BootstrapError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        decoded = decode_batch(data)
        if decoded.header.size != len(data):
            raise ValueError(f"{len(data) - decoded.header.size} bytes after the batch")
        return [MetadataRecord.decode(r.key or b"", r.value or b"") for r in decoded.records]
    except (StorageError, ValueError, KeyError, TypeError) as error:
        raise BootstrapError(
            f"{path} is damaged ({type(error).__name__}: {error}); format the node again "
            "or remove the file to start without its records"
        ) from None


def _fields(text: str) -> tuple[str, dict[str, str]]:
    mechanism, sep, rest = text.partition("=")
    mechanism = mechanism.strip()
    if not sep or not rest.startswith("[") or not rest.endswith("]"):
        shown = mechanism or "(empty)"  # never the rest: it holds the password
        raise ValueError(f"{shown}: expected MECHANISM=[name=...,password=...]")
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} ({', '.join(MECHANISMS)})")
    fields: dict[str, str] = {}
    for part in rest[1:-1].split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in _KEYS:
            shown = key or part.strip()[:0] or "(empty)"  # the key only: never a value
            raise ValueError(f"{mechanism}: {shown!r} is not one of {', '.join(_KEYS)}")
        if key in fields:
            raise ValueError(f"{mechanism}: {key} given twice")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        fields[key] = value
    return mechanism, fields


def _base64(mechanism: str, key: str, value: str) -> bytes:
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{mechanism}: {key} is not base64") from None
    if not decoded:
        raise ValueError(f"{mechanism}: {key} is empty")
    return decoded


def scram_bootstrap_record(text: str) -> MetadataRecord:
    """One ``--add-scram`` value as its ``UserScramCredential`` record; ValueError
    (one line, never echoing a password) when it is not valid."""
    mechanism, fields = _fields(text.strip())
    name = fields.get("name", "")
    if not name:
        raise ValueError(f"{mechanism}: name= is required")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ValueError(f"{mechanism}: iterations must be a number") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"{mechanism}: iterations {iterations} outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]"
        )
    if "password" in fields:
        if "saltedpassword" in fields:
            raise ValueError(f"{mechanism}: give password or saltedpassword, not both")
        if not fields["password"]:
            raise ValueError(f"{mechanism}: password is empty")
        salt = _base64(mechanism, "salt", fields["salt"]) if "salt" in fields else None
        credential = make_credential(
            mechanism, fields["password"], salt=salt, iterations=iterations
        )
    elif "saltedpassword" in fields:
        if "salt" not in fields:
            raise ValueError(f"{mechanism}: saltedpassword needs salt=")
        salt = _base64(mechanism, "salt", fields["salt"])
        salted = _base64(mechanism, "saltedpassword", fields["saltedpassword"])
        credential = credential_from_salted(MECHANISMS[mechanism], salted, salt, iterations)
    else:
        raise ValueError(f"{mechanism}: password= or salt= with saltedpassword= is required")
    entry = ScramEntry(
        credential.salt, credential.stored_key, credential.server_key, credential.iterations
    )
    return scram_record(name, mechanism, entry)


__all__ = [
    "BOOTSTRAP_FILE",
    "BootstrapError",
    "read_bootstrap",
    "scram_bootstrap_record",
    "write_bootstrap",
]
