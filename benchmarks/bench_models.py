"""The benchmark networks and data, written with onnx.helper (no training framework, seeded).

- `resnet18`: ResNet-18's topology at 224×224 (BatchNorm folded into conv biases, as inference exports
  do): stem conv 7×7/2 + ReLU + max-pool, four stages of two basic blocks (64–512 channels), global
  average pool, fc 1000. 17 ReLU sites, 1.8 GMACs per image. He-initialised weights, residual
  branches scaled by 0.2 so activations stay O(1) through the depth without normalisation.
- `vit`: a small ViT at 224×224: 16×16 patches → 196 tokens of width 192, 4 pre-LN blocks
  (3-head attention with Softmax, GELU MLP ×4), mean pool, fc 1000. 8 sites (4 Softmax, 4 GELU).
- images: crops of scikit-learn's two sample photos (china, flower), flipped and normalised with
  the ImageNet mean/std as torchvision does, else smooth random images when scikit-learn is absent.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Graph:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.k = 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def param(self, array: np.ndarray, base: str) -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), n))
        return n

    def op(self, op: str, inputs: list[str], base: str | None = None, out: str | None = None, **attrs) -> str:
        out = out or self.name(base or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def ints(self, values: list[int], base: str = "shape") -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.array(values, np.int64), n))
        return n

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, gain: float = 1.0, pad: bool = True) -> str:
        w = self.rng.standard_normal((cout, cin, k, k)) * math.sqrt(2.0 / (cin * k * k)) * gain
        b = self.rng.standard_normal(cout) * 0.05
        p = k // 2 if pad else 0
        return self.op("Conv", [x, self.param(w, "w"), self.param(b, "b")], "conv", kernel_shape=[k, k],
                       strides=[stride, stride], pads=[p, p, p, p])

    def linear(self, x: str, din: int, dout: int, gain: float = 1.0, out: str | None = None) -> str:
        w = self.rng.standard_normal((din, dout)) * math.sqrt(1.0 / din) * gain
        y = self.op("MatMul", [x, self.param(w, "w")])
        return self.op("Add", [y, self.param(self.rng.standard_normal(dout) * 0.02, "b")], out=out)

    def model(self, name: str, inp: str, shape: list, out: str, out_shape: list, opset: int) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(inp, TensorProto.FLOAT, shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="onnxaff-bench")
        m.ir_version = 9
        onnx.checker.check_model(m, full_check=True)
        return m


def _resnet(name: str, stages: tuple, bottleneck: bool, seed: int) -> onnx.ModelProto:
    """Stem, stages of (width, blocks) of basic or bottleneck blocks (residual branch scaled by 0.2), fc 1000."""
    g = _Graph(seed)
    h = g.op("Relu", [g.conv("image", 3, 64, 7, stride=2)])
    h = g.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate(stages):
        cout = 4 * width if bottleneck else width
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            if bottleneck:
                r = g.op("Relu", [g.conv(h, cin, width, 1)])
                r = g.op("Relu", [g.conv(r, width, width, 3, stride)])
                r = g.conv(r, width, cout, 1, gain=0.2)
            else:
                r = g.op("Relu", [g.conv(h, cin, cout, 3, stride)])
                r = g.conv(r, cout, cout, 3, gain=0.2)
            skip = h if stride == 1 and cin == cout else g.conv(h, cin, cout, 1, stride)
            h = g.op("Relu", [g.op("Add", [skip, r])])
            cin = cout
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1)
    g.linear(h, cin, 1000, out="logits")
    return g.model(name, "image", ["N", 3, 224, 224], "logits", ["N", 1000], opset=17)


def resnet18(seed: int = 0) -> onnx.ModelProto:
    """ResNet-18's topology: basic blocks, two per stage; 17 ReLU sites, 1.8 GMACs."""
    return _resnet("resnet18_topology", ((64, 2), (128, 2), (256, 2), (512, 2)), False, seed)


def resnet50(seed: int = 0) -> onnx.ModelProto:
    """ResNet-50's topology: bottleneck blocks (1×1, 3×3, 1×1 ×4) in stages of 3, 4, 6, 3; 49 ReLU sites, 4.1 GMACs."""
    return _resnet("resnet50_topology", ((64, 3), (128, 4), (256, 6), (512, 3)), True, seed)


def vit(seed: int = 0, width: int = 192, depth: int = 4, heads: int = 3) -> onnx.ModelProto:
    g = _Graph(seed)
    tokens, dh = 196, width // heads
    t = g.conv("image", 3, width, 16, stride=16, pad=False)  # patchify: [N, C, 14, 14]
    t = g.op("Transpose", [g.op("Reshape", [t, g.ints([0, width, tokens])])], perm=[0, 2, 1])
    t = g.op("Add", [t, g.param(g.rng.standard_normal((tokens, width)) * 0.02, "pos")])

    def layernorm(x):
        return g.op("LayerNormalization", [x, g.param(np.ones(width), "gamma"), g.param(np.zeros(width), "beta")],
                    axis=-1, epsilon=1e-6)

    def heads_split(x):  # [N, T, C] -> [N, H, T, dh]
        return g.op("Transpose", [g.op("Reshape", [x, g.ints([0, tokens, heads, dh])])], perm=[0, 2, 1, 3])

    for _ in range(depth):
        a = layernorm(t)
        q, k, v = (heads_split(g.linear(a, width, width)) for _ in range(3))
        scores = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                              g.param(np.array(1.0 / math.sqrt(dh)), "scale")])
        w = g.op("Softmax", [scores], axis=-1)
        o = g.op("Transpose", [g.op("MatMul", [w, v])], perm=[0, 2, 1, 3])
        t = g.op("Add", [t, g.linear(g.op("Reshape", [o, g.ints([0, tokens, width])]), width, width, gain=0.5)])
        m = g.op("Gelu", [g.linear(layernorm(t), width, 4 * width)])
        t = g.op("Add", [t, g.linear(m, 4 * width, width, gain=0.5)])
    h = g.op("ReduceMean", [layernorm(t), g.ints([1], "axes")], keepdims=0)
    g.linear(h, width, 1000, out="logits")
    return g.model("vit_small", "image", ["N", 3, 224, 224], "logits", ["N", 1000], opset=20)


MODELS = {"resnet18": resnet18, "resnet50": resnet50, "vit": vit}

MEAN = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
STD = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]


def images(n: int, seed: int = 0) -> np.ndarray:
    """n preprocessed [3, 224, 224] float32 images."""
    rng = np.random.default_rng(seed)
    try:
        from sklearn.datasets import load_sample_images

        photos = [np.asarray(p, np.float32) / 255.0 for p in load_sample_images().images]  # 427×640 RGB
    except ImportError:
        photos = None
    out = np.empty((n, 3, 224, 224), np.float32)
    for i in range(n):
        if photos is not None:
            p = photos[i % len(photos)]
            r, c = rng.integers(0, p.shape[0] - 224), rng.integers(0, p.shape[1] - 224)
            crop = p[r:r + 224, c:c + 224].transpose(2, 0, 1)
            crop = crop[:, :, ::-1] if rng.random() < 0.5 else crop
        else:
            spec = np.fft.rfft2(rng.standard_normal((3, 224, 224)))
            f = np.hypot(*np.meshgrid(np.fft.fftfreq(224), np.fft.rfftfreq(224), indexing="ij"))
            crop = np.fft.irfft2(spec / (1 + (f * 40) ** 2), s=(224, 224))
            crop = 0.5 + 0.2 * crop / crop.std()
        out[i] = (crop - MEAN) / STD
    return out
