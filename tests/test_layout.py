"""The layout: subsystems are folders, in both languages, and each folder uses only
itself and the folders below it (no import or include cycles).

Read from the source (Python's import statements, at any depth in a module, and
C++'s ``#include "..."`` lines), so a new file is held to it without a list here.
"""
from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Python subsystems, lowest first: a module may import its own folder and the
#: folders before it. The top-level modules (the public API, cli) may import any.
PY_LAYERS = ("common", "runtime", "parity", "symbolic", "tracing", "convert", "elementwise", "stock", "cache", "store", "core")
#: C++ subsystems, lowest first; module.cpp (the bindings) may include any.
CPP_LAYERS = ("common", "runtime", "stock", "symbolic", "tracing", "cache", "elementwise", "convert", "dispatch")


def _py_modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in (ROOT / "fastfake").rglob("*.py"):
        rel = p.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _py_imports(name: str, path: pathlib.Path, modules: dict) -> set[str]:
    """fastfake modules ``name`` imports (``from pkg import mod`` resolves to the module)."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                found.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod)
    return {m for m in found if m in modules and m != name and m.startswith("fastfake")}


def _folder(module: str) -> str | None:
    """The subsystem folder a fastfake module lives in (None: the top level)."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and (ROOT / "fastfake" / parts[1]).is_dir() else None


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def _py_graph() -> dict[str, set[str]]:
    modules = _py_modules()
    # a package's own __init__ is not a dependency of its modules
    return {n: {m for m in _py_imports(n, p, modules) if not n.startswith(m + ".")} for n, p in modules.items()}


def _cpp_graph() -> dict[str, set[str]]:
    csrc = ROOT / "csrc"
    graph = {}
    for p in csrc.rglob("*"):
        if p.suffix in (".h", ".cpp"):
            rel = str(p.relative_to(csrc))
            graph[rel] = set(re.findall(r'^#include "([^"]+)"', p.read_text(), re.M))
    return graph


def test_python_subsystems_are_folders_in_layers():
    graph = _py_graph()
    folders = {_folder(n) for n in graph} - {None}
    assert folders == set(PY_LAYERS), folders
    top = {n for n in graph if _folder(n) is None}
    # the top level is the public API and the command line, thin
    assert {n.split(".")[-1] for n in top} <= {"fastfake", "__main__", "cli", "testing", "testing_no_stock_crosscheck",
                                               "_version"}, top
    bad = []
    for n, deps in graph.items():
        f = _folder(n)
        if f is None:
            continue
        for m in deps:
            g = _folder(m)
            if g is None:
                if m not in ("fastfake._version",) and m != "fastfake":
                    bad.append(f"{n} -> {m} (the top level)")
            elif PY_LAYERS.index(g) > PY_LAYERS.index(f):
                bad.append(f"{n} -> {m} ({f} is below {g})")
    assert not bad, "\n".join(bad)


def test_python_has_no_import_cycles():
    assert _cycle(_py_graph()) is None, _cycle(_py_graph())


def test_cpp_subsystems_are_folders_in_layers():
    graph = _cpp_graph()
    folders = {n.split("/")[0] for n in graph if "/" in n}
    assert folders == set(CPP_LAYERS), folders
    assert {n for n in graph if "/" not in n} == {"module.cpp"}
    bad = []
    for n, incs in graph.items():
        if n == "module.cpp":
            continue
        f = n.split("/")[0]
        for inc in incs:
            assert inc in graph, f"{n} includes {inc}, which is not under csrc/ by that path"
            g = inc.split("/")[0]
            if CPP_LAYERS.index(g) > CPP_LAYERS.index(f):
                bad.append(f"{n} -> {inc} ({f} is below {g})")
    assert not bad, "\n".join(bad)


def test_cpp_declares_no_other_subsystem_s_internals():
    """A subsystem's internals (``namespace <folder>_detail``) are declared only in
    its own folder: another folder reaches them through the subsystem's header, where
    the include check above sees the dependency (a hand-written declaration would
    hide it)."""
    csrc = ROOT / "csrc"
    bad = []
    for p in csrc.rglob("*"):
        if p.suffix not in (".h", ".cpp") or p.name == "module.cpp":
            continue
        folder = p.relative_to(csrc).parts[0]
        for ns in re.findall(r"^namespace (\w+)_detail \{", p.read_text(), re.M):
            if ns != folder:
                bad.append(f"{p.relative_to(csrc)}: namespace {ns}_detail")
    assert not bad, "\n".join(bad)


def test_cpp_has_no_include_cycles():
    graph = _cpp_graph()
    assert _cycle(graph) is None, _cycle(graph)


def test_the_checks_can_fail():
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    modules = {"fastfake.core.x": None, "fastfake.common.y": None}
    tree = ast.parse("from fastfake.core import x")
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree))
    assert _folder("fastfake.core.x") == "core" and _folder("fastfake.cli") is None
    del modules
