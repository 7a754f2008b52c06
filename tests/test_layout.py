"""The layout by role (docs/architecture.md): no import circle between modules, and every import
points down the layers — the command line on top, then campaign / model / serve-side packages,
the loop, the evaluation, results and providers, and gates below all of them; inside gates the
runner (the untrusted side) imports nothing of the judge or the gates. Imports inside functions
and under TYPE_CHECKING count too: they are still arrows."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Higher numbers sit above lower ones; a module may import its own package's modules and any
# package of a lower layer, never one of its own layer or above.
AGENTLOOP_LAYERS = {
    "agentloop.providers": 0,
    "agentloop.results": 0,
    "agentloop.evaluation": 1,
    "agentloop.loop": 2,
    "agentloop.campaign": 3,
    "agentloop.model": 3,
    "agentloop.frameworks": 3,  # other agent frameworks on the gates (OpenEvolve), the LLM endpoint
    "agentloop.export": 4,
    "agentloop.commands": 8,  # commands the command line registers
    "agentloop.cli": 9,
    "agentloop.interfaces": 10,  # generates docs/reference/, the command line's page included
    "agentloop.__main__": 10,
    "agentloop": 10,
}
GATES_LAYERS = {
    "gates.runner": 0,  # beside the candidate: imports nothing of the rest
    "gates.yaml_file": 1,  # shared value types and files both sides of the judge read
    "gates.verdict": 1,
    "gates.contract": 2,
    "gates.judge": 3,  # the judge's side of the boundary
    "gates": 4,  # the gates: contract-guided plan, static/, dynamic, correctness, anti-cheat, audit
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for top in ("agentloop", "gates"):
        for path in sorted((ROOT / top).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports (a package import counts as its __init__)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, name, known) for name, path in known.items()}


def layer_of(name: str, layers: dict[str, int]) -> tuple[str, int]:
    best = max((p for p in layers if name == p or name.startswith(p + ".")), key=len)
    return best, layers[best]


def test_no_import_circle():
    g = graph()
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
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
                circles.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert circles == []


def test_imports_point_down():
    wrong = []
    for name, targets in graph().items():
        for target in targets:
            if name.startswith("gates") and target.startswith("agentloop"):
                wrong.append(f"{name} -> {target} (gates never imports agentloop)")
                continue
            layers = AGENTLOOP_LAYERS if name.startswith("agentloop") else GATES_LAYERS
            if target.split(".")[0] != name.split(".")[0]:
                continue  # agentloop -> gates: always down
            own, mine = layer_of(name, layers)
            theirs_pkg, theirs = layer_of(target, layers)
            if own == theirs_pkg:
                continue
            if theirs >= mine and not (own == "agentloop" and target == "agentloop"):
                wrong.append(f"{name} -> {target} ({own} is layer {mine}, {theirs_pkg} layer {theirs})")
    assert wrong == []


def test_the_runner_imports_nothing_of_the_judge_side():
    for name, targets in graph().items():
        if name.startswith("gates.runner"):
            assert all(t.startswith("gates.runner") for t in targets), (name, targets)


def test_every_package_says_what_lives_there():
    for top in ("agentloop", "gates"):
        for init in (ROOT / top).rglob("__init__.py"):
            doc = ast.get_docstring(ast.parse(init.read_text()))
            readme = init.parent / "README.md"
            assert doc or readme.is_file(), f"{init.parent.relative_to(ROOT)}: no docstring or README"


def test_the_checker_sees_a_circle_and_an_upward_import(tmp_path):
    """The two rules above fail where they should: a fake tree with a circle and an upward import."""
    fake = tmp_path / "agentloop"
    (fake / "loop").mkdir(parents=True)
    (fake / "results").mkdir()
    (fake / "__init__.py").write_text('"""x"""\n')
    (fake / "loop" / "__init__.py").write_text('"""x"""\n')
    (fake / "results" / "__init__.py").write_text('"""x"""\n')
    (fake / "loop" / "a.py").write_text("from agentloop.loop import b\n")
    (fake / "loop" / "b.py").write_text("def f():\n    from agentloop.loop.a import x\n")
    (fake / "results" / "store.py").write_text("from typing import TYPE_CHECKING\n"
                                               "if TYPE_CHECKING:\n    from agentloop.loop.a import y\n")
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "__init__.py").write_text('"""x"""\n')
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        g = graph()
        assert "agentloop.loop.b" in g["agentloop.loop.a"] and "agentloop.loop.a" in g["agentloop.loop.b"]
        try:
            test_no_import_circle()
        except AssertionError:
            pass
        else:
            raise AssertionError("the circle a <-> b was not found")
        try:
            test_imports_point_down()
        except AssertionError as exc:
            assert "agentloop.results.store -> agentloop.loop.a" in str(exc)
        else:
            raise AssertionError("the upward import results -> loop was not found")
    finally:
        ROOT = saved
