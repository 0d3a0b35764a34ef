"""``odradek storage random-uuid | format | info``, as Kafka's kafka-storage.sh.

Run through ``main([...])`` (exit status, stdout, one-line errors on stderr) and once
as a real process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from odradek.cli.main import main
from odradek.storage.meta_properties import parse_uuid, random_uuid, read_meta_properties

REPO = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, *extra: str, node_id: int = 1) -> Path:
    """A one-node KRaft config with two log dirs, the metadata log in the second."""
    config = tmp_path / "server.properties"
    config.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={node_id}",
                f"controller.quorum.voters={node_id}@localhost:19093",
                "listeners=PLAINTEXT://:9092,CONTROLLER://:19093",
                "controller.listener.names=CONTROLLER",
                f"log.dirs={tmp_path / 'a'},{tmp_path / 'b'}",
                f"metadata.log.dir={tmp_path / 'b'}",
                *extra,
            ]
        )
        + "\n"
    )
    return config


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    status = main(["storage", *argv])
    out, err = capsys.readouterr()
    return status, out, [line for line in err.splitlines() if line.strip()]


def test_random_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "random-uuid")
    assert (status, err) == (0, [])
    text = out.strip()
    assert len(text) == 22 and len(parse_uuid(text)) == 16


def test_format_then_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    cluster = random_uuid()
    status, out, err = run(capsys, "format", "-t", cluster, "-c", str(config))
    assert (status, err) == (0, [])
    assert out.splitlines() == [
        f"Formatting data directory {tmp_path / 'a'} (cluster.id={cluster}, node.id=1)",
        f"Formatting metadata directory {tmp_path / 'b'} (cluster.id={cluster}, node.id=1)",
    ]
    a, b = read_meta_properties(tmp_path / "a"), read_meta_properties(tmp_path / "b")
    assert {key: a[key] for key in ("version", "cluster.id", "node.id")} == {
        "version": "1",
        "cluster.id": cluster,
        "node.id": "1",
    }
    assert a["directory.id"] != b["directory.id"]

    status, out, err = run(capsys, "info", "-c", str(config))
    assert (status, err) == (0, [])
    assert out.splitlines()[:3] == [
        "Found log directories:",
        f"  {tmp_path / 'a'}",
        f"  {tmp_path / 'b'}",
    ]
    assert (
        f"Found meta.properties in {tmp_path / 'a'}: {{cluster.id={cluster}, "
        f"directory.id={a['directory.id']}, node.id=1, version=1}}"
    ) in out


def test_format_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    cluster = random_uuid()
    assert run(capsys, "format", "-t", cluster, "-c", str(config))[0] == 0
    before = read_meta_properties(tmp_path / "a")
    status, out, err = run(capsys, "format", "-t", cluster, "-c", str(config))
    assert status == 1 and out == ""
    assert err == [
        f"odradek storage: Log directory {tmp_path / 'a'} is already formatted. Use "
        "--ignore-formatted to ignore this directory and format the others."
    ]
    status, out, err = run(capsys, "format", "-t", cluster, "-c", str(config), "-g")
    assert (status, err) == (0, [])
    assert out.splitlines()[-1] == "All of the log directories are already formatted."
    # A new dir is formatted, the others are left as they are.
    config = write_config(tmp_path, f"log.dirs={tmp_path / 'a'},{tmp_path / 'b'},{tmp_path / 'c'}")
    status, out, err = run(capsys, "format", "-t", cluster, "-c", str(config), "--ignore-formatted")
    assert (status, err) == (0, [])
    assert f"Formatting data directory {tmp_path / 'c'}" in out
    assert read_meta_properties(tmp_path / "a") == before
    # Another cluster or another node: refused even with --ignore-formatted.
    other = random_uuid()
    status, _, err = run(capsys, "format", "-t", other, "-c", str(config), "-g")
    assert status == 1 and len(err) == 1 and "another cluster's data" in err[0]
    status, _, err = run(
        capsys,
        "format",
        "-t",
        cluster,
        "-c",
        str(config),
        "-g",
        "--override",
        "node.id=2",
        "--override",
        "controller.quorum.voters=2@localhost:19093",
    )
    assert status == 1 and len(err) == 1 and "says node.id=1" in err[0]
    assert read_meta_properties(tmp_path / "a") == before


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["format", "-t", "not-a-uuid", "-c", "{config}"], "invalid cluster id: 'not-a-uuid'"),
        (["format", "-t", "{cluster}", "-c", "{tmp}/missing.properties"], "cannot read"),
        (
            ["format", "-t", "{cluster}", "-c", "{config}", "--override", "node.id=7"],
            "controller.quorum.voters",
        ),
        (["info", "-c", "{config}", "--override", "process.roles=leader"], "process.roles"),
    ],
)
def test_bad_input_is_one_line_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    config = write_config(tmp_path)
    values = {"config": str(config), "cluster": random_uuid(), "tmp": str(tmp_path)}
    status, out, err = run(capsys, *(arg.format(**values) for arg in args))
    assert status == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("odradek storage: ") and needle in err[0], err
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    "args", [[], ["format", "-c", "x"], ["format", "-t", "x"], ["info"], ["shred"]]
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    status, out, err = run(capsys, *args)
    assert status == 2 and out == ""
    assert "error:" in err[-1]


def test_info_reports_problems_with_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    (tmp_path / "a").mkdir()
    status, out, err = run(capsys, "info", "-c", str(config))
    assert (status, err) == (1, [])
    assert out.splitlines()[-3:] == [
        "Found problems:",
        f"  {tmp_path / 'a'} is not formatted.",
        f"  {tmp_path / 'b'} does not exist.",
    ]


def test_format_as_a_process(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    uuid = subprocess.run(
        [sys.executable, "-m", "odradek", "storage", "random-uuid"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    ).stdout.strip()
    result = subprocess.run(
        [sys.executable, "-m", "odradek", "storage", "format", "-t", uuid, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert read_meta_properties(tmp_path / "b")["cluster.id"] == uuid
    again = subprocess.run(
        [sys.executable, "-m", "odradek", "storage", "format", "-t", uuid, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert again.returncode == 1
    assert "Traceback" not in again.stderr
    assert [line for line in again.stderr.splitlines() if line.strip()] == [
        f"odradek storage: Log directory {tmp_path / 'a'} is already formatted. Use "
        "--ignore-formatted to ignore this directory and format the others."
    ]
