"""Build the embedded default that `onnxaff demo` analyses: a small residual CNN and its data.

    python models/build_default.py

Written with onnx.helper only (seeded He-initialised weights, no training framework), so it
regenerates anywhere in a second. The data are smooth random images (Gaussian noise low-passed in
the Fourier domain), stored as float16 to keep the package small.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parents[1] / "onnxaff" / "default"
C, SIDE, N = 16, 8, 1024


def build_model(rng: np.random.Generator) -> onnx.ModelProto:
    nodes, inits = [], []

    def weight(name, shape, fan_in, gain=2.0):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * math.sqrt(gain / fan_in)).astype(np.float32), name))
        return name

    def const(name, value):
        inits.append(numpy_helper.from_array(np.array(value, dtype=np.float32), name))
        return name

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(x, name, cin, cout):
        b = const(f"{name}.b", rng.uniform(-0.1, 0.1, cout))
        return node("Conv", [x, weight(f"{name}.w", (cout, cin, 3, 3), cin * 9), b], name, pads=[1, 1, 1, 1])

    h = node("Relu", [conv("image", "stem", 3, C)], "stem.relu")
    for k in range(3):
        r = node("Relu", [conv(h, f"block{k}.conv1", C, C)], f"block{k}.relu1")
        r = node("Mul", [conv(r, f"block{k}.conv2", C, C), const(f"block{k}.scale", 0.5)], f"block{k}.scaled")
        h = node("Relu", [node("Add", [h, r], f"block{k}.add")], f"block{k}.relu2")
    h = node("Flatten", [node("GlobalAveragePool", [h], "pool")], "flat")

    def dense(x, name, din, dout):
        return node("Gemm", [x, weight(f"{name}.w", (din, dout), din), const(f"{name}.b", np.zeros(dout))], name)

    h = dense(h, "fc1", C, 32)
    # GELU, decomposed as PyTorch writes it below opset 20.
    e = node("Erf", [node("Div", [h, const("sqrt2", math.sqrt(2.0))], "gelu.div")], "gelu.erf")
    g = node("Mul", [node("Mul", [h, node("Add", [e, const("one", 1.0)], "gelu.add")], "gelu.mul")],
             "gelu")
    nodes[-1].input.append(const("half", 0.5))
    h = dense(g, "fc2", 32, 32)
    h = node("Mul", [h, node("Sigmoid", [h], "silu.sigmoid")], "silu")
    node("Softmax", [dense(h, "fc3", 32, 10)], "probs", axis=1)
    graph = helper.make_graph(
        nodes, "onnxaff_default_rescnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxaff")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def build_data(rng: np.random.Generator) -> np.ndarray:
    noise = rng.standard_normal((N, 3, SIDE, SIDE))
    f = np.fft.fftfreq(SIDE)
    lowpass = np.exp(-(f[:, None] ** 2 + f[None, :] ** 2) / (2 * 0.15**2))
    images = np.real(np.fft.ifft2(np.fft.fft2(noise) * lowpass))
    images = (images - images.mean()) / images.std()
    return images.astype(np.float16)


def main() -> None:
    rng = np.random.default_rng(2025)
    OUT.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(rng), OUT / "rescnn.onnx")
    np.savez_compressed(OUT / "rescnn_data.npz", image=build_data(rng))
    for p in sorted(OUT.glob("rescnn*")):
        print(f"wrote {p} ({p.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
