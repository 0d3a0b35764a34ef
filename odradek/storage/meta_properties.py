"""``meta.properties``: which cluster and node a log dir belongs to.

How this works and why: every log dir holds a small Java-properties file (Kafka's
name and keys: ``version``, ``cluster.id``, ``node.id``, ``directory.id``). It is what
stops a broker from serving another node's or another cluster's data. An empty log
dir is formatted on first start (odradek's stand-in for ``kafka-storage format``),
but odradek never guesses an identity for data it finds:

- a file that cannot be read as properties, or lacks ``cluster.id``/``node.id``, is
  damaged: the broker refuses to start and says to restore the file;
- a log dir that holds data (partition directories, checkpoints) but no
  ``meta.properties`` is refused too (Kafka refuses to start on an unformatted dir),
  instead of being silently adopted under a new cluster id;
- log dirs of different clusters, or of another node, are refused.

Each refusal is a ``MetaPropertiesError`` (a StorageError, so ``odradek serve`` prints
it as one line and exits non-zero) that names the file and what to do. Nothing in
the dir is read, changed or deleted before the identity checks pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from odradek.storage.errors import StorageError

META_PROPERTIES_FILE: Final = "meta.properties"
REQUIRED_KEYS: Final = ("cluster.id", "node.id")
# Files a broker writes into a log dir it has used (besides partition directories).
_DATA_FILES: Final = (
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "replication-offset-checkpoint",
    ".kafka_cleanshutdown",
)
_MAX_BYTES: Final = 64 * 1024  # a real one is ~150 bytes


class MetaPropertiesError(StorageError):
    """A log dir whose identity cannot be established; the message says what to do."""


def _damaged(path: Path, problem: str) -> MetaPropertiesError:
    return MetaPropertiesError(
        f"{path} is damaged ({problem}); restore it from a backup or copy it from another "
        "log dir of this broker (same cluster.id and node.id), then start again"
    )


def read_meta_properties(log_dir: Path) -> dict[str, str]:
    """The properties of ``log_dir/meta.properties``; {} if the file does not exist.

    Raises MetaPropertiesError if it exists but is not a readable properties file.
    """
    path = log_dir / META_PROPERTIES_FILE
    try:
        with path.open("rb") as file:
            data = file.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise MetaPropertiesError(f"cannot read {path}: {error.strerror or error}") from None
    if len(data) > _MAX_BYTES:
        raise _damaged(path, f"larger than {_MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _damaged(path, f"not text: undecodable byte at position {error.start}") from None
    properties = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip() or not key.strip().isprintable():
            raise _damaged(path, f"line {number} is not key=value")
        properties[key.strip()] = value.strip()
    return properties


def write_meta_properties(log_dir: Path, properties: Mapping[str, str]) -> None:
    path = log_dir / META_PROPERTIES_FILE
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as file:
        file.write("".join(f"{k}={v}\n" for k, v in sorted(properties.items())))
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def _data_in(log_dir: Path, reserved: Sequence[str]) -> str | None:
    """A short description of data a broker left in ``log_dir``, or None if there is none."""
    if not log_dir.is_dir():
        return None
    names = sorted(
        p.name for p in log_dir.iterdir() if p.is_dir() and ("-" in p.name or p.name in reserved)
    )
    if names:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return f"{len(names)} partition director{'y' if len(names) == 1 else 'ies'}: {shown}"
    files = [name for name in _DATA_FILES if (log_dir / name).exists()]
    return f"broker files: {', '.join(files)}" if files else None


def ensure_meta_properties(
    log_dirs: Sequence[Path],
    node_id: int,
    new_id: Callable[[], str],
    reserved: Sequence[str] = (),
) -> str:
    """Check every log dir's identity, format the empty ones; returns the cluster id."""
    found = {log_dir: read_meta_properties(log_dir) for log_dir in log_dirs}
    cluster_ids: set[str] = set()
    for log_dir, properties in found.items():
        path = log_dir / META_PROPERTIES_FILE
        if not properties:
            data = _data_in(log_dir, reserved)
            if data is not None:
                raise MetaPropertiesError(
                    f"{log_dir} holds data ({data}) but no {META_PROPERTIES_FILE}: refusing to "
                    "adopt it under a new cluster id; restore meta.properties from a backup "
                    "(or write one with this data's version=1, cluster.id and node.id), or point "
                    "log.dirs at an empty directory"
                )
            continue
        missing = [key for key in REQUIRED_KEYS if not properties.get(key)]
        if missing:
            raise _damaged(path, f"no {' or '.join(missing)}")
        node = properties["node.id"]
        if not node.lstrip("-").isdigit():
            raise _damaged(path, f"node.id={node!r} is not a number")
        if int(node) != node_id:
            raise MetaPropertiesError(
                f"{path} says node.id={node} but this broker is node.id={node_id}: "
                "start it with the node.id this data belongs to, or use another log dir"
            )
        cluster_ids.add(properties["cluster.id"])
    if len(cluster_ids) > 1:
        raise MetaPropertiesError(
            f"log dirs belong to different clusters {sorted(cluster_ids)}: every dir in "
            "log.dirs must hold data of one cluster"
        )
    cluster_id = cluster_ids.pop() if cluster_ids else new_id()
    for log_dir, properties in found.items():
        if not properties:
            write_meta_properties(
                log_dir,
                {
                    "cluster.id": cluster_id,
                    "node.id": str(node_id),
                    "version": "1",
                    "directory.id": new_id(),
                },
            )
    return cluster_id
