"""The package's shape: layers that import only downward, no import cycles, a why-docstring on
every module, files and functions one can read.

Imports are read from the source with `ast`: module-level and function-level `import` and
`from ... import`, and `importlib.import_module("literal")`. Importing `a.b.c` also runs `a` and
`a.b`'s __init__, so a module depends on its parent packages too. A cycle in that graph is a
module that imports one that imports it back. By folder, every import goes to the same or a
lower layer of LAYERS.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "attnbench"
MAX_LINES = 320  # STYLE.md: aim for <= 300; a file past this holds two things
MAX_FUNCTION_LINES = 60  # STYLE.md: a function past this holds two things

# The layers, top to bottom (docs/architecture.md explains them). A module of a layer imports
# modules of its own layer or of lower ones, never of a higher one. A layer is a folder of
# attnbench/ (kernels/backends is part of kernels) or a top-level module; the bottom ones share a floor.
LAYERS = [
    ["__main__"],
    ["cli"],
    ["runs"],
    ["console"],
    ["workers"],
    ["results"],
    ["e2e"],
    ["traces"],
    ["kernels"],
    ["profiler", "device", "interrupts"],
    ["errors"],
]


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


def room(name: str) -> str:
    """The folder (or top-level module) of attnbench a module sits in; "" for the package itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """"a -> b" for each import of a module by one of a higher layer (the package's own
    __init__, which runs first for every module, is no layer)."""
    floor = {r: i for i, names in enumerate(layers) for r in names}
    found = []
    for name, deps in graph.items():
        for dep in sorted(deps):
            if room(dep) and floor[room(dep)] < floor[room(name)]:
                found.append(f"{name} -> {dep}")
    return found


def long_functions(tree: ast.AST, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of each function or method longer than `limit` lines, from `def` to its last line."""
    functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [(node.name, node.end_lineno - node.lineno + 1) for node in functions
            if node.end_lineno - node.lineno + 1 > limit]


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


def test_every_folder_is_a_layer():
    layered = {r for names in LAYERS for r in names}
    assert {room(name) for name in MODULES} - {""} <= layered


def test_no_import_runs_back_up_the_layers():
    graph = {name: dependencies(name) for name in MODULES}
    assert upward_imports(graph, LAYERS) == []


def test_the_layer_check_finds_an_upward_import():
    graph = {"attnbench.kernels.sweep": {"attnbench.results.files", "attnbench.errors"},
             "attnbench.results.files": {"attnbench.kernels.workload"}, "attnbench.kernels.workload": set(),
             "attnbench.errors": set()}
    layers = [["results"], ["kernels"], ["errors"]]
    assert upward_imports(graph, layers) == ["attnbench.kernels.sweep -> attnbench.results.files"]


def test_no_function_is_longer_than_a_screen():
    found = [f"{name}: {fn} ({n} lines)" for name, path in MODULES.items()
             for fn, n in long_functions(ast.parse(path.read_text()))]
    assert found == []


def test_the_length_check_counts_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    assert long_functions(ast.parse(f"def f():\n{body}\n")) == [("f", 62)]
    assert long_functions(ast.parse("def g():\n    return 1\n")) == []


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
        "attnbench.runs.rundir": "class RunDir",
        "attnbench.runs.kernel": "def run_kernel",
        "attnbench.runs.e2e": "def run_e2e",
        "attnbench.runs.scenario": "def run_kernel_scenario",
        "attnbench.runs.merge": "def run_merge",
    }
    for module, marker in rooms.items():
        assert marker in MODULES[module].read_text(), (module, marker)
