"""``odradek cluster`` (``make cluster``): three combined nodes started, seen, stopped.

The command runs as a real process on free ports (``--port``/``--controller-port``)
with its data in the test's tmp dir (``--data-dir``), from the repository's own
``config/cluster`` files; the test reads its ready and node lines, asks every
broker for Metadata and a controller for the quorum's status, sends SIGINT as Ctrl-C
would, and checks that the command exits 0 and every node pid it printed is gone.
The formatting step is also tested in-process: a second run keeps the cluster id,
dirs of two clusters are refused.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.cli.cluster import DEFAULT_CONFIGS, format_nodes, load_nodes
from odradek.storage.errors import StorageError
from tests.support.wire import WireClient, cluster_metadata

REPO = Path(__file__).resolve().parent.parent.parent


def free_port_run(count: int) -> int:
    """A first port of ``count`` consecutive ports free right now."""
    for _ in range(200):
        base = random.randrange(20_000, 60_000 - count)
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no run of free ports")


def read_until(process: subprocess.Popen[bytes], pattern: str, timeout_s: float) -> list[str]:
    """Lines of stdout up to and including the first one matching ``pattern``."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while time.monotonic() < deadline:
        lines = buffer.decode(errors="replace").split("\n")
        for index, line in enumerate(lines[:-1]):
            if re.search(pattern, line):
                return lines[: index + 1]
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buffer += chunk
    raise AssertionError(f"no line matching {pattern!r}; output: {buffer.decode()!r}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose, but the command reaps its children itself.
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split(") ", 1)[1].startswith("Z"))


def test_cluster_starts_three_nodes_and_stops_them_all_on_ctrl_c(tmp_path: Path) -> None:
    port, controller_port = free_port_run(3), free_port_run(3)
    command = [
        sys.executable,
        "-m",
        "odradek",
        "cluster",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--controller-port",
        str(controller_port),
        "--data-dir",
        str(tmp_path / "cluster"),
    ]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pids: list[int] = []
    try:
        lines = read_until(process, r"^Ctrl-C stops", 120)
        ready = next(line for line in lines if line.startswith("odradek cluster ready "))
        bootstrap = ready.split()[3]
        assert bootstrap == ",".join(f"127.0.0.1:{port + i}" for i in range(3))
        pids = [int(m.group(1)) for line in lines if (m := re.search(r"pid (\d+)", line))]
        assert len(pids) == 3 and all(pid_alive(pid) for pid in pids)

        # Every broker answers Metadata, and they agree on the controller.
        controllers = set()
        for address in bootstrap.split(","):
            host, _, broker_port = address.rpartition(":")
            with WireClient(f"{host}:{broker_port}") as client:
                controllers.add(cluster_metadata(client).controller_id)
        assert len(controllers) == 1

        # The quorum has a leader, and it is that controller.
        status = subprocess.run(
            [
                sys.executable,
                "-m",
                "odradek",
                "metadata-quorum",
                "--bootstrap-controller",
                f"127.0.0.1:{controller_port}",
                "describe",
                "--status",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert status.returncode == 0, status.stderr
        leader = re.search(r"^LeaderId:\s+(\d+)$", status.stdout, re.M)
        assert leader is not None, status.stdout
        assert controllers == {int(leader.group(1))}

        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, (out, err)
        assert out.decode().count("stopped (exit status 0)") == 3
        assert not any(pid_alive(pid) for pid in pids)
        for log in (tmp_path / "cluster").glob("node*.log"):
            assert "Traceback" not in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()  # its nodes get SIGTERM from PR_SET_PDEATHSIG
            process.wait()
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def _args(tmp_path: Path, **extra: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "config": [REPO / path for path in DEFAULT_CONFIGS],
        "host": None,
        "port": None,
        "controller_port": None,
        "data_dir": tmp_path,
        "override": [],
    }
    values.update(extra)
    return argparse.Namespace(**values)


def test_formatting_once_keeps_the_cluster_id_and_refuses_two_clusters(tmp_path: Path) -> None:
    nodes = load_nodes(_args(tmp_path))
    assert [node.config.identity_dirs[0] for node in nodes] == [
        tmp_path / f"node{n}" for n in (1, 2, 3)
    ]
    cluster_id, formatted = format_nodes(nodes)
    assert formatted == 3
    assert format_nodes(load_nodes(_args(tmp_path))) == (cluster_id, 0)

    (tmp_path / "node3" / "meta.properties").unlink()
    other = load_nodes(_args(tmp_path / "other"))
    other_id, _ = format_nodes(other)
    assert other_id != cluster_id
    (tmp_path / "node3" / "meta.properties").write_bytes(
        (tmp_path / "other" / "node3" / "meta.properties").read_bytes()
    )
    with pytest.raises(StorageError, match="different clusters"):
        format_nodes(load_nodes(_args(tmp_path)))


def test_ports_move_every_listener_and_the_voters(tmp_path: Path) -> None:
    nodes = load_nodes(_args(tmp_path, host="127.0.0.1", port=40000, controller_port=41000))
    for index, node in enumerate(nodes):
        assert f"listeners=PLAINTEXT://127.0.0.1:{40000 + index}," in " ".join(node.overrides)
        assert (
            "controller.quorum.voters=1@127.0.0.1:41000,2@127.0.0.1:41001,3@127.0.0.1:41002"
            in node.overrides
        )


def test_bad_usage_is_one_line_and_status_2(tmp_path: Path) -> None:
    for extra in (["--port", "30000"], ["--config", str(tmp_path / "missing.properties")]):
        result = subprocess.run(
            [sys.executable, "-m", "odradek", "cluster", "--data-dir", str(tmp_path), *extra],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, result
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("odradek cluster: ")
        assert "Traceback" not in result.stderr
    same = [str(REPO / DEFAULT_CONFIGS[0])] * 2
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "cluster", "--config", same[0], "--config", same[1]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "share a node.id" in result.stderr
