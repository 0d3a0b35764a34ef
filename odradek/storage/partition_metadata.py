"""``partition.metadata``: the topic id a partition directory belongs to.

Format (Kafka's): text lines ``version: 0`` and ``topic_id: <id>``, replaced
atomically (write a temporary file, then rename) so a crash leaves the old or the new.
odradek writes the id in UUID text form; Kafka's base64 form is read too.

The id is what tells two topics of the same name apart: a directory whose id is not
the one the metadata gives its topic holds another topic's data. ``check_topic_id``
refuses that (the broker does not start) rather than appending to it or replacing
it; a file that cannot be read is refused the same way, naming the file.
"""

from __future__ import annotations

import base64
import binascii
import os
import uuid
from pathlib import Path
from typing import Final

from odradek.storage.errors import StorageError

PARTITION_METADATA_FILE: Final = "partition.metadata"
_MAX_BYTES: Final = 4096


class PartitionMetadataError(StorageError):
    """A damaged ``partition.metadata`` or one naming another topic; says what to do."""


def parse_topic_id(text: str) -> uuid.UUID | None:
    """A topic id in UUID text form or Kafka's url-safe base64 form; None if neither."""
    try:
        return uuid.UUID(text)
    except ValueError:
        pass
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def read_partition_metadata(directory: Path) -> str | None:
    """Topic id text from ``partition.metadata``, if the file exists.

    Raises PartitionMetadataError if it exists but cannot be read as that file.
    """
    path = directory / PARTITION_METADATA_FILE
    try:
        with path.open("rb") as file:
            data = file.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise PartitionMetadataError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        if len(data) > _MAX_BYTES:
            raise ValueError(f"larger than {_MAX_BYTES} bytes")
        text = data.decode("utf-8")
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                if parse_topic_id(value.strip()) is None:
                    raise ValueError(f"topic_id {value.strip()[:40]!r} is not a topic id")
                return value.strip()
        raise ValueError("no topic_id line")
    except ValueError as error:  # UnicodeDecodeError included
        raise PartitionMetadataError(
            f"{path} is damaged ({error}); delete it to let the broker rewrite it from the "
            "metadata (only if this directory really belongs to that topic), then start again"
        ) from None


def check_topic_id(directory: Path, topic: str, expected: str) -> None:
    """Refuse a partition directory whose ``partition.metadata`` names another topic id."""
    found = read_partition_metadata(directory)
    if found is None:
        return  # never written (a crash right after creation): it is written now
    if parse_topic_id(found) == parse_topic_id(expected):
        return
    raise PartitionMetadataError(
        f"{directory} holds topic id {found} but the metadata says topic {topic!r} has id "
        f"{expected}: this is another topic's data (deleted and re-created?). Move the "
        f"directory out of the log dir, or rename it to {directory.name}."
        f"{uuid.uuid4().hex}-stray to keep it aside, then start again"
    )


def write_partition_metadata(directory: Path, topic_id: str) -> None:
    path = directory / PARTITION_METADATA_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"version: 0\ntopic_id: {topic_id}\n")
    os.replace(tmp, path)
