"""Network NLC on wide inputs: error against an exact Jacobian, and cost, per --nlc-directions.

    python benchmarks/nlc_directions.py [--examples 256] [--models sk_mlp_tanh torch_cnn_relu]

For each shipped model, onnxaff's network NLC of its first EXAMPLES examples (batches of 64, so D = 784 ≥ 63
takes the rolls) with 1 (the default), 4, 16 and all directions, against the same within-batch quantity
NLC² = Σ_b Σ_i mean_{j≠i} ‖J_i(x_j − x̄_b)‖² / Σ_b Σ_i ‖y_i − ȳ_b‖² computed from full Jacobians J_i, made
independently of onnxaff's directions:
- sk_mlp_tanh: J_i written out from the weights (tanh layers, softmax), float64, no finite differences;
- torch_cnn_relu: J_i column by column, central differences along the 784 pixel axes (a ReLU network is
  piecewise linear: exact up to float32 rounding and the rare kink inside ±δ), the sums in float64.
Seconds are wall time of `onnxaff.analyze(metrics=["nlc"])` (site NLC included, the same for every row).
Prints a markdown table (docs/statistics.md, "Network NLC"). --examples 1024 (what a run uses) takes about
12 minutes on 2 shared cores, nearly all of it the CNN's exact reference; the default 256 about 4.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
from onnx import numpy_helper

import onnxaff
from onnxaff_models import shipped_models

BATCH = 64
STEP = 1e-3


def mlp_jacobians(path, x):
    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in onnx.load(path).graph.initializer}
    for a in x:
        slopes = []
        for k in ("", "1", "2"):
            a = np.tanh(a @ w["coefficient" + k] + w["intercepts" + k][0])
            slopes.append(1 - a ** 2)
        z = a @ w["coefficient3"] + w["intercepts3"][0]
        p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        jac = (np.diag(p) - np.outer(p, p)) @ w["coefficient3"].T
        for k, slope in zip(("2", "1", ""), slopes[::-1], strict=True):
            jac = (jac * slope) @ w["coefficient" + k].T
        yield jac, p


def cnn_jacobians(path, x):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    d = x[0].size
    eye = STEP * np.eye(d).reshape((d, *x.shape[1:]))
    for a in x:
        a32 = a.astype(np.float32)
        plus = (a32 + eye).astype(np.float32)
        minus = (a32 - eye).astype(np.float32)
        step = (plus - minus).reshape(d, d).diagonal().astype(np.float64)  # the steps float32 really took
        yp, ym = sess.run(None, {name: plus})[0], sess.run(None, {name: minus})[0]
        y = sess.run(None, {name: a32[None]})[0][0]
        yield ((yp.astype(np.float64) - ym) / step[:, None]).T, y.astype(np.float64)


def exact_nlc(jacobians, x):
    flat = x.reshape(len(x), -1).astype(np.float64)
    num = den = 0.0
    for s in range(0, len(x), BATCH):
        xb = flat[s:s + BATCH]
        c, ys = xb - xb.mean(axis=0), []
        for i, (jac, y) in enumerate(jacobians(x[s:s + BATCH])):
            jc = c @ jac.T
            num += (np.sum(jc ** 2) - np.sum(jc[i] ** 2)) / (len(xb) - 1)
            ys.append(y)
        den += np.sum((np.array(ys) - np.mean(ys, axis=0)) ** 2)
    return float(np.sqrt(num / den))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=256)
    ap.add_argument("--models", nargs="+", default=["sk_mlp_tanh", "torch_cnn_relu"])
    args = ap.parse_args()
    models = {m.name: m for m in shipped_models()}
    print("| model | examples | exact | directions | NLC | error | seconds |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        m = models[name]
        x = np.load(m.data)["image"][:args.examples]
        jac = (lambda xs, p=str(m.path): mlp_jacobians(p, xs.reshape(len(xs), -1).astype(np.float64))) \
            if name.startswith("sk_") else (lambda xs, p=str(m.path): cnn_jacobians(p, xs))
        t = time.perf_counter()
        exact = exact_nlc(jac, x)
        t_exact = time.perf_counter() - t
        for k in (1, 4, 16, "all"):
            t = time.perf_counter()
            sig = onnxaff.analyze(m.path, str(m.data), metrics=["nlc"], progress=False, limit=args.examples,
                                  nlc_directions=k)
            seconds = time.perf_counter() - t
            value = next(v for v in sig.network["nlc"]["values"].values() if v is not None)
            print(f"| {name} | {args.examples} | {exact:.6f} | {k} | {value:.6f} | {100 * (value / exact - 1):+.3f} % "
                  f"| {seconds:.1f} |", flush=True)
        print(f"| {name} | {args.examples} | {exact:.6f} | (exact reference) | | | {t_exact:.1f} |", flush=True)


if __name__ == "__main__":
    main()
