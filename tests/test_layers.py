"""The layers of docs/architecture.md, held: a module imports only its own layer and the layers above it
(the package's `onnxaff/__init__.py` is the public API and may import any layer, lazily)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [  # top to bottom, as in docs/architecture.md
    ("foundations", ["onnxaff/errors.py", "onnxaff/text.py", "onnxaff/files.py", "onnxaff/progress.py",
                     "onnxaff/terminal.py", "onnxaff/memory.py", "onnxaff/stopping.py", "onnxaff/statefields.py"]),
    ("metric API", ["onnxaff/metrics/"]),
    ("graph", ["onnxaff/graph/", "onnxaff/export.py"]),
    ("data", ["onnxaff/data/"]),
    ("collection", ["onnxaff/collect.py", "onnxaff/scoring.py", "onnxaff/stats.py", "onnxaff/chunks.py",
                    "onnxaff/pooled.py", "onnxaff/observations.py", "onnxaff/scores.py", "onnxaff/entries.py",
                    "onnxaff/site_state.py"]),
    ("runtime", ["onnxaff/runtime.py", "onnxaff/network.py"]),
    ("signature format", ["onnxaff/signature.py", "onnxaff/schema.py", "onnxaff/tables.py"]),
    ("analysis", ["onnxaff/analysis/", "onnxaff/sitelist.py"]),
    ("results", ["onnxaff/compare.py", "onnxaff/shards.py", "onnxaff/executors.py"]),
    ("reports", ["onnxaff/report/"]),
    ("studies", ["onnxaff/study/", "onnxaff/demo.py"]),
    ("command line", ["onnxaff/cli/"]),
]


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


def test_the_architecture_page_lists_the_same_layers():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    assert [r.split("|")[1].strip() for r in rows[:len(LAYERS)]] == [name for name, _ in LAYERS]


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
