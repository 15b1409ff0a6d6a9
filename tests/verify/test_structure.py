"""The checker's layout stays readable: no module of autotune/verify/ over 500 lines, and no import circle among
them (imports inside functions included: a lazy import is still a dependency a reader must follow)."""

import ast
from pathlib import Path

import autotune.verify

ROOT = Path(autotune.verify.__file__).parent
PACKAGE = "autotune.verify"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((PACKAGE, *parts[:-1])) if parts[-1] == "__init__" else ".".join((PACKAGE, *parts))


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The autotune.verify modules `name` imports (`from X import Y` counts Y when Y is a module of ours)."""
    path, found = MODULES[name], set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    # a submodule's import of its own package's __init__ is how Python loads it, not a dependency on its contents
    return {m for m in found if m in MODULES and m != name and not name.startswith(m + ".")}


def test_no_module_over_500_lines():
    long = {n: len(p.read_text().splitlines()) for n, p in MODULES.items()}
    assert {n: k for n, k in long.items() if k > 500} == {}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph (its modules in order, the first repeated at the end), or None."""
    state: dict[str, str] = {}

    def visit(n: str, path: list[str]) -> list[str] | None:
        state[n] = "open"
        for m in sorted(graph[n]):
            if state.get(m) == "open":
                return [*path[path.index(m):], m]
            if m not in state and (circle := visit(m, [*path, m])):
                return circle
        state[n] = "done"
        return None

    return next((c for n in sorted(graph) if n not in state and (c := visit(n, [n]))), None)


def test_no_import_circle():
    graph = {n: imports_of(n) for n in MODULES}
    assert sum(map(len, graph.values())) > len(graph)  # the walk sees the real imports
    assert find_circle(graph) is None


def test_a_circle_is_found():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None
