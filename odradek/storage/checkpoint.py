"""Kafka's plain-text checkpoint files, rewritten whole and atomically.

How this works and why: a broker keeps a few small facts that must survive a restart
but change far less often than the log itself: the recovery point, the log start
offset, the high watermark, the cleaner's position and the leader epoch history. Kafka
keeps each in a tiny text file that it rewrites as a whole, and odradek uses the same
files so a data directory means the same thing to both. Overwriting a file in place
could leave it torn by a crash, so every write goes to ``<name>.tmp``, which is flushed
and fsynced, renamed over ``<name>`` with ``os.replace`` (atomic on POSIX), and then
the directory is fsynced so the rename itself is durable. A crash at any moment leaves
either the complete old file or the complete new one. A ``.tmp`` left behind by a crash
is never read and is overwritten by the next write.

On-disk format (UTF-8 text, every line ending in ``\\n``)::

    0            version (always 0 for the files Kafka writes today)
    2            number of entries that follow
    foo 0 10     one entry per line, fields separated by single spaces
    bar-baz 3 7

The offset checkpoints (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
replication-offset-checkpoint, cleaner-offset-checkpoint) hold ``topic partition
offset`` entries; leader-epoch-checkpoint holds ``epoch startOffset`` entries (see
``epoch_cache.py``). Topic names only use ``[a-zA-Z0-9._-]``, so splitting on spaces
is unambiguous.

Reading is strict: a wrong version, an entry count that disagrees with the entries, a
wrong number of fields or a field that is not a plain decimal integer in range raises
``CheckpointError`` naming the file and line, because trusting a damaged checkpoint
can lose or resurrect data. The one leniency is a zero-byte file, which Kafka also
reads as "no entries".

Concurrency: single owner, the event loop. Each call does its (blocking, small) I/O
from start to finish and shares nothing with other calls, so no locking is needed. Two
writers of the same path at once would race on the ``.tmp`` file; the owner never
does that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from odradek.storage.deferred_files import write_durably
from odradek.storage.errors import StorageError

OFFSET_CHECKPOINT_VERSION: Final = 0
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"

INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

# Line numbers are 1-based: the version is line 1, the count line 2, entries follow.
_FIRST_ENTRY_LINE: Final = 3
_INTEGER = re.compile(r"-?[0-9]+")
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_SHOWN_CHARS: Final = 40
_MAX_INT_CHARS: Final = 20  # a sign and the 19 digits of an int64


class CheckpointError(StorageError):
    """A checkpoint file that cannot be parsed; the message names the file and line."""

    def __init__(self, path: Path, problem: str, line: int | None = None) -> None:
        where = str(path) if line is None else f"{path} line {line}"
        super().__init__(f"malformed checkpoint {where}: {problem}")
        self.path = path
        self.line = line


# -- generic envelope -------------------------------------------------------------


def write_checkpoint_lines(path: Path, version: int, lines: Sequence[str]) -> None:
    """Atomically and durably replace ``path`` with a version, a count and ``lines``."""
    write_durably(path, checkpoint_bytes(version, lines))


def checkpoint_bytes(version: int, lines: Sequence[str]) -> bytes:
    """The content of a checkpoint file: version, count, ``lines`` (for deferred writes)."""
    for line in lines:
        assert line and "\n" not in line, f"bad checkpoint line {line!r}"
    rows = [str(version), str(len(lines)), *lines]
    return "".join(f"{row}\n" for row in rows).encode()


def read_checkpoint_lines(path: Path, expected_version: int) -> list[list[str]] | None:
    """The entries of ``path`` split into fields, or None if the file does not exist.

    Raises CheckpointError if the envelope (version, count) is malformed; the fields
    themselves are the caller's to check (``expect_fields``, ``parse_int_field``).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    rows = _split_rows(path, data)
    if not rows:
        return []
    _check_version(path, rows[0], expected_version)
    if len(rows) < 2:
        raise CheckpointError(path, "missing the entry count", line=2)
    entries = rows[2:]
    count = _parse_int(path, 2, rows[1], "entry count", 0, INT32_MAX)
    if count != len(entries):
        raise CheckpointError(path, f"count says {count} entries, found {len(entries)}", 2)
    return [_split_entry(path, index, row) for index, row in enumerate(entries)]


def expect_fields(path: Path, index: int, fields: Sequence[str], count: int) -> None:
    """Raise CheckpointError unless entry number ``index`` (0-based) has ``count`` fields."""
    if len(fields) != count:
        problem = f"expected {count} fields, found {len(fields)}"
        raise CheckpointError(path, problem, entry_line(index))


def parse_int_field(path: Path, index: int, text: str, what: str, low: int, high: int) -> int:
    """Parse field ``what`` of entry ``index`` as a decimal integer in [low, high]."""
    return _parse_int(path, entry_line(index), text, what, low, high)


def entry_line(index: int) -> int:
    """The 1-based line number of entry number ``index`` (0-based), for error messages."""
    return index + _FIRST_ENTRY_LINE


# -- offset checkpoints: topic partition offset ----------------------------------


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Atomically replace ``path`` with ``offsets``, sorted by (topic, partition)."""
    lines = [
        _offset_line(topic, partition, offsets[topic, partition])
        for topic, partition in sorted(offsets)
    ]
    write_checkpoint_lines(path, OFFSET_CHECKPOINT_VERSION, lines)


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """The offsets stored in ``path``; {} if it does not exist. CheckpointError if malformed."""
    offsets: dict[tuple[str, int], int] = {}
    for index, fields in enumerate(read_checkpoint_lines(path, OFFSET_CHECKPOINT_VERSION) or []):
        key, offset = _parse_offset_entry(path, index, fields)
        if key in offsets:
            raise CheckpointError(path, f"duplicate entry for {key[0]} {key[1]}", entry_line(index))
        offsets[key] = offset
    return offsets


def _offset_line(topic: str, partition: int, offset: int) -> str:
    assert _TOPIC.fullmatch(topic), f"illegal topic name {topic!r}"
    assert 0 <= partition <= INT32_MAX, f"bad partition {partition}"
    assert INT64_MIN <= offset <= INT64_MAX, f"offset {offset} outside int64"
    return f"{topic} {partition} {offset}"


def _parse_offset_entry(path: Path, index: int, fields: list[str]) -> tuple[tuple[str, int], int]:
    expect_fields(path, index, fields, 3)
    topic, partition_text, offset_text = fields
    if not _TOPIC.fullmatch(topic):
        raise CheckpointError(path, f"illegal topic name {_show(topic)}", entry_line(index))
    partition = parse_int_field(path, index, partition_text, "partition", 0, INT32_MAX)
    offset = parse_int_field(path, index, offset_text, "offset", INT64_MIN, INT64_MAX)
    return (topic, partition), offset


# -- helpers ----------------------------------------------------------------------


def _split_rows(path: Path, data: bytes) -> list[str]:
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise CheckpointError(path, f"not UTF-8 text (byte {exc.start})") from None
    if not text:
        return []
    return text.removesuffix("\n").split("\n")


def _check_version(path: Path, text: str, expected: int) -> None:
    version = _parse_int(path, 1, text, "version", INT64_MIN, INT64_MAX)
    if version != expected:
        raise CheckpointError(path, f"unsupported version {version}, expected {expected}", 1)


def _split_entry(path: Path, index: int, row: str) -> list[str]:
    if not row:
        raise CheckpointError(path, "blank entry line", entry_line(index))
    return row.split(" ")


def _parse_int(path: Path, line: int, text: str, what: str, low: int, high: int) -> int:
    if not _INTEGER.fullmatch(text):
        raise CheckpointError(path, f"{what} is not an integer: {_show(text)}", line)
    # The length check keeps int() away from absurdly long digit strings.
    if len(text) > _MAX_INT_CHARS or not low <= int(text) <= high:
        raise CheckpointError(path, f"{what} {_show(text)} outside [{low}, {high}]", line)
    return int(text)


def _show(text: str) -> str:
    """``text`` quoted and cut short, safe to put in a one-line message."""
    if len(text) > _SHOWN_CHARS:
        return repr(text[:_SHOWN_CHARS]) + "..."
    return repr(text)
