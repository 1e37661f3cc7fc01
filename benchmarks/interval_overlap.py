"""The end-of-data phase and the peak memory of a many-site run: MobileNetV2's 35 relu6 widths (32 … 1280).

A chain of MatMul + Clip(0, 6) sites with MobileNetV2's relu6 widths (inference is cheap here: what is timed
is the scoring). Prints the whole run; the time after the last batch was drawn (its inference, and every score
its chunks still wait for: a full scorer queue holds the batch loop there); the time after the data bar reached
100 % (Run._end: chunk scores, half-samples, pooled metrics still waited for); and the peak of Python allocations
(tracemalloc: numpy's buffers count).

Usage: python benchmarks/interval_overlap.py [--examples 512] [--intervals auto] [--max-width 1280]
Run it against another checkout with PYTHONPATH=that/checkout to compare.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from onnx import TensorProto, helper, numpy_helper

WIDTHS = [32, 32, 96, 96] + [144] * 4 + [192] * 6 + [384] * 8 + [576] * 6 + [960] * 6 + [1280]


def model(seed: int = 0):
    rng = np.random.default_rng(seed)
    nodes, inits, prev, d_prev = [], [], "x", 16
    for k, d in enumerate(WIDTHS):
        w = (rng.standard_normal((d_prev, d)) * 2.0 / np.sqrt(d_prev)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{k}")]
        nodes += [helper.make_node("MatMul", [prev, f"w{k}"], [f"z{k}"]),
                  helper.make_node("Clip", [f"z{k}", "lo", "hi"], [f"a{k}"])]
        prev, d_prev = f"a{k}", d
    inits += [numpy_helper.from_array(np.float32(0.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi")]
    graph = helper.make_graph(nodes, "mobilenet_widths", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                        ["N", 16])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", d_prev])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=512)
    ap.add_argument("--intervals", default="auto")
    ap.add_argument("--max-width", type=int, default=1280, help="only the sites up to this width")
    args = ap.parse_args()
    WIDTHS[:] = [d for d in WIDTHS if d <= args.max_width]
    from onnxaff.analysis import analyze
    from onnxaff.analysis.feeder import Feeder
    from onnxaff.analysis.lifecycle import Run

    end, fed = {}, {}
    inner, feed = Run._end, Feeder.feed

    def timed_feed(self, *a, **kw):
        fed["last"] = time.perf_counter()
        return feed(self, *a, **kw)

    Feeder.feed = timed_feed

    def timed_end(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            return inner(self, *a, **kw)
        finally:
            end["s"] = time.perf_counter() - t0

    Run._end = timed_end
    options = {} if args.intervals == "auto" else {"intervals": args.intervals}
    tracemalloc.start()
    t0 = time.perf_counter()
    sig = analyze(model(), f"synthetic:gaussian:n={args.examples}", progress=False, **options)
    done = time.perf_counter()
    total = done - t0
    peak = tracemalloc.get_traced_memory()[1]
    cis = sum(e.get("ci95") is not None for s in sig.sites for e in s["metrics"].values())
    print(f"{len(sig.sites)} sites, {args.examples} examples: whole run {total:.1f} s, after the last batch was "
          f"drawn {done - fed['last']:.1f} s, after 100 % {end['s']:.1f} s, "
          f"peak traced {peak / 2**20:.0f} MiB, {cis} intervals")


if __name__ == "__main__":
    main()
