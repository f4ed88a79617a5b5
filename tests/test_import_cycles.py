"""No import cycles in uprobe_lab, counting imports inside functions too.

A cycle held together by a function-level import still means two modules that cannot be read,
tested or changed apart; so every ``import`` statement counts, wherever it stands. Run it alone
to list the cycles: ``python tests/test_import_cycles.py``.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "uprobe_lab"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel.with_suffix(".py")).exists() or (PACKAGE.parent / rel / "__init__.py").exists()


def imports_of(path: Path) -> set[str]:
    """The lab modules one file imports: ``from X import a`` counts as X.a when that is a module."""
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if is_module(sub) else base)
    return {name for name in found if name.split(".")[0] == PACKAGE.name and name != this}


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_sees_a_cycle_and_a_function_level_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "uprobe_lab.uprobes" in graph["uprobe_lab.process"]  # a top-level import
    assert "uprobe_lab.x86.process" in graph["uprobe_lab.arches"]  # from .x86.process import X86Process


def function_level_imports(path: Path) -> list[int]:
    """Lines where a function imports one of the package's own modules."""
    lines = []
    for fn in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for node in ast.walk(fn):
                own = (isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE.name))
                       or isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE.name for a in node.names))
                if own:
                    lines.append(node.lineno)
    return sorted(set(lines))


def test_the_package_imports_its_own_modules_at_module_level():
    """A module's dependencies stand at its top, where a reader looks for them; cli.py alone imports each
    subcommand's modules when that subcommand runs (``python -m uprobe_lab analyze`` need not load the model)."""
    hidden = {str(p.relative_to(PACKAGE)): lines for p in sorted(PACKAGE.rglob("*.py")) if p.name != "cli.py"
              if (lines := function_level_imports(p))}
    assert hidden == {}, f"imports inside functions: {hidden}"


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


MAX_MODULE_LINES = 550  # docs/architecture.md states it


def private_imports(path: Path) -> list[str]:
    """The names ``from <lab module> import _name`` takes in one file: a helper another module needs is public."""
    return [alias.name for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE.name))
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_the_checker_sees_a_private_import(tmp_path):
    (tmp_path / "m.py").write_text("from .kernel import _hidden, public\nfrom . import _other as o\nimport _thread\n"
                                   "from uprobe_lab.bench import _x\nfrom pathlib import _ignored\n")
    assert private_imports(tmp_path / "m.py") == ["_hidden", "_other", "_x"]


def test_no_module_imports_another_modules_private_names():
    tests = PACKAGE.parent / "tests"
    found = [f"{p.relative_to(PACKAGE.parent)}: {name}" for p in sorted(PACKAGE.rglob("*.py")) + sorted(tests.rglob("*.py"))
             for name in private_imports(p)]
    assert found == []


def test_no_module_is_over_550_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


if __name__ == "__main__":
    found = cycles(import_graph())
    for component in found:
        print(" <-> ".join(component))
    sys.exit(1 if found else 0)
