"""Rewrites the suite table in docs/sites.md: ONNX's expanded activation tests, what onnxaff finds.

Run from the repository root: python docs/node_suite_table.py  (about half a minute on 2 cores).
"""

from __future__ import annotations

import re
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DOC = Path(__file__).with_name("sites.md")


def affinity(model: onnx.ModelProto, folder: Path, tag: str) -> list[float]:
    import onnxaff

    inp = model.graph.input[0]
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    n = max(96, 2 * dims[0]) // dims[0] * dims[0]
    data = np.random.default_rng(7).standard_normal((n, *dims[1:])).astype(np.float32) * 3
    onnx.save(model, folder / f"{tag}.onnx")
    np.save(folder / f"{tag}.npy", data)
    sig = onnxaff.analyze(folder / f"{tag}.onnx", str(folder / f"{tag}.npy"), chunk_size=32, metrics=["affinity"],
                          progress=False, chunk_workers=0)
    return [s["metrics"]["affinity"]["mean"] for s in sig.sites]


def ops(model: onnx.ModelProto) -> str:
    names = [n.op_type for n in model.graph.node if n.op_type not in ("Constant", "CastLike")]
    k = sum(n.op_type == "CastLike" for n in model.graph.node)
    counts = Counter(names)
    parts = ([f"Constant/CastLike ×{k}"] if k else []) + [f"{op} ×{c}" if c > 1 else op for op, c in counts.items()]
    return ", ".join(parts) or "—"


def found(sites) -> str:
    from onnxaff.graph.sites import format_params

    if not sites:
        return "no site"
    return "; ".join(f"`{s.kind}`" + (f" ({format_params(s.params)})" if s.params else "")
                     + (f" [{s.status}]" if s.status != "ok" else "") for s in sites)


def table() -> str:
    from onnxaff.errors import OnnxaffError
    from onnxaff.graph import discover_sites
    from tests.onnx_node_suite import pairs

    by_name: dict[str, dict] = {}
    for p in pairs():
        base = p.name.split(" (")[0]
        row = by_name.setdefault(base, {"same": {}, "pairs": {}})
        rows = [[(s.kind, s.params, s.input, s.output, s.status) for s in discover_sites(m)]
                for m in (p.single, p.expanded)]
        row["same"][p.dtype] = rows[0] == rows[1]
        row["pairs"][p.dtype] = p
    lines = ["| expanded test model | nodes | onnxaff finds | = single node (f32 / f16 / bf16) | Δ affinity |",
             "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, row in sorted(by_name.items()):
            p = next(row["pairs"][d] for d in ("float32", "float16", "bfloat16") if d in row["pairs"])
            same = " / ".join("✅" if row["same"].get(d) else ("—" if d not in row["same"] else "❌")
                              for d in ("float32", "float16", "bfloat16"))
            try:
                if p.dtype == "bfloat16":
                    raise OnnxaffError("x: bfloat16 data are not loaded")
                a, b = affinity(p.single, Path(tmp), "a"), affinity(p.expanded, Path(tmp), "b")
                delta = f"{max(abs(x - y) for x, y in zip(a, b, strict=True)):.1e}" if a else "—"
            except OnnxaffError as e:
                delta = "no site to analyse" if "no non-linearity" in str(e) else str(e).split(": ", 1)[1]
            lines.append(f"| `{name}` ({p.dtype}) | {ops(p.expanded)} | {found(discover_sites(p.expanded))} | {same} "
                         f"| {delta} |")
    return "\n".join(lines)


def main() -> None:
    warnings.filterwarnings("ignore")
    text = DOC.read_text()
    new = re.sub(r"(<!-- suite:begin -->).*?(<!-- suite:end -->)", lambda m: f"{m[1]}\n{table()}\n{m[2]}", text,
                 flags=re.S)
    DOC.write_text(new)


if __name__ == "__main__":
    main()
