"""Time of site discovery (`onnxaff sites` minus loading) on ~500-node graphs.

python benchmarks/sites_bench.py            # this checkout
PYTHONPATH=/path/to/old/checkout python benchmarks/sites_bench.py   # another version, same models
Prints one line per model: nodes, sites, best of 5 discover_sites wall times (shape inference included),
and best of 5 `list_sites` with `--blocks all` (sites, blocks and stages, over one fresh LoadedModel each time).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def transformer_like(blocks: int = 24, d: int = 16) -> onnx.ModelProto:
    """Pre-LN MLP blocks with LayerNorm and GELU decomposed as exporters write them: 21 nodes a block."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x0"

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    const("two", 2.0), const("eps", 1e-5), const("half", 0.5), const("one", 1.0), const("sqrt2", np.sqrt(2.0))
    for k in range(blocks):
        p = f"b{k}_"
        ops = [
            ("ReduceMean", [x], [p + "mu"], {"axes": [-1]}), ("Sub", [x, p + "mu"], [p + "xc"], {}),
            ("Pow", [p + "xc", "two"], [p + "sq"], {}), ("ReduceMean", [p + "sq"], [p + "var"], {"axes": [-1]}),
            ("Add", [p + "var", "eps"], [p + "ve"], {}), ("Sqrt", [p + "ve"], [p + "sd"], {}),
            ("Div", [p + "xc", p + "sd"], [p + "n"], {}),
            ("Mul", [p + "n", const(p + "g", rng.random(d))], [p + "ng"], {}),
            ("Add", [p + "ng", const(p + "be", rng.random(d))], [p + "ln"], {}),
            ("MatMul", [p + "ln", const(p + "w1", rng.standard_normal((d, d)))], [p + "h"], {}),
            ("Add", [p + "h", const(p + "b1", rng.random(d))], [p + "hb"], {}),
            ("Div", [p + "hb", "sqrt2"], [p + "hd"], {}), ("Erf", [p + "hd"], [p + "he"], {}),
            ("Add", [p + "he", "one"], [p + "h1"], {}), ("Mul", [p + "hb", p + "h1"], [p + "hm"], {}),
            ("Mul", [p + "hm", "half"], [p + "gelu"], {}),
            ("MatMul", [p + "gelu", const(p + "w2", rng.standard_normal((d, d)))], [p + "o"], {}),
            ("Add", [p + "o", const(p + "b2", rng.random(d))], [p + "ob"], {}),
            ("Sigmoid", [p + "ob"], [p + "sg"], {}), ("Mul", [p + "ob", p + "sg"], [p + "silu"], {}),
            ("Add", [x, p + "silu"], [f"x{k + 1}"], {}),
        ]
        nodes += [helper.make_node(op, i, o, name=o[0], **a) for op, i, o, a in ops]
        x = f"x{k + 1}"
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, ["N", 8, d])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 8, d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def elementwise_chain(n: int = 500) -> onnx.ModelProto:
    """The worst case for islands: n elementwise ops in one chain, every tensor a possible entry."""
    ops = ["Mul", "Add", "Abs", "Mul", "Add", "Exp", "Neg", "Add", "Log", "Mul"]
    nodes, x = [], "x"
    for k in range(n):
        op = ops[k % len(ops)]
        nodes.append(helper.make_node(op, [x, "c"] if op in ("Mul", "Add") else [x], [f"t{k}"], name=f"n{k}"))
        x = f"t{k}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 8])],
                              [numpy_helper.from_array(np.array(0.5, np.float32), "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def best_of(n: int, fn) -> tuple[float, object]:
    times, result = [], None
    for _ in range(n):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main() -> None:
    from onnxaff.analysis.sitelist import list_sites
    from onnxaff.graph import discover_sites, load_model
    from onnxaff.graph.load import LoadedModel

    models = {"transformer_like (24 blocks)": transformer_like(), "elementwise chain": elementwise_chain()}
    for name in ("light_resnet50", "light_densenet121", "light_inception_v2"):
        models[name] = load_model(LIGHT / f"{name}.onnx").model
    print(f"onnxaff from {sys.modules['onnxaff'].__file__}")
    every_kind = ("residual", "attention", "mlp")
    for name, model in models.items():
        seconds, sites = best_of(5, lambda m=model: discover_sites(m))
        inferred = onnx.shape_inference.infer_shapes(model)
        with_blocks, found = best_of(5, lambda m=inferred: list_sites(LoadedModel(m, None), blocks=every_kind))
        print(f"{name:30s} {len(model.graph.node):5d} nodes {len(sites):4d} sites  {seconds:.3f} s   "
              f"{len(found.extra):3d} blocks {len(found.stages):2d} stages  {with_blocks:.3f} s")


if __name__ == "__main__":
    main()
