"""tests/support/netproxy.py against real processes: who connects is told from /proc,
a cut link drops its connections and holds or refuses new ones, other links and the
test's own clients are untouched, and a heal lets held bytes through."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kraft import Quorum, node_name, quorum_behind_proxies
from tests.support.netproxy import CLIENT, HOLD, REFUSE, NetProxy, identify
from tests.support.wire import WireClient, cluster_metadata

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/net/tcp"), reason="netproxy tells processes apart through /proc"
)

# A party process: for every "host port timeout" line, connect, send "ping", and print
# what came back ("pong:<bytes>"), or the error's class name.
PARTY = r"""
import socket, sys
for line in sys.stdin:
    host, port, timeout = line.split()
    try:
        with socket.create_connection((host, int(port)), timeout=float(timeout)) as s:
            s.sendall(b"ping")
            data = s.recv(100)
            print("pong:" + data.decode() if data else "closed", flush=True)
    except Exception as exc:
        print(type(exc).__name__, flush=True)
"""


class Party:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PARTY],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def ping(self, port: int, timeout_s: float = 5.0) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"127.0.0.1 {port} {timeout_s}\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


class Echo:
    """An upstream that answers every chunk with "pong" + the chunk, on its own thread."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(100):
                    conn.sendall(data.replace(b"ping", b"pong"))
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def parties() -> Iterator[dict[str, Party]]:
    started = {"n1": Party(), "n2": Party()}
    try:
        yield started
    finally:
        for party in started.values():
            party.close()


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    try:
        yield server
    finally:
        server.close()


def client_ping(port: int, timeout_s: float = 5.0) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
            sock.sendall(b"ping")
            data = sock.recv(100)
            return "pong:" + data.decode() if data else "closed"
    except Exception as exc:
        return type(exc).__name__


def test_the_connecting_process_is_told_from_proc(echo: Echo) -> None:
    child = Party()
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            mine = socket.create_connection(("127.0.0.1", port))
            accepted, peer = listener.accept()
            with mine, accepted:
                assert identify(peer, port, {"me": _self_pid()}) == "me"
                assert identify(peer, port, {"other": child.pid}) is None
    finally:
        child.close()


def _self_pid() -> int:
    return os.getpid()


def test_a_cut_link_holds_new_connections_until_healed_and_spares_other_links(
    parties: dict[str, Party], echo: Echo
) -> None:
    pids = {name: party.pid for name, party in parties.items()}
    with NetProxy(lambda: pids, mode=HOLD) as net:
        to_b = net.add("b", ("127.0.0.1", echo.port))
        assert parties["n1"].ping(to_b.port) == "pong:pong"
        assert client_ping(to_b.port) == "pong:pong"
        net.cut("n1", "b")
        assert net.is_cut("n1", "b") and not net.is_cut("b", "n1")
        # held: accepted, never answered; the others still get through
        assert parties["n1"].ping(to_b.port, 0.5) in ("timeout", "TimeoutError")
        assert parties["n2"].ping(to_b.port) == "pong:pong"
        assert client_ping(to_b.port) == "pong:pong"
        assert net.stats["held"] >= 1 and net.stats["from_client"] >= 2
        # a connection held across the heal gets its bytes through afterwards
        healer = threading.Timer(0.5, net.heal)
        healer.start()
        try:
            assert parties["n1"].ping(to_b.port, 10) == "pong:pong"
        finally:
            healer.join()
        assert not net.cuts


def test_a_cut_drops_open_connections_and_refuse_mode_resets_new_ones(
    parties: dict[str, Party], echo: Echo
) -> None:
    pids = {name: party.pid for name, party in parties.items()}
    with NetProxy(lambda: {**pids, "me": _self_pid()}, mode=REFUSE) as net:
        proxy = net.add("b", ("127.0.0.1", echo.port))
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as open_one:
            open_one.sendall(b"ping")
            assert open_one.recv(100) == b"pong"
            net.cut("me", "b")
            assert net.stats["dropped"] == 1
            try:
                open_one.sendall(b"ping")
                after = open_one.recv(100)
            except OSError:
                after = b""
            assert after == b""
        assert client_ping(proxy.port, 2) in ("closed", "ConnectionResetError")
        assert parties["n1"].ping(proxy.port) == "pong:pong"
        net.heal()
        assert client_ping(proxy.port) == "pong:pong"


def test_partition_cuts_both_directions_between_groups_only(echo: Echo) -> None:
    with NetProxy(dict) as net:
        links = net.partition([{"n1"}, {"n2", "n3"}])
        assert links == {("n1", "n2"), ("n1", "n3"), ("n2", "n1"), ("n3", "n1")}
        assert not net.is_cut("n2", "n3") and not net.is_cut(CLIENT, "n1")
        net.heal()
        assert not net.cuts


def test_close_resets_connections_and_stops_listening(echo: Echo) -> None:
    net = NetProxy(dict)
    proxy = net.add("b", ("127.0.0.1", echo.port))
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    with sock:
        sock.sendall(b"ping")
        assert sock.recv(100) == b"pong"
        net.close()
        time.sleep(0.1)
        try:
            got = sock.recv(100)
        except OSError:
            got = b""
        assert got == b""
    assert client_ping(proxy.port, 1) == "ConnectionRefusedError"


def test_close_ends_held_connections_without_asyncio_errors(
    echo: Echo, caplog: pytest.LogCaptureFixture
) -> None:
    net = NetProxy(lambda: {"me": os.getpid()})
    proxy = net.add("b", ("127.0.0.1", echo.port))
    net.cut("me", "b")
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as held:
        held.sendall(b"ping")
        deadline = time.monotonic() + 5
        while not net.stats["held"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert net.stats["held"] == 1
        with caplog.at_level("ERROR", logger="asyncio"):
            net.close()
        try:
            got = held.recv(100)
        except OSError:
            got = b""
        assert got == b""
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text
    assert echo.accepted == 0  # held bytes never reached the upstream


@pytest.mark.slow
def test_isolating_the_raft_leader_behind_proxies_elects_another_and_heals(
    tmp_path: Path,
) -> None:
    """Three real nodes whose links cross the proxies: cut the active controller off
    from the other two and they elect one of themselves, while the test (a client)
    still reaches every node; healed, the old leader follows the new one."""
    quorum: Quorum | None = None
    with NetProxy(lambda: quorum.pids() if quorum is not None else {}) as net:
        quorum, brokers = quorum_behind_proxies(tmp_path, net)
        with quorum:
            old, epoch = quorum.wait_for_leader(30)
            others = [n for n in quorum.node_ids if n != old]
            links = net.partition([{node_name(old)}, {node_name(n) for n in others}])
            assert len(links) == 4
            new, new_epoch = quorum.wait_for_leader(60, not_in=frozenset({old}), among=others)
            assert new in others and new_epoch > epoch
            assert net.stats["dropped"] + net.stats["held"] > 0
            # the test's own connections are never cut: the isolated node still answers
            # Metadata through its proxy
            with WireClient(brokers[old].address, timeout_s=30) as client:
                assert cluster_metadata(client, all_topics=True).brokers
            net.heal()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and quorum.leader([old]) != (new, new_epoch):
                time.sleep(0.2)
            assert quorum.leader([old]) == (new, new_epoch)
            # clients are given the proxies (advertised.listeners), not the real ports
            with WireClient(brokers[new].address, timeout_s=30) as client:
                response = cluster_metadata(client, all_topics=True)
            advertised = {b.node_id: (b.host, b.port) for b in response.brokers}
            assert advertised == {n: ("127.0.0.1", p.port) for n, p in brokers.items()}
