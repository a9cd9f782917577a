"""The package's shape: no import cycles, a why-docstring on every module, files one can read.

Imports are read from the source with `ast`: module-level and function-level `import` and
`from ... import`, and `importlib.import_module("literal")`. Importing `a.b.c` also runs `a` and
`a.b`'s __init__, so a module depends on its parent packages too. A cycle in that graph is a
module that imports one that imports it back.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "attnbench"
MAX_LINES = 320  # STYLE.md: aim for <= 300; a file past this holds two things


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(node.args[0].value)
    return names


def dependencies(name: str) -> set[str]:
    deps = {n for n in imported_names(ast.parse(MODULES[name].read_text())) if n in MODULES}
    parts = name.split(".")
    deps.update(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
    deps.discard(name)
    return deps


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    graph = {name: dependencies(name) for name in MODULES}
    assert cycles(graph) == []


def test_function_level_and_importlib_imports_are_counted():
    tree = ast.parse("import importlib\ndef f():\n    from attnbench.cli import main\n"
                     "    importlib.import_module('attnbench.kernels.sweep')\n")
    assert {"attnbench.cli.main", "attnbench.kernels.sweep"} <= imported_names(tree)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_says_why_it_exists_and_stays_readable(name):
    text = MODULES[name].read_text()
    assert ast.get_docstring(ast.parse(text)), f"{name} has no module docstring"
    assert len(text.splitlines()) <= MAX_LINES, f"{name} has {len(text.splitlines())} lines"


def test_class_names_do_not_collide_across_the_package():
    names = Counter(node.name for path in MODULES.values() for node in ast.parse(path.read_text()).body
                    if isinstance(node, ast.ClassDef))
    assert [n for n, count in names.items() if count > 1] == []


def test_each_job_has_its_room():
    """Where a newcomer looks for "add a backend", "add a batch kind", "add an output format",
    "run points elsewhere": these modules exist and hold what their names say."""
    rooms = {
        "attnbench.kernels.backends.registry": "REGISTRY",
        "attnbench.kernels.backends.base": "class Backend",
        "attnbench.kernels.workload": "KIND_RULES",
        "attnbench.kernels.sweep": "def run_sweep",
        "attnbench.kernels.plan": "def plan_sweep",
        "attnbench.results.export": "FORMATS",
        "attnbench.cli.common": "def user_errors",
    }
    for module, marker in rooms.items():
        assert marker in MODULES[module].read_text(), (module, marker)
