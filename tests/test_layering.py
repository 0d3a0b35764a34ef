"""Import layering: each layer imports only what ARCHITECTURE.md puts below it.

Every module's imports are read with ``ast`` — module level, ``TYPE_CHECKING`` blocks
and imports inside functions alike, since each is a dependency the design has to
carry. A rule names the packages that may not import a target; ``EXCEPTIONS`` lists
today's known offenders, each with the review step that removes it
(design/cluster-readiness-review.md), so the list can only shrink: a new offender
fails, and so does an exception that is no longer needed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
PACKAGE: Final = ROOT / "odradek"

# (importing packages, forbidden targets); a target covers its submodules.
RULES: Final = [
    (("odradek.server.handlers", "odradek.coordinator"), ("odradek.server.broker",)),
    (("odradek.coordinator",), ("odradek.replica", "odradek.metadata.controller")),
    (
        (
            "odradek.client",
            "odradek.spark",
            "odradek.protocol",
            "odradek.network",
            "odradek.records",
        ),
        ("odradek.storage", "odradek.server"),
    ),
    # Handlers are thin: fetch and offset semantics belong to the replica layer.
    (("odradek.server.handlers",), ("odradek.storage",)),
    # odradek.aio is an entry point over the client: nothing inside odradek imports it
    # (the broker once took an asyncio helper from there; it is odradek.tasks now).
    (
        (
            "odradek.client",
            "odradek.server",
            "odradek.coordinator",
            "odradek.replica",
            "odradek.storage",
            "odradek.metadata",
            "odradek.raft",
            "odradek.network",
            "odradek.protocol",
            "odradek.spark",
            "odradek.cli",
            "odradek.console",
            "odradek.records",
            "odradek.testing",
        ),
        ("odradek.aio",),
    ),
    # The client's shared core sits under its producer, consumer and admin packages.
    (
        ("odradek.client._core",),
        ("odradek.client.producer", "odradek.client.consumer", "odradek.client.admin"),
    ),
    # odradek.testing runs brokers for tests; no part of odradek runs on it.
    (
        (
            "odradek.aio",
            "odradek.cli",
            "odradek.client",
            "odradek.coordinator",
            "odradek.metadata",
            "odradek.network",
            "odradek.protocol",
            "odradek.raft",
            "odradek.records",
            "odradek.replica",
            "odradek.server",
            "odradek.spark",
            "odradek.storage",
        ),
        ("odradek.testing",),
    ),
]

# (importing module, imported module): known offenders, to be removed by the step named.
EXCEPTIONS: Final = {
    # Step 3: DescribeLogDirs reads Log sizes through services.log_dirs.
    ("odradek.server.handlers.cluster_admin", "odradek.storage.log"),
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path, root: Path = ROOT) -> Iterator[str]:
    """Every module ``path`` imports, relative imports resolved; ``from a import b``
    is ``a``, and ``a.b`` too when ``b`` is a submodule."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            for alias in node.names:
                if is_module(f"{base}.{alias.name}", root):
                    yield f"{base}.{alias.name}"


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield module_name(path), path


def violations() -> set[tuple[str, str]]:
    found = set()
    for name, path in modules():
        imported = set(imports(path))
        for importers, targets in RULES:
            if not any(within(name, p) for p in importers):
                continue
            for target in imported:
                if any(within(target, t) for t in targets):
                    found.add((name, target))
        if within(name, "odradek.records"):  # shared codecs: nothing of odradek but itself
            found |= {
                (name, t)
                for t in imported
                if within(t, "odradek") and not within(t, "odradek.records") and t != "odradek"
            }
    return found


def test_no_layer_imports_what_lies_above_it() -> None:
    unexpected = sorted(violations() - EXCEPTIONS)
    assert not unexpected, "imports against the layering (module, imported):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in unexpected
    )


def test_every_exception_is_still_needed() -> None:
    stale = sorted(EXCEPTIONS - violations())
    assert not stale, f"remove these from EXCEPTIONS, they are fixed: {stale}"


def test_the_rules_see_type_checking_and_function_imports(tmp_path: Path) -> None:
    """The reader finds an import under TYPE_CHECKING, one inside a function and a
    relative one, on a file laid out like the package."""
    (tmp_path / "odradek" / "replica").mkdir(parents=True)
    (tmp_path / "odradek" / "replica" / "replica_manager.py").write_text("")
    probe = tmp_path / "odradek" / "coordinator" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from odradek.server.broker import Broker\n"
        "def f():\n    from ..replica import replica_manager\n"
    )
    found = set(imports(probe, tmp_path))
    assert "odradek.server.broker" in found
    assert "odradek.replica.replica_manager" in found
