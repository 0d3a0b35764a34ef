"""The event loop the blocking faces run their asyncio core on, on a daemon thread.

Shared by the blocking ``Producer``, ``Consumer`` and ``AdminClient``: each owns one
``LoopThread`` and hands it coroutines, waiting for their results on the caller's
thread.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class LoopThread:
    """An event loop running on a daemon thread.

    ``stop`` cancels the loop's tasks and waits for them (briefly) before stopping it,
    so a client dropped without ``close()`` leaves no pending task to be destroyed —
    asyncio would print "Task was destroyed but it is pending!" for each. Loops still
    running when the interpreter exits (clients never closed, as confluent-kafka
    programs leave them) are stopped the same way by an atexit hook.
    """

    def __init__(self, name: str) -> None:
        self.loop = _new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()
        _LIVE_LOOPS.add(self)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None

    def stop(self, cancel_timeout: float = 2.0) -> None:
        if self.loop.is_running():
            if threading.current_thread() is not self.thread:
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(_cancel_tasks(), self.loop).result(
                        cancel_timeout
                    )
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self.loop.call_soon_threadsafe(self.loop.stop)
            if threading.current_thread() is not self.thread:
                self.thread.join(10)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()
        _LIVE_LOOPS.discard(self)


async def _cancel_tasks(recancel_s: float = 0.2) -> None:
    """On a loop: cancel every other task and wait until they have ended."""
    this = asyncio.current_task()
    tasks = {t for t in asyncio.all_tasks() if t is not this}
    while tasks:
        for task in tasks:
            task.cancel()
        done, tasks = await asyncio.wait(tasks, timeout=recancel_s)
        for task in done:  # retrieved: a dropped client's failures are not news at exit
            if not task.cancelled():
                task.exception()


_LIVE_LOOPS: weakref.WeakSet[LoopThread] = weakref.WeakSet()


@atexit.register
def _stop_live_loops() -> None:
    for thread in list(_LIVE_LOOPS):
        with contextlib.suppress(Exception):
            thread.stop(cancel_timeout=1.0)


def weak_callback(method: Callable[[BaseException], None]) -> Callable[[BaseException], None]:
    """A callback that does not keep its client alive (so a dropped client is freed,
    and its loop stopped, as soon as the program lets go of it)."""
    ref = weakref.WeakMethod(method)

    def call(error: BaseException) -> None:
        bound = ref()
        if bound is not None:
            bound(error)

    return call
