"""No two modules of JoyAgents import each other, directly or through others.

The graph is built statically (``ast``) over every module of ``joy_env``, ``joy_agents`` and ``joy_trainers``.
An edge is every import statement that runs: at module level and inside functions and methods (a deferred
import still ties the two modules together). Imports under ``if TYPE_CHECKING:`` are for annotations only
and never run, so they are not edges. ``from P import X`` is an edge to the module ``P.X`` when there is one,
else to ``P``; importing a module does not count as importing its parent packages.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("joy_env", "joy_agents", "joy_trainers")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if _is_type_checking(child):
            yield from (n for c in child.orelse for n in _import_nodes_of(c))
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _import_nodes(node)


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package[: len(package) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        for alias in node.names:
            sub = f"{module}.{alias.name}"
            found.add(sub if sub in modules else module)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    """``{module: the project modules it imports}`` (see the module documentation for what counts)."""
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as ``[a, b, ..., a]``, or None when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_cycle_finder_names_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_deferred_imports_and_skips_annotation_only_ones():
    graph = import_graph()
    assert "joy_env.env" in graph["joy_env.registry"]  # make() builds a JoyEnv
    assert "joy_env.domains.tau2.spec" in graph["joy_env.builtin"]  # imported inside a function
    assert "joy_trainers.rl.state" not in graph["joy_trainers.rl.groups"]  # under `if TYPE_CHECKING:`


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, (
        f"import cycle: {' -> '.join(cycle)}; move what both modules need into a module of its own (as "
        "joy_env.spec holds EnvSpec and World for joy_env.registry and joy_env.env)"
    )
