"""No import cycle between the package's modules, and arrows between its layers point down only:
every import counts (module level, inside a function, under TYPE_CHECKING), read from the
source, so neither can hide in a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dagster_incremental"
# Each layer and the layers it may import (errors.py is everyone's; the package root is the top).
MAY_IMPORT = {
    "errors": set(),
    "cursor": {"errors"},
    "settings": {"errors", "cursor"},
    "spark": {"errors", "cursor", "settings"},
    "dagster": {"errors", "cursor", "settings", "spark"},
}


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports anywhere in its source."""
    modules = {_module_name(root, p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        # importing a module also runs its package's __init__, which never imports back
        graph[name] = {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each holds a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_a_cycle_through_a_function_level_or_type_checking_import_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\nx = 1\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg.b"] == {"pkg.c"} and graph["pkg.d"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    (pkg / "c.py").write_text("")
    assert cycles(import_graph(pkg)) == []


def layer(module: str) -> str:
    """dagster_incremental.spark.iceberg.local.merge -> "spark"; the root's own modules are "errors" or "root"."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("__init__", "__main__"):
        return "root"
    return parts[1]


def test_no_import_cycle_anywhere_in_the_package():
    assert cycles(import_graph()) == []


def test_layers_import_only_the_layers_below():
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items() if layer(module) != "root"
        for target in targets
        if layer(target) != layer(module) and layer(target) not in MAY_IMPORT[layer(module)]
    )
    assert upward == []


def test_an_upward_import_is_found(tmp_path):
    pkg = tmp_path / "dagster_incremental"
    (pkg / "cursor").mkdir(parents=True)
    (pkg / "dagster").mkdir()
    for path in ("__init__.py", "cursor/__init__.py", "dagster/__init__.py", "dagster/run.py"):
        (pkg / path).write_text("")
    (pkg / "cursor" / "spec.py").write_text("def f():\n    from dagster_incremental.dagster import run\n")
    graph = import_graph(pkg)
    assert "dagster_incremental.dagster.run" in graph["dagster_incremental.cursor.spec"]
    assert layer("dagster_incremental.dagster.run") not in MAY_IMPORT[layer("dagster_incremental.cursor.spec")]


def listed_modules(subpackage: str) -> list[str]:
    """The modules ARCHITECTURE.md lists for `subpackage` ("cursor", "settings"), in its order."""
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    listing = text.split(f"\n{subpackage}/\n", 1)[1].split("\n\n", 1)[0].split("\n```", 1)[0]
    return [line.split()[0].removesuffix(".py") for line in listing.splitlines() if line.startswith("  ") and
            not line.startswith("   ")]


@pytest.mark.parametrize("subpackage", ["cursor", "settings"])
def test_architecture_lists_each_module_after_the_modules_it_imports(subpackage):
    """ARCHITECTURE.md's module list of cursor/ and settings/ is the reading order: every module
    is there, and each imports only modules listed above it."""
    listed = listed_modules(subpackage)
    prefix = f"dagster_incremental.{subpackage}."
    graph = import_graph()
    present = sorted(m.removeprefix(prefix) for m in graph if m.startswith(prefix))
    assert sorted(listed) == present
    below = sorted(
        f"{name} -> {target.removeprefix(prefix)}"
        for index, name in enumerate(listed)
        for target in graph[prefix + name]
        if target.startswith(prefix) and listed.index(target.removeprefix(prefix)) > index
    )
    assert below == []
