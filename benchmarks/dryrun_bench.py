"""The dry run's own cost against the run it predicts (issue 49): a wide fixture (a chain of MatMul → Relu layers
of ten widths, 64 to 1280) and the shipped demo models, each timed as `estimate` (the dry run, in this process)
and `analyze` (the run), default options.

    python benchmarks/dryrun_bench.py [--examples 1024] [--demo] [--all-shapes | --anchors K]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTHS = (64, 128, 192, 256, 384, 512, 640, 768, 1024, 1280)


def wide_chain(widths=WIDTHS, d_in: int = 32, seed: int = 0) -> onnx.ModelProto:
    """x [N, d_in] → (MatMul, Relu) per width: one Relu site per width."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev, d = [], [], "x", d_in
    for k, w in enumerate(widths):
        inits.append(numpy_helper.from_array((rng.standard_normal((d, w)) / np.sqrt(d)).astype(np.float32), f"w{k}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{k}"], [f"h{k}"]),
                  helper.make_node("Relu", [f"h{k}"], [f"a{k}"])]
        prev, d = f"a{k}", w
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", d_in])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def timed(model: str, data: str) -> tuple[float, float, float, float]:
    """(dry run s, its predicted wall s and scoring CPU s, run s) in this process (imports already paid)."""
    from onnxaff import analyze
    from onnxaff.analysis.cost import estimate

    clock = time.perf_counter()
    est = estimate(model, data, progress=False)
    dry = time.perf_counter() - clock
    clock = time.perf_counter()
    analyze(model, data, progress=False)
    return dry, est.seconds["wall"], est.scoring_seconds, time.perf_counter() - clock


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=1024)
    ap.add_argument("--demo", action="store_true", help="the shipped demo models too")
    ap.add_argument("--all-shapes", action="store_true", help="time every job shape (the dry run before issue 49)")
    ap.add_argument("--anchors", type=int, help="shapes timed per metric and row count (default: ANCHORS)")
    args = ap.parse_args()
    from onnxaff.analysis import calibrate

    calibrate.ANCHORS = 10**9 if args.all_shapes else args.anchors or calibrate.ANCHORS
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wide.onnx"
        onnx.save(wide_chain(), path)
        cases.append(("wide chain (10 widths, 64-1280)", str(path), f"synthetic:gaussian:n={args.examples}"))
        if args.demo:
            from onnxaff_models import shipped_models

            cases += [(m.name, str(m.path), str(m.data)) for m in shipped_models()]
        print("| case | dry run s | predicted wall s | predicted scoring s | run s | dry / run |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, model, data in cases:
            dry, predicted, scoring, run = timed(model, data)
            print(f"| {name} | {dry:.2f} | {predicted:.1f} | {scoring:.1f} | {run:.1f} | {dry / run:.0%} |",
                  flush=True)


if __name__ == "__main__":
    main()
