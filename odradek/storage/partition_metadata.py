"""``partition.metadata``: the topic id a partition directory belongs to.

Format (Kafka's): text lines ``version: 0`` and ``topic_id: <base64 uuid>``, replaced
atomically (write a temporary file, then rename) so a crash leaves the old or the new.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

PARTITION_METADATA_FILE: Final = "partition.metadata"


def read_partition_metadata(directory: Path) -> str | None:
    """Topic id (base64 text) from ``partition.metadata``, if the file exists."""
    path = directory / PARTITION_METADATA_FILE
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return None


def write_partition_metadata(directory: Path, topic_id: str) -> None:
    path = directory / PARTITION_METADATA_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"version: 0\ntopic_id: {topic_id}\n")
    os.replace(tmp, path)
