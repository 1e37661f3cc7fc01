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


def test_each_layer_is_one_package_and_the_root_holds_only_the_api_errors_and_defaults():
    """The tree shows the layers: every layer's modules are one folder of onnxaff/, and the package root holds
    the public API (`__init__.py`) with the two foundations every layer reads first, nothing more."""
    root = sorted(p.name for p in (ROOT / "onnxaff").glob("*.py"))
    assert root == ["__init__.py", "defaults.py", "errors.py"], root
    for name, paths in LAYERS:
        folders = [p for p in paths if p.endswith("/")]
        loose = [p for p in paths if not p.endswith("/")]
        assert len(folders) == 1, (name, paths)
        assert not loose or name == "foundations" and loose == ["onnxaff/errors.py", "onnxaff/defaults.py"], paths
    packages = {p.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "onnxaff").iterdir()
                if (p / "__init__.py").exists()}
    assert packages == {p for _, paths in LAYERS for p in paths if p.endswith("/")}, packages


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


def _first_parameter_class(fn: ast.FunctionDef) -> str | None:
    args = fn.args.posonlyargs + fn.args.args
    ann = args[0].annotation if args else None
    return ann.id if isinstance(ann, ast.Name) else ann.value if isinstance(ann, ast.Constant) else None


def class_sizes(text: str) -> dict[str, int]:
    """Each class's lines with its methods written as module functions counted in: a function of the module whose
    first parameter is an instance of one of the module's classes is that class's method, wherever it stands."""
    tree = ast.parse(text)
    sizes = {n.name: n.end_lineno - n.lineno + 1 for n in tree.body if isinstance(n, ast.ClassDef)}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and _first_parameter_class(fn) in sizes:
            sizes[_first_parameter_class(fn)] += fn.end_lineno - fn.lineno + 1
    nested = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name not in sizes]
    sizes.update({n.name: n.end_lineno - n.lineno + 1 for n in nested})
    return sizes


# The classes honestly larger than 150 lines, each with its own cap and the reason: cutting one apart would move
# state out of the class that owns it (a satellite rebuilt per read, an object writing into another's parts).
LARGER = {
    ("onnxaff/collection/site_state.py", "SiteState"): (201, "one site's collection from its first row to merged "
                                                         "shards: its parts hold the state (the first chunk's "
                                                         "half-samples included), this class the order in which "
                                                         "they are fed, scored, finished and merged, which "
                                                         "metrics apply, and what a run or a resume gives it"),
    ("onnxaff/analysis/runstate.py", "RunState"): (171, "a run's collectors and its books (cursor, examples used "
                                                  "and dropped, files skipped, time, key): the batch loop reports "
                                                  "to it (passed, ran, adopt) instead of writing its fields"),
}


def test_classes_and_modules_stay_small():
    """No class in onnxaff/ over 150 lines (its methods moved out as module functions included; LARGER names the
    exceptions and why), no module over 400: one job each, readable alone."""
    big = []
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT).as_posix()
        if text.count("\n") > 400:
            big.append(f"{rel}: {text.count(chr(10))} lines")
        big += [f"{rel}: class {name} {n} lines" for name, n in class_sizes(text).items()
                if n > LARGER.get((rel, name), (150,))[0]]
    assert not big, big


def test_each_larger_class_exists_needs_its_cap_and_says_why():
    """An exception is no blanket: its class is over 150 lines today, and its reason is written out."""
    for (rel, name), (cap, why) in LARGER.items():
        n = class_sizes((ROOT / rel).read_text(encoding="utf-8")).get(name, 0)
        assert 150 < n <= cap and len(why.split()) >= 8, (rel, name, n, cap)


def test_a_method_moved_out_counts_for_its_class():
    text = "class A:\n    x = 1\n\n\ndef helper(a: A, k):\n    return a.x + k\n\n\ndef other(k: int):\n    return k\n"
    assert class_sizes(text) == {"A": 2 + 2}


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


def _graph_subpackages() -> set[str]:
    return {p.name for p in (ROOT / "onnxaff" / "graph").iterdir() if (p / "__init__.py").exists()}


def graph_node(module: str) -> str | None:
    """The row of docs/architecture.md's graph table a module of onnxaff.graph stands in: `__init__` for the
    package itself, `name/` for a sub-package (all its modules), else the module's own name."""
    parts = module.split(".")
    if parts[:2] != ["onnxaff", "graph"]:
        return None
    if len(parts) == 2:
        return "__init__"
    return parts[2] + "/" if parts[2] in _graph_subpackages() else parts[2]


def graph_table() -> dict[str, tuple[int, set[str]]]:
    """Row → (floor, the graph modules it imports), from docs/architecture.md's table of the graph layer's modules."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = page.index("| floor | module | imports (graph modules) | holds |")
    rows = {}
    for line in page[start:].splitlines()[2:]:
        if not line.startswith("| "):
            break
        floor, module, imports, _ = (c.strip() for c in line.strip("|").split(" | "))
        assert module.strip("`") not in rows, f"{module} has two rows"
        rows[module.strip("`")] = (int(floor), set(re.findall(r"`([^`]+)`", imports)))
    return rows


def test_the_graph_table_is_the_code():
    """docs/architecture.md's table of the graph layer is its import graph: one row per module (a sub-package one
    row), each with exactly the graph modules it imports anywhere in its files, on the floor one above the highest
    of them (0: none). An import added or dropped, a module added, moved or removed, and this fails."""
    code: dict[str, set[str]] = {}
    for path in (ROOT / "onnxaff" / "graph").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        code.setdefault(graph_node(".".join(parts[:-1] if parts[-1] == "__init__" else parts)), set())
    for a, b in _import_graph().edges:
        here, there = graph_node(a), graph_node(b)
        if here and there and here != there:
            code[here].add(there)
    table = graph_table()
    assert set(table) == set(code), (f"rows for no module: {sorted(set(table) - set(code))}; "
                                     f"modules without a row: {sorted(set(code) - set(table))}")
    wrong = [f"{m}: the table says {sorted(table[m][1])}, the code imports {sorted(code[m])}"
             for m in sorted(code) if table[m][1] != code[m]]
    assert not wrong, "\n".join(wrong)
    misplaced = [f"{m} on floor {floor}, not {1 + max((table[i][0] for i in imports), default=-1)}"
                 for m, (floor, imports) in sorted(table.items())
                 if floor != 1 + max((table[i][0] for i in imports), default=-1)]
    assert not misplaced, misplaced
    assert list(table) == sorted(table, key=lambda m: (-table[m][0], m)), "rows from the top floor down, by name"


def named_modules() -> list[tuple[str, list[str]]]:
    """(module, the names a page may give it) for every module of onnxaff/: its path below onnxaff/
    (`analysis/budget.py`; the package's own is `onnxaff/__init__.py`), or, in a sub-package of a layer's package,
    that sub-package's folder (`graph/expand/`, its modules described together). A package's `__init__.py` defining
    nothing (no function, no class) is named by its folder, as its package is."""
    out = []
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        rel = path.relative_to(ROOT / "onnxaff").as_posix()
        if path.name == "__init__.py" and rel != "__init__.py":
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if not any(isinstance(n, ast.FunctionDef | ast.ClassDef) for n in tree.body):
                continue
        folder = rel.rsplit("/", 1)[0] + "/" if rel.count("/") > 1 else None
        out.append((rel, ["onnxaff/__init__.py" if rel == "__init__.py" else rel, *([folder] if folder else [])]))
    return out


def names(text: str, name: str) -> bool:
    """Whether `text` names `name` as a path: `analysis/budget.py` or `onnxaff/analysis/budget.py`, not as the tail
    of another path (`graph/expand/recurrent.py` is not `graph/recurrent.py`)."""
    return re.search(rf"(?:^|[^\w/.]|onnxaff/){re.escape(name)}(?!\w)", text, re.M) is not None


def test_the_architecture_page_names_every_module():
    """Every module of onnxaff/ is named on docs/architecture.md: by its path, or (the graph layer's) by its row of
    the graph table."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = graph_table()
    def row(rel: str) -> str | None:
        return graph_node("onnxaff." + rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__"))

    unnamed = [rel for rel, candidates in named_modules()
               if not any(names(page, n) for n in candidates) and row(rel) not in rows]
    assert not unnamed, unnamed
