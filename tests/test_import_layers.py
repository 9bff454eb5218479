"""Modules of one package import each other in one direction only, the top-level packages stand in layers (a lower one
never imports a higher one, so no circle runs between packages either), and production code never imports the test
peers.

Every import counts: at module level, inside functions and under ``if TYPE_CHECKING`` (a circle hidden in a
function or a type hint is still two modules that each need the other). Read from the source with ``ast``,
so nothing is imported here.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The top-level packages, lowest first: each may import only those before it (encoders and kvstore share no
# imports; bench and tests sit above them all).
LAYERS = ("kernels", "kvstore", "encoders", "app", "ui")
PACKAGES = LAYERS


def _modules(package: str) -> dict[str, Path]:
    modules = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported(module: str, path: Path) -> set[str]:
    """Every dotted name ``module`` imports: ``from a.b import c`` gives a.b and a.b.c (c may be a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (a name resolves to its longest module prefix)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in _imported(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path (first module repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(graph[module]):
            found = visit(target)
            if found:
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package):
    cycle = _cycle(_graph(package))
    assert cycle is None, " -> ".join(cycle or [])


def _packages_imported(package: str) -> set[str]:
    """The other top-level packages of LAYERS that any module of ``package`` imports."""
    return {name.split(".")[0] for module, path in _modules(package).items() for name in _imported(module, path)
            if name.split(".")[0] in LAYERS} - {package}


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_imports_only_the_layers_below_it(package):
    below = set(LAYERS[: LAYERS.index(package)])
    assert _packages_imported(package) <= below, f"{package} imports {sorted(_packages_imported(package) - below)}"


# app's floors, lowest first: a module of one imports only its own floor and those before it (app.cli and the test
# peers in app.testing stand above them all).
APP_FLOORS = ("platform", "text", "answering", "llm", "library", "live", "batch", "rooms")


def _floor(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "app" and parts[1] in APP_FLOORS else None


def test_app_floors_import_only_the_floors_below_them():
    upward = sorted(f"{module} -> {target}" for module, targets in _graph("app").items() if _floor(module)
                    for target in targets
                    if _floor(target) is None and target != "app" or _floor(target) and
                    APP_FLOORS.index(_floor(target)) > APP_FLOORS.index(_floor(module)))
    assert upward == []


def test_every_app_module_stands_on_a_floor():
    loose = sorted(m for m in _modules("app") if m != "app" and not m.startswith(("app.cli", "app.testing"))
                   and _floor(m) is None)
    assert loose == []


def test_the_layer_check_sees_an_import_upward(tmp_path, monkeypatch):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "op.py").write_text("def f():\n    from kvstore.formats import BY_NAME\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _packages_imported("kernels") == {"kvstore"}


def test_the_cycle_finder_finds_circles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_production_code_does_not_import_the_test_peers():
    graph = _graph("app")
    users = sorted(m for m, targets in graph.items()
                   if not m.startswith("app.testing") and any(t.startswith("app.testing") for t in targets))
    assert users == []
