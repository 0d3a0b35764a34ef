"""``EmbeddedBroker``: a real single-node odradek broker for the user's own tests.

How this works and why: ``with EmbeddedBroker() as broker:`` starts the same
combined broker+controller ``odradek serve`` runs — the same ``Broker`` class, so
clients see exactly what production gives them — on 127.0.0.1 port 0 with a fresh
temporary data dir, and ``broker.bootstrap`` is ``"127.0.0.1:PORT"``. By default it
runs in the caller's process, its asyncio loop (uvloop, as ``serve``) on a daemon
thread: no interpreter to start, so it is ready in well under a second. That loop
installs no signal handlers (only the main thread may) and leaves the process's
switch interval, gc and open-file limit alone, since they belong to the user. Stopping
runs the broker's clean shutdown on that loop, waits for the thread to end, shuts the
loop's executor down and removes the temporary dir, so nothing of it is left in the
process: a second broker afterwards (or beside it) starts from nothing.

``process=True`` runs ``python -m odradek serve`` instead (_process.py): slower to
start, but the broker's CPU is its own, a crash cannot take the tests with it, and it
can be killed (``kill()``) to test a client's recovery.

Overrides are server.properties keys: ``EmbeddedBroker(config={"num.partitions":
"3"})``; a bad key or value raises ``ValueError`` with the broker's one-line message.
``create_topic`` is idempotent ("topics created on demand") and returns once every
partition has a leader, so a client may produce at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final

from odradek.testing._process import READY_TIMEOUT_S, STOP_TIMEOUT_S, ServeProcess
from odradek.testing.topics import close_admin, create_topic

if TYPE_CHECKING:
    from odradek.server.broker import Broker
    from odradek.server.config import BrokerConfig

HOST: Final = "127.0.0.1"


class EmbeddedBroker:
    """A started-on-demand single-node broker; ``start()`` or use it as a context manager."""

    def __init__(
        self,
        *,
        process: bool = False,
        config: Mapping[str, str] | None = None,
        data_dir: str | Path | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self.process = process
        self.config = {str(k): str(v) for k, v in (config or {}).items()}
        self._own_dir = data_dir is None
        self.data_dir: Path | None = None if data_dir is None else Path(data_dir)
        self.ready_timeout_s = ready_timeout_s
        self.bootstrap = ""
        self.port = 0
        self._runner: _ThreadRunner | ServeProcess | None = None
        self._cleanup: weakref.finalize[..., EmbeddedBroker] | None = None
        self._stop_when_collected: weakref.finalize[..., EmbeddedBroker] | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        if self._runner is not None:
            raise RuntimeError("this EmbeddedBroker is already started")
        if self.data_dir is None:
            root = tempfile.mkdtemp(prefix="odradek-embedded-")
            self.data_dir = Path(root) / "data"
            # An abandoned broker's temporary dir goes when it is collected or at exit.
            self._cleanup = weakref.finalize(self, shutil.rmtree, root, ignore_errors=True)
        properties = {
            **self.config,
            "log.dirs": str(self.data_dir),
            "listeners": f"PLAINTEXT://{HOST}:0",
        }
        if "node.id" not in self.config:
            properties["node.id"] = "1"
        try:
            urls = self._start_runner(properties)
        except BaseException:
            self._remove_dir()
            raise
        self.bootstrap = urls[0].split("://", 1)[1]
        self.port = int(self.bootstrap.rsplit(":", 1)[1])
        return self

    def _start_runner(self, properties: dict[str, str]) -> list[str]:
        config = load_config(properties)
        if not self.process:
            runner = _ThreadRunner(config)
            self._runner = runner
            # An abandoned broker is stopped cleanly when collected. Not at exit: by
            # then the interpreter refuses new executor work (the logs' flush needs
            # it), so the daemon thread just ends with the process.
            self._stop_when_collected = weakref.finalize(self, _stop_quietly, runner)
            self._stop_when_collected.atexit = False
            return runner.start(self.ready_timeout_s)
        assert self.data_dir is not None
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        overrides = [f"--override={key}={value}" for key, value in properties.items()]
        child = ServeProcess(overrides, self.data_dir.parent / f"{self.data_dir.name}.log")
        self._runner = child
        child.launch()
        return child.wait_ready(self.ready_timeout_s)

    def stop(self) -> None:
        """Shut the broker down cleanly (and its temporary data dir); safe to repeat."""
        runner, self._runner = self._runner, None
        if self._stop_when_collected is not None:
            self._stop_when_collected.detach()
        if self.bootstrap:
            close_admin(self.bootstrap)
        try:
            if runner is not None:
                runner.stop(STOP_TIMEOUT_S)
        finally:
            self._remove_dir()

    def kill(self) -> None:
        """A crash: SIGKILL the ``process=True`` broker (its data dir stays until stop)."""
        if not isinstance(self._runner, ServeProcess):
            raise RuntimeError("kill() needs EmbeddedBroker(process=True)")
        self._runner.kill()

    def _remove_dir(self) -> None:
        if self._cleanup is not None:
            self._cleanup()  # runs once; later calls do nothing

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        if isinstance(self._runner, ServeProcess):
            return self._runner.alive()
        return self._runner is not None and self._runner.running

    @property
    def pid(self) -> int | None:
        """The broker's process id with ``process=True``; None in-thread."""
        return self._runner.pid if isinstance(self._runner, ServeProcess) else None

    # -- topics --------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> str:
        """Create ``name`` unless it exists (same partition count); returns ``name``."""
        if not self.bootstrap:
            raise RuntimeError("the broker is not started")
        return create_topic(
            self.bootstrap, name, partitions, replication_factor, config or {}, timeout_s
        )

    def __repr__(self) -> str:
        mode = "process" if self.process else "thread"
        return f"EmbeddedBroker({mode}, bootstrap={self.bootstrap or 'not started'!r})"


class _ThreadRunner:
    """The broker's event loop on a daemon thread of this process."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._urls: list[str] = []
        self._failure: BaseException | None = None
        self._stop: asyncio.Event | None = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, timeout_s: float) -> list[str]:
        self.thread = threading.Thread(
            target=self._run, args=(self.config,), name="odradek-embedded-broker", daemon=True
        )
        self.thread.start()
        if not self._ready.wait(timeout_s):
            self.stop(timeout_s)
            raise RuntimeError(f"the embedded broker was not ready within {timeout_s} s")
        if self._failure is not None:
            self.thread.join(timeout_s)
            raise RuntimeError(f"the embedded broker did not start: {_one_line(self._failure)}")
        return self._urls

    def _run(self, config: BrokerConfig) -> None:
        loop = self.loop = _new_loop()
        try:
            loop.run_until_complete(self._serve(config))
        finally:
            try:
                _cancel_leftovers(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    async def _serve(self, config: BrokerConfig) -> None:
        from odradek.server.broker import Broker

        self._stop = asyncio.Event()
        broker: Broker | None = None
        try:
            broker = Broker(config)
            self._urls = await broker.start()
        except BaseException as error:
            self._failure = error
            self._ready.set()
            if broker is not None:
                with contextlib.suppress(Exception):
                    await broker.stop()
            return
        self._ready.set()
        await self._stop.wait()
        await broker.stop()

    def stop(self, timeout_s: float) -> None:
        loop, stop, thread = self.loop, self._stop, self.thread
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                raise RuntimeError(f"the embedded broker did not stop within {timeout_s} s")


def load_config(properties: Mapping[str, str]) -> BrokerConfig:
    """The broker config of ``properties``, checked in the caller's thread (in either
    mode): a bad key or value is a ``ValueError`` with the broker's one-line message."""
    from odradek.server.config import BrokerConfig, ConfigError

    try:
        return BrokerConfig.load(None, [f"{k}={v}" for k, v in properties.items()])
    except ConfigError as error:
        raise ValueError(f"odradek broker config: {error}") from None


def _stop_quietly(runner: _ThreadRunner) -> None:
    with contextlib.suppress(Exception):
        runner.stop(STOP_TIMEOUT_S)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await what the broker's stop left running (a client connection's
    task that was mid-request), so closing the loop warns of no pending task."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _one_line(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror + (f": {error.filename}" if error.filename else "")
    return str(error) or type(error).__name__
