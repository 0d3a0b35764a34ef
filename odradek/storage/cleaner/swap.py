"""The cleaner's crash-safe segment swap, and its completion by recovery.

How this works and why (Kafka's ``.cleaned`` / ``.swap`` protocol): a clean writes a
group's result as ``<base>.log.cleaned`` (+ ``.index.cleaned`` ...), fsyncs it, then
on the event loop:

1. renames the new files ``.cleaned`` -> ``.swap``, the log file last, and fsyncs the
   directory: from here a complete replacement exists on disk;
2. renames the replaced segments ``.deleted`` (unlinked after file.delete.delay.ms;
   their descriptors stay open for in-flight reads), fsyncs the directory;
3. renames the new files ``.swap`` -> their final names, the log last, fsyncs.

A crash at any point is finished by ``complete_swaps`` before a log is loaded:
``*.cleaned`` files are an unfinished clean and are deleted (the old segments are
intact); a ``<base>.log.swap`` is a finished clean, so every ordinary segment whose
base offset lies in the swap segment's range [base, last offset] is deleted and the
swap file renamed into place. Its indexes are not trusted (deleted; the loader
rebuilds a segment whose index is missing). ``.swap`` indexes without their log
file, and ``.deleted`` files, are leftovers and go. Nothing acknowledged is lost:
before step 1 ends the old segments are whole, after it the new one is.

Concurrency: ``replace_segments`` runs on the loop that owns the log;
``complete_swaps`` runs before the log is opened.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

from odradek.records.batch import HEADER_SIZE, unpack_header
from odradek.records.errors import CorruptRecordError
from odradek.storage.deferred_files import fsync_directory
from odradek.storage.local_log import LocalLog
from odradek.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from odradek.storage.txn_index import TXN_INDEX_SUFFIX

logger = logging.getLogger(__name__)

CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
SEGMENT_SUFFIXES: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# Test hook: the step after which replace_segments raises (a crash at that point).
STEPS: Final = ("swap", "delete", "rename")


class SimulatedCrash(Exception):
    """Raised by ``replace_segments(crash_after=...)`` in tests."""


def replace_segments(
    local: LocalLog,
    cleaned: LogSegment,
    old: list[LogSegment],
    *,
    crash_after: str | None = None,
) -> None:
    """Swap ``cleaned`` (files ``.cleaned``, fsynced) in for the consecutive ``old``."""
    directory = local.directory
    cleaned.write_indexes()
    cleaned.rename_suffix(SWAP_SUFFIX)
    fsync_directory(directory)
    if crash_after == "swap":
        raise SimulatedCrash("swap")
    for segment in old:
        segment.rename_to_deleted()
    fsync_directory(directory)
    if crash_after == "delete":
        raise SimulatedCrash("delete")
    cleaned.rename_suffix("")
    fsync_directory(directory)
    if crash_after == "rename":
        raise SimulatedCrash("rename")
    local.replace_segments(cleaned, old)


def _base(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)] if name.endswith(suffix) else ""
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _last_offset(path: Path) -> int | None:
    """The last offset of the batches in a swap log file (None when it holds none);
    a torn batch cannot be there (the file was fsynced before it was named .swap),
    but a damaged one ends the scan rather than the start-up."""
    last = None
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            file.seek(position)
            try:
                header = unpack_header(file.read(HEADER_SIZE))
            except CorruptRecordError:
                break
            if header.size <= 0 or position + header.size > size:
                break
            last = header.last_offset
            position += header.size
    return last


def complete_swaps(directory: Path) -> int:
    """Finish or roll back interrupted cleaner swaps in ``directory``; returns the
    number of swaps completed."""
    names = [path.name for path in directory.iterdir()]
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            (directory / name).unlink(missing_ok=True)
    swaps = sorted(b for n in names if (b := _base(n, LOG_SUFFIX + SWAP_SUFFIX)) is not None)
    for suffix in SEGMENT_SUFFIXES[1:]:
        for name in names:
            if name.endswith(suffix + SWAP_SUFFIX):
                (directory / name).unlink(missing_ok=True)  # indexes are rebuilt
    for base in swaps:
        swap = directory / f"{base:020d}{LOG_SUFFIX}{SWAP_SUFFIX}"
        last = _last_offset(swap)
        end = base if last is None else max(base, last)
        for path in list(directory.iterdir()):
            for suffix in SEGMENT_SUFFIXES:
                old_base = _base(path.name, suffix)
                if old_base is not None and base <= old_base <= end:
                    path.unlink(missing_ok=True)
        os.rename(swap, directory / f"{base:020d}{LOG_SUFFIX}")
        logger.info("%s: completed the swap of a cleaned segment at %d", directory.name, base)
    if swaps:
        fsync_directory(directory)
    return len(swaps)
