"""The layers of docs/architecture.md, held: a module imports only its own layer and the layers above it
(the package's `onnxaff/__init__.py` is the public API and may import any layer, lazily)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _table() -> list[tuple[str, list[str], list[str]]]:
    """(layer, module paths, modules it never imports) from docs/architecture.md's layer table, top to bottom."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = page.index("| layer | modules | holds | never touches |")
    rows = []
    for line in page[start:].splitlines()[2:]:
        if not line.startswith("| "):
            break
        name, modules, _, never = (c.strip() for c in line.strip("|").split(" | "))
        paths = [m if m.startswith("onnxaff/") else f"onnxaff/{m}" for m in re.findall(r"`([^`]+)`", modules)]
        rows.append((name, paths, re.findall(r"`([\w.]+)`", never)))
    return rows


TABLE = _table()
LAYERS = [(name, paths) for name, paths, _ in TABLE]  # top to bottom, as in docs/architecture.md


def layer_of(path: str) -> int | None:
    for k, (_, prefixes) in enumerate(LAYERS):
        if any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes):
            return k
    return None


def module_file(module: str) -> str | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.exists():
            return candidate.relative_to(ROOT).as_posix()
    return None


def test_every_module_has_a_layer_and_imports_only_upwards():
    wrong = []
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "onnxaff/__init__.py":
            continue
        mine = layer_of(rel)
        assert mine is not None, f"{rel} belongs to no layer: add it to docs/architecture.md and LAYERS"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("onnxaff"):
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names if a.name.startswith("onnxaff")]
            else:
                continue
            for module in modules:
                target = module_file(module)
                theirs = layer_of(target) if target and target != "onnxaff/__init__.py" else None
                if theirs is not None and theirs > mine:
                    wrong.append(f"{rel}:{node.lineno} ({LAYERS[mine][0]}) imports {module} ({LAYERS[theirs][0]})")
    assert not wrong, "\n".join(wrong)


def test_the_layer_table_names_real_modules():
    assert [name for name, _ in LAYERS][:2] == ["foundations", "metric API"] and LAYERS[-1][0] == "command line"
    missing = [p for _, paths in LAYERS for p in paths if not (ROOT / p).exists()]
    assert not missing, missing


def _imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)


def test_no_layer_imports_what_it_never_touches():
    """The "never touches" column of docs/architecture.md, held: each backticked module there is one the layer's
    modules never import (e.g. the collection never imports onnx or onnxaff.graph, the metric API no onnxruntime)."""
    wrong = []
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        mine = layer_of(rel)
        if mine is None:
            continue
        never = TABLE[mine][2]
        wrong += [f"{rel}:{line} ({TABLE[mine][0]}) imports {module}"
                  for line, module in _imports(ast.parse(path.read_text(encoding="utf-8")))
                  if any(module == n or module.startswith(n + ".") for n in never)]
    assert not wrong, "\n".join(wrong)


def test_classes_and_modules_stay_small():
    """No class in onnxaff/ over 150 lines, no module over 400: one job each, readable alone."""
    big = []
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT).as_posix()
        if text.count("\n") > 400:
            big.append(f"{rel}: {text.count(chr(10))} lines")
        big += [f"{rel}: class {n.name} {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.ClassDef) and n.end_lineno - n.lineno + 1 > 150]
    assert not big, big


def test_no_getattr_on_a_data_source():
    """DataSource declares every member the run reads (skipped, warnings, example_shapes): no probing."""
    probe = re.compile(r"\b(?:getattr|hasattr)\([^)]*source")
    found = [f"{p.relative_to(ROOT)}:{k}" for p in sorted((ROOT / "onnxaff").rglob("*.py"))
             for k, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if probe.search(line)]
    assert not found, found


def _cli_flags() -> set[str]:
    """Every long option of the `onnxaff` commands, read off click."""
    import click

    from onnxaff.cli import cli

    return {o for command in cli.commands.values() for p in command.params if isinstance(p, click.Option)
            for o in p.opts if o.startswith("--")}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def test_only_the_command_line_names_flags():
    """Below onnxaff/cli/ a message names an option with errors.option(field): a Python caller is told the
    configuration field, the CLI renders its flag. Docstrings and comments may name flags."""
    flag = re.compile(r"(?<![\w-])(?:" + "|".join(map(re.escape, sorted(_cli_flags(), key=len, reverse=True)))
                      + r")(?![\w-])")
    found = []
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("onnxaff/cli/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        found += [f"{rel}:{node.lineno}: {m.group(0)}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                  for m in [flag.search(node.value)] if m]
    assert not found, "\n".join(found)


def _import_graph():
    """Module → the onnxaff modules it imports anywhere (at the top, inside functions, for type checking)."""
    import networkx as nx

    files = {}
    for path in (ROOT / "onnxaff").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def module(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = nx.DiGraph()
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("onnxaff"):
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("onnxaff")]
            else:
                continue
            for t in {module(t) for t in targets} - {None, name}:
                if not name.startswith(t + "."):  # a package's own __init__ is no edge back
                    graph.add_edge(name, t)
    return graph


def test_no_import_circles():
    """No two modules of onnxaff/ import each other, directly or around a ring, not even inside a function or for
    type checking: each module can be read knowing only the ones below it."""
    import networkx as nx

    rings = sorted(sorted(c) for c in nx.strongly_connected_components(_import_graph()) if len(c) > 1)
    assert not rings, "\n".join(" ↔ ".join(r) for r in rings)
