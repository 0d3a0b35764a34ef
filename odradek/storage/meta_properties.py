"""``meta.properties``: which cluster and node a log dir belongs to.

How this works and why: every log dir holds a small Java-properties file (Kafka's
name and keys: ``version``, ``cluster.id``, ``node.id``, ``directory.id``). It is what
stops a broker from serving another node's or another cluster's data. Dirs are
formatted by ``odradek storage format`` (``format_dirs``, Kafka's ``kafka-storage.sh
format``): the operator picks the cluster id once for the whole cluster. The
zero-config single combined node (no quorum configured) still formats its empty dirs
on first start; a node of a configured quorum refuses unformatted dirs
(``require_formatted``), as Kafka does, because a node that invented its own cluster
id could never join the others. Either way odradek never guesses an identity for
data it finds:

- a file that cannot be read as properties, or lacks ``cluster.id``/``node.id``, is
  damaged: the broker refuses to start and says to restore the file;
- a log dir that holds data (partition directories, checkpoints) but no
  ``meta.properties`` is refused too (Kafka refuses to start on an unformatted dir),
  instead of being silently adopted under a new cluster id;
- log dirs of different clusters, or of another node, are refused;
- two dirs with the same ``directory.id`` (one copied from the other) are refused.

Ids (cluster and directory) are Kafka's: 16 random bytes in URL-safe base64 without
padding, 22 characters (``random_uuid``, checked by ``parse_uuid``).

Each refusal is a ``MetaPropertiesError`` (a StorageError, so ``odradek serve`` prints
it as one line and exits non-zero) that names the file and what to do. Nothing in
the dir is read, changed or deleted before the identity checks pass.
"""

from __future__ import annotations

import base64
import binascii
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
UUID_BYTES: Final = 16
# Kafka reserves the ids whose first 8 bytes are zero (and last 8 below 100) for markers
# such as an unassigned directory; random ids avoid the whole zero-prefix range.
_RESERVED_PREFIX: Final = bytes(8)
FORMAT_COMMAND: Final = "odradek storage format -t <cluster-id> -c <server.properties>"


def random_uuid() -> str:
    """A new cluster or directory id: 16 random bytes, URL-safe base64, no padding.

    Like Kafka, never one that starts with "-" (it would read as a command-line
    option) nor a reserved one.
    """
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-") and not raw.startswith(_RESERVED_PREFIX):
            return text


def parse_uuid(text: str) -> bytes:
    """The 16 bytes of a Kafka id; ValueError (one line, naming the text) otherwise."""
    if len(text) != 22 or not text.isascii():
        raise ValueError(
            f"{text!r} is not a Kafka uuid: expected 22 characters of URL-safe base64 "
            "(16 bytes), e.g. from `odradek storage random-uuid`"
        )
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != UUID_BYTES or base64.urlsafe_b64encode(raw).decode()[:22] != text:
        raise ValueError(
            f"{text!r} is not a Kafka uuid: not URL-safe base64 of 16 bytes "
            "(use `odradek storage random-uuid`)"
        )
    return raw


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


def _refuse_unformatted_data(log_dir: Path, reserved: Sequence[str]) -> None:
    data = _data_in(log_dir, reserved)
    if data is not None:
        raise MetaPropertiesError(
            f"{log_dir} holds data ({data}) but no {META_PROPERTIES_FILE}: refusing to "
            "adopt it under a new cluster id; restore meta.properties from a backup "
            "(or write one with this data's version=1, cluster.id and node.id), or point "
            "log.dirs at an empty directory"
        )


def _check_identity(log_dir: Path, properties: Mapping[str, str], node_id: int) -> None:
    """A readable meta.properties of this node (cluster ids are compared by the caller)."""
    path = log_dir / META_PROPERTIES_FILE
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


def _check_directory_ids(found: Mapping[Path, Mapping[str, str]]) -> None:
    seen: dict[str, Path] = {}
    for log_dir, properties in found.items():
        directory_id = properties.get("directory.id")
        if not directory_id:  # version 0 files have none
            continue
        if directory_id in seen:
            raise MetaPropertiesError(
                f"{seen[directory_id]} and {log_dir} have the same directory.id={directory_id} "
                "(one copied from the other?): every log dir needs its own; give one a new "
                "directory.id from `odradek storage random-uuid`"
            )
        seen[directory_id] = log_dir


def _new_properties(cluster_id: str, node_id: int, directory_id: str) -> dict[str, str]:
    return {
        "cluster.id": cluster_id,
        "node.id": str(node_id),
        "version": "1",
        "directory.id": directory_id,
    }


def require_formatted(log_dirs: Sequence[Path]) -> None:
    """Refuse, before anything is created, a dir that ``odradek storage format`` has not
    formatted (a node of a configured quorum does not format its own dirs)."""
    for log_dir in log_dirs:
        if not read_meta_properties(log_dir):
            raise MetaPropertiesError(
                f"no {META_PROPERTIES_FILE} in {log_dir}: a node of a controller quorum does "
                f"not format its own log dirs; run `{FORMAT_COMMAND}` with the cluster's id "
                "first"
            )


def ensure_meta_properties(
    log_dirs: Sequence[Path],
    node_id: int,
    new_id: Callable[[], str],
    reserved: Sequence[str] = (),
    *,
    format_empty: bool = True,
) -> str:
    """Check every log dir's identity, format the empty ones (only if ``format_empty``,
    else they are refused); returns the cluster id."""
    found = {log_dir: read_meta_properties(log_dir) for log_dir in log_dirs}
    cluster_ids: set[str] = set()
    for log_dir, properties in found.items():
        if not properties:
            _refuse_unformatted_data(log_dir, reserved)
            if not format_empty:
                require_formatted([log_dir])
            continue
        _check_identity(log_dir, properties, node_id)
        cluster_ids.add(properties["cluster.id"])
    if len(cluster_ids) > 1:
        raise MetaPropertiesError(
            f"log dirs belong to different clusters {sorted(cluster_ids)}: every dir in "
            "log.dirs must hold data of one cluster"
        )
    _check_directory_ids(found)
    cluster_id = cluster_ids.pop() if cluster_ids else new_id()
    for log_dir, properties in found.items():
        if not properties:
            write_meta_properties(log_dir, _new_properties(cluster_id, node_id, new_id()))
    return cluster_id


@dataclass(frozen=True, slots=True)
class FormatResult:
    log_dir: Path
    formatted: bool  # False: it was already formatted for this cluster and node


def format_dirs(
    log_dirs: Sequence[Path],
    cluster_id: str,
    node_id: int,
    *,
    ignore_formatted: bool = False,
    reserved: Sequence[str] = (),
    new_id: Callable[[], str] = random_uuid,
) -> list[FormatResult]:
    """``odradek storage format``: write meta.properties into every dir of ``log_dirs``.

    Every dir is checked before any is written, so a refusal changes nothing. A dir
    formatted for another cluster or node is always refused; one already formatted
    for this cluster and node is refused unless ``ignore_formatted`` (then it is left
    as it is). Missing dirs are created.
    """
    parse_uuid(cluster_id)
    found = {log_dir: read_meta_properties(log_dir) for log_dir in log_dirs}
    for log_dir, properties in found.items():
        if not properties:
            _refuse_unformatted_data(log_dir, reserved)
            continue
        _check_identity(log_dir, properties, node_id)
        if properties["cluster.id"] != cluster_id:
            raise MetaPropertiesError(
                f"{log_dir / META_PROPERTIES_FILE} says cluster.id={properties['cluster.id']}, "
                f"not {cluster_id}: it holds another cluster's data; refusing to reformat it"
            )
        if not ignore_formatted:
            raise MetaPropertiesError(
                f"Log directory {log_dir} is already formatted. Use --ignore-formatted to "
                "ignore this directory and format the others."
            )
    _check_directory_ids(found)
    results = []
    for log_dir, properties in found.items():
        if not properties:
            log_dir.mkdir(parents=True, exist_ok=True)
            write_meta_properties(log_dir, _new_properties(cluster_id, node_id, new_id()))
        results.append(FormatResult(log_dir, not properties))
    return results


@dataclass(frozen=True, slots=True)
class DirsReport:
    """What ``odradek storage info`` shows: each dir's meta.properties and the problems."""

    dirs: tuple[Path, ...]
    found: dict[Path, dict[str, str]]  # the formatted dirs, in the order given
    problems: tuple[str, ...]


def describe_dirs(log_dirs: Sequence[Path], node_id: int) -> DirsReport:
    """Read every dir's identity without changing anything; problems as one-line texts."""
    found: dict[Path, dict[str, str]] = {}
    problems: list[str] = []
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            problems.append(f"{log_dir} does not exist.")
            continue
        try:
            properties = read_meta_properties(log_dir)
            if properties:
                _check_identity(log_dir, properties, node_id)
        except MetaPropertiesError as error:
            problems.append(str(error))
            continue
        if not properties:
            problems.append(f"{log_dir} is not formatted.")
            continue
        found[log_dir] = properties
    cluster_ids = sorted({properties["cluster.id"] for properties in found.values()})
    if len(cluster_ids) > 1:
        problems.append(f"log dirs belong to different clusters {cluster_ids}.")
    try:
        _check_directory_ids(found)
    except MetaPropertiesError as error:
        problems.append(str(error))
    return DirsReport(tuple(log_dirs), found, tuple(problems))
