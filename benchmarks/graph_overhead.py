"""The augmented graph's own cost: plain model against onnxaff's augmented model, in one process (issue 28).

    python benchmarks/graph_overhead.py MODEL.onnx IMAGES.npy [--batches 8] [--batch-size 64]

Both sessions get the same options; batches alternate plain, augmented, so drifts of a shared machine hit both.
Prints wall and CPU seconds (process time) of each, their ratio, and the node types of onnxruntime's optimised
graphs (where a standalone activation sits between NCHWc reorders).
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.plan import Plan


def session(model: onnx.ModelProto, optimized: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ops(path: Path) -> dict[str, int]:
    def name(n):
        act = next((a.s.decode() for a in n.attribute if a.name == "activation"), "")
        return f"{n.domain.split('.')[-1] + ':' if n.domain else ''}{n.op_type}{'+' + act if act else ''}"

    return dict(collections.Counter(name(n) for n in onnx.load(str(path)).graph.node))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("images")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    plan = Plan.build(args.model, args.images, AnalysisConfig(progress=False, batch_size=args.batch_size))
    tmp = Path(tempfile.mkdtemp(prefix="onnxaff-graph-"))
    plain = session(onnx.load(args.model), tmp / "plain.onnx")
    augmented = session(plan.augmented, tmp / "augmented.onnx")
    images = np.load(args.images, mmap_mode="r")
    name = plain.get_inputs()[0].name
    spent = {"plain": [0.0, 0.0], "augmented": [0.0, 0.0]}
    for i in range(args.batches):
        batch = np.ascontiguousarray(images[i * args.batch_size:(i + 1) * args.batch_size])
        for key, sess, outputs in (("plain", plain, None), ("augmented", augmented, plan.names)):
            w, c = time.perf_counter(), time.process_time()
            sess.run(outputs, {name: batch})
            spent[key][0] += time.perf_counter() - w
            spent[key][1] += time.process_time() - c
    (pw, pc), (aw, ac) = spent["plain"], spent["augmented"]
    print(f"{Path(args.model).name}, {args.batches} batches of {args.batch_size}: plain {pw:.2f} s wall, "
          f"{pc:.2f} s CPU; augmented {aw:.2f} s wall, {ac:.2f} s CPU; ÷ {aw / pw:.3f} wall, {ac / pc:.3f} CPU")
    print("plain optimised graph:", ops(tmp / "plain.onnx"))
    print("augmented optimised graph:", ops(tmp / "augmented.onnx"))


if __name__ == "__main__":
    main()
