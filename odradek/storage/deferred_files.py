"""Ordered, durable writes of a log's small files, off the event loop.

How this works and why: a segment roll writes the producer-state snapshot and a
retention pass (or a follower's log start following the leader's) rewrites the
leader-epoch checkpoint. Each is a complete small file written atomically — the
checkpoint durably: ``<name>.tmp``, fsync, rename over ``<name>``, fsync the directory
— and done on the event loop that owns the log, the checkpoint's fsyncs stalled every
request on the node for a few ms (tens at load; Kafka moved the same fsyncs off its
request path, KAFKA-15046 and KAFKA-16541). Here the loop
only decides *what* to write: it hands the complete bytes to the log's
``DeferredFiles``, a first-in-first-out queue of file operations (write a whole file,
or unlink one) that a worker thread applies one at a time, in order. Order is what
keeps it safe: two writes of one checkpoint land in the order they were made, a
snapshot's deletion never lands before its write, and the last operation on a path
decides what is on disk once the queue has drained.

Until then the loop must not read the directory as the truth: ``planned`` says what
each queued path will hold (its bytes, or ``None`` for an unlink), and the producer
state reads its snapshots through it. ``write_now`` is for a file that must be
durable before the caller goes on (the epoch cache's new epoch, as Kafka does it): it
drops the not-yet-started operations on the same path (the new content replaces
them), waits for one already running, and writes on the calling thread;
``unlink_now`` does the same for a deletion that must not be overtaken (a snapshot
above a truncation point).
``wait``/``drain`` block until operations are done: the log's flush waits for what
was queued before it (so the recovery point never passes a checkpoint that is not
durable), and close drains the queue before the directory can be renamed away.

A write may also be queued unsynced (``sync=False``: ``.tmp``, rename, no fsync), as
the producer snapshot is: on a machine this loaded, the worker's fsyncs of the directory
made the loop's own file creations (the next segment's files) wait for the journal
commit. Such a file is complete or absent after a kill (the rename is atomic; a torn
one after a power loss fails its CRC and is rebuilt), and ``sync_unsynced`` fsyncs it
where Kafka does (KAFKA-15046): before a flush moves the recovery point, and at close.

A write that fails (a full disk) is logged and dropped: the files written here are
ones recovery can do without (a missing snapshot is rebuilt from the log, a stale
epoch checkpoint is trimmed to the log on load), and the next write of the same file
carries the whole state again.

Concurrency: the loop (the log's owner) calls every method but ``_drain`` and
``apply_next`` (the worker's) and ``sync_unsynced`` (any thread, a flush's); one drain
at a time runs on the worker given at construction (``submit``, e.g. an executor's
``submit``), so a log's operations never run in parallel with each other, while
different logs' queues drain in parallel on a shared pool. ``submit=None`` applies
each operation at once on the caller (tools, tests, the metadata log). The lock is
held only to move jobs, never across I/O.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

Submit = Callable[[Callable[[], None]], object]


@dataclass(slots=True)
class _Job:
    seq: int
    path: Path
    data: bytes | None  # None: unlink
    sync: bool = True  # fsync the file and its directory (else ``sync_unsynced`` does)


class DeferredFiles:
    """A FIFO of whole-file writes and unlinks for one log, applied off the loop."""

    def __init__(self, submit: Submit | None = None) -> None:
        self._submit = submit
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._jobs: deque[_Job] = deque()
        self._head_started = False  # the first job is being applied by the worker
        self._draining = False  # a drain is submitted or running
        self._last_seq = 0  # seq of the newest job handed in
        self._done_seq = 0  # every job with seq <= this is applied (or dropped)
        self._unsynced: set[Path] = set()  # written with sync=False, not fsynced since
        self.failures = 0

    @property
    def deferred(self) -> bool:
        """True when operations run on a worker, False when applied at once."""
        return self._submit is not None

    @property
    def last_seq(self) -> int:
        """The newest operation's sequence number (for ``wait``)."""
        return self._last_seq

    # -- the loop's side ------------------------------------------------------------
    def write(self, path: Path, data: bytes, *, sync: bool = True) -> int:
        """Replace ``path`` with ``data`` atomically, later; returns a seq.

        ``sync``: durably (fsync of the file and the directory); else the file waits
        for ``sync_unsynced``.
        """
        return self._add(path, data, sync)

    def unlink(self, path: Path) -> int:
        """Remove ``path`` (if present) after every operation queued before."""
        return self._add(path, None, True)

    def sync_unsynced(self) -> None:
        """fsync the files written unsynced so far, and their directories (any thread)."""
        with self._lock:
            paths, self._unsynced = self._unsynced, set()
        directories = set()
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted since: nothing to make durable
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            directories.add(path.parent)
        for directory in directories:
            fsync_directory(directory)

    def write_now(self, path: Path, data: bytes) -> None:
        """Replace ``path`` durably before returning, ordered after earlier operations.

        Queued operations on ``path`` that have not started are dropped (``data``
        supersedes them); one already running is waited for.
        """
        self._take_over(path)
        write_durably(path, data)

    def unlink_now(self, path: Path) -> None:
        """Remove ``path`` before returning; no queued write of it lands afterwards.

        For a snapshot above a truncation point: left behind, it would describe a log
        that no longer exists once the log grows past its offset again.
        """
        self._take_over(path)
        path.unlink(missing_ok=True)
        with self._lock:
            self._unsynced.discard(path)

    def _take_over(self, path: Path) -> None:
        """Drop the queued operations on ``path``; wait for a running one to finish."""
        with self._lock:
            self._last_seq += 1
            if self._jobs:
                head = self._jobs[0] if self._head_started else None
                kept = [job for job in self._jobs if job is head or job.path != path]
                self._jobs = deque(kept)
                while self._head_started and self._jobs and self._jobs[0].path == path:
                    self._changed.wait()
            if not self._jobs:
                self._done_seq = self._last_seq

    def planned(self, directory: Path | None = None) -> dict[Path, bytes | None]:
        """What each path touched by a queued operation will hold: bytes, or None (gone)."""
        with self._lock:
            result: dict[Path, bytes | None] = {}
            for job in self._jobs:
                if directory is None or job.path.parent == directory:
                    result[job.path] = job.data
            return result

    def wait(self, seq: int, timeout: float | None = None) -> bool:
        """Block until every operation up to ``seq`` is done; False on timeout."""
        with self._lock:
            return self._changed.wait_for(lambda: self._done_seq >= seq, timeout)

    def drain(self, timeout: float | None = None) -> bool:
        """Block until every operation handed in so far is done; False on timeout."""
        return self.wait(self._last_seq, timeout)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._jobs)

    # -- internals --------------------------------------------------------------------
    def _add(self, path: Path, data: bytes | None, sync: bool) -> int:
        if self._submit is None:
            self._last_seq += 1
            try:
                self._apply(_Job(self._last_seq, path, data, sync))
            finally:
                # Done either way: a failure (a full disk) is the caller's to see, and
                # must not leave a later drain() waiting for ever for this seq.
                self._done_seq = self._last_seq
            return self._last_seq
        with self._lock:
            self._last_seq += 1
            seq = self._last_seq
            tail = self._jobs[-1] if self._jobs else None
            tail_waiting = tail is not None and not (self._head_started and len(self._jobs) == 1)
            if (
                tail is not None
                and tail_waiting
                and tail.path == path
                and data is not None
                and tail.sync == sync
            ):
                # The newest queued operation rewrites the same file and has not started:
                # this content replaces it (fewer fsyncs, same end state, same order).
                tail.data = data
                tail.seq = seq
            else:
                self._jobs.append(_Job(seq, path, data, sync))
            start = not self._draining
            self._draining = True
        if start:
            try:
                self._submit(self._drain)
            except RuntimeError:  # the worker pool is shut down: apply them here
                self._drain()
        return seq

    def _drain(self) -> None:
        """Apply queued operations in order until the queue is empty (worker thread)."""
        while self.apply_next():
            pass

    def apply_next(self) -> bool:
        """Apply the oldest queued operation; False (and the drain ends) if there is none.

        The worker's one step. Tests that give a ``submit`` which never runs the drain
        call it themselves, to stop the queue at any operation (a crash there).
        """
        with self._lock:
            if not self._jobs:
                self._draining = False
                self._done_seq = self._last_seq
                self._changed.notify_all()
                return False
            job = self._jobs[0]
            self._head_started = True
        try:
            self._apply(job)
        except OSError as error:
            with self._lock:
                self.failures += 1
            logger.error("deferred %s of %s failed: %s", _what(job), job.path, error)
        with self._lock:
            self._jobs.popleft()
            self._head_started = False
            self._done_seq = self._jobs[0].seq - 1 if self._jobs else self._last_seq
            self._changed.notify_all()
        return True

    def queued(self) -> list[tuple[Path, bytes | None]]:
        """The queued operations, oldest first (tests, diagnostics)."""
        with self._lock:
            return [(job.path, job.data) for job in self._jobs]

    def _apply(self, job: _Job) -> None:
        if job.data is None:
            job.path.unlink(missing_ok=True)
            with self._lock:
                self._unsynced.discard(job.path)
        elif job.sync:
            write_durably(job.path, job.data)
        else:
            write_atomically(job.path, job.data)
            with self._lock:
                self._unsynced.add(job.path)


def _what(job: _Job) -> str:
    return "write" if job.data is not None else "unlink"


def write_atomically(path: Path, data: bytes) -> None:
    """``<path>.tmp`` then rename over ``path``, no fsync: whole or absent after a kill."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def write_durably(path: Path, data: bytes) -> None:
    """``<path>.tmp``, fsync, rename over ``path``, fsync the directory.

    A crash at any moment leaves the complete old file (or none) or the complete new
    one; a ``.tmp`` left behind is removed by the log loader.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
