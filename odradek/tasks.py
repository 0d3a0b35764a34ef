"""Small asyncio helpers every layer may use.

``cancel_and_wait`` stops a background task for good. A plain ``task.cancel(); await
task`` can wait forever on Python 3.11: ``asyncio.wait_for`` swallows a cancellation
that arrives just as the future it waits on completes (CPython gh-86296, fixed in
3.12), so a loop that calls it keeps running with the cancellation lost. Cancelling
again until the task has ended makes a shutdown finish whatever moment it lands on.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

RECANCEL_S: Final = 0.5


async def cancel_and_wait(task: asyncio.Task[Any] | None, recancel_s: float = RECANCEL_S) -> None:
    """Cancel ``task`` (re-cancelling every ``recancel_s`` until it has ended) and wait
    for it; a task that ended with an exception other than its cancellation raises it
    here, as awaiting it would."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=recancel_s)
    if not task.cancelled():
        task.result()
