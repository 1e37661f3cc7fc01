"""Defaults declared once: no function or class below AnalysisConfig writes a literal default for an option the
config holds (it reads onnxaff.defaults, as AnalysisConfig's own fields do), so a changed default cannot leave a
second, stale copy behind."""

import ast
import dataclasses
from pathlib import Path

from onnxaff import defaults
from onnxaff.analysis.config import AnalysisConfig

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {f.name for f in dataclasses.fields(AnalysisConfig)}
# The config itself, and the layers above it that state its defaults by reading it (api: AnalysisConfig's own).
ABOVE = ("onnxaff/api/", "onnxaff/cli/", "onnxaff/analysis/config.py")


def _literal(node) -> bool:
    return isinstance(node, ast.Constant) and node.value is not None


def literal_defaults(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            found += [f"{where}:{node.lineno} {node.name}({a.arg}={d.value!r})" for a, d in pairs
                      if a.arg in FIELDS and _literal(d)]
        elif isinstance(node, ast.ClassDef):
            found += [f"{where}:{st.lineno} {node.name}.{st.target.id} = {st.value.value!r}" for st in node.body
                      if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id in FIELDS
                      and _literal(st.value)]
    return found


def test_no_literal_default_below_the_config():
    found = []
    for path in sorted((ROOT / "onnxaff").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(ABOVE):
            found += literal_defaults(path.read_text(encoding="utf-8"), rel)
    assert not found, "\n".join(found)


def test_the_checker_sees_a_literal_default():
    """The test above can fail: a function, a keyword-only argument and a dataclass field with literal defaults."""
    src = "def f(x, seed=0, *, layout='auto'): pass\nclass C:\n    reduce: str = 'mean'\n    other: int = 3\n"
    assert literal_defaults(src, "m.py") == ["m.py:1 f(seed=0)", "m.py:1 f(layout='auto')", "m.py:3 C.reduce = 'mean'"]


def test_the_config_reads_the_same_defaults():
    config = AnalysisConfig()
    shared = {name.lower(): value for name, value in vars(defaults).items() if name.isupper()}
    assert shared and all(getattr(config, name) == value for name, value in shared.items())
