"""The benchmark networks and data, written with onnx.helper (no training framework, seeded).

- `resnet18`: ResNet-18's topology at 224×224 (BatchNorm folded into conv biases, as inference exports
  do): stem conv 7×7/2 + ReLU + max-pool, four stages of two basic blocks (64–512 channels), global
  average pool, fc 1000. 17 ReLU sites, 1.8 GMACs per image. He-initialised weights, residual
  branches scaled by 0.2 so activations stay O(1) through the depth without normalisation.
- `vit`: a small ViT at 224×224: 16×16 patches → 196 tokens of width 192, 4 pre-LN blocks
  (3-head attention with Softmax, GELU MLP ×4), mean pool, fc 1000. 8 sites (4 Softmax, 4 GELU).
- `mobilenetv2`: MobileNetV2 (width 1.0) at 224×224: stem conv 3×3/2 32, 17 inverted residual blocks
  (expand 1×1 ×6, depthwise 3×3, linear 1×1 projection; skip when stride 1 and widths agree), conv 1×1 1280,
  global average pool, fc 1000. ReLU6 as Clip(0, 6), BatchNorm folded: 35 relu6 sites, D 32…1280 (32 at the
  stem, 960 in the last expansions), 0.3 GMACs per image.
- `pplcnet`: PP-LCNet x1.0's topology at 224×224: stem conv 3×3/2 16, 13 depthwise-separable blocks
  (depthwise 3×3 or 5×5, pointwise 1×1, each followed by HardSwish), squeeze-and-excitation (ReLU,
  HardSigmoid, Mul) in the last two, global average pool, conv 1×1 1280 + HardSwish, fc 1000: 28 hard-swish
  sites (D 16…1280), 32 sites in all, 0.16 GMACs per image.
- `vit_s`: ViT-S/16's shape: width 384, 6 heads, MLP 1536, 12 blocks (24 sites: 12 Softmax, 12 GELU);
  `vit_s6` the same with 6 blocks.
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


def _relu6(g: _Graph, x: str) -> str:
    return g.op("Clip", [x, g.param(np.array(0.0), "lo"), g.param(np.array(6.0), "hi")], "relu6")


def _dwconv(g: _Graph, x: str, c: int, k: int, stride: int = 1, gain: float = 1.0) -> str:
    """Depthwise k×k conv (group = c), He-scaled per channel, bias as a folded BatchNorm leaves it."""
    w = g.rng.standard_normal((c, 1, k, k)) * math.sqrt(2.0 / (k * k)) * gain
    b = g.rng.standard_normal(c) * 0.05
    p = k // 2
    return g.op("Conv", [x, g.param(w, "w"), g.param(b, "b")], "dwconv", kernel_shape=[k, k], group=c,
                strides=[stride, stride], pads=[p, p, p, p])


def mobilenetv2(seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0): 35 relu6 sites (Clip 0…6), inverted residuals with linear bottlenecks."""
    g = _Graph(seed)
    h = _relu6(g, g.conv("image", 3, 32, 3, stride=2))
    cin = 32
    # (expansion t, output channels c, repeats n, first stride s), as in the paper's table 2
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            r = h if t == 1 else _relu6(g, g.conv(h, cin, hidden, 1))
            r = _relu6(g, _dwconv(g, r, hidden, 3, stride))
            skip = stride == 1 and cin == c
            r = g.conv(r, hidden, c, 1, gain=0.3 if skip else 0.7)  # linear bottleneck
            h = g.op("Add", [h, r]) if skip else r
            cin = c
    h = _relu6(g, g.conv(h, cin, 1280, 1))
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1)
    g.linear(h, 1280, 1000, out="logits")
    return g.model("mobilenetv2_topology", "image", ["N", 3, 224, 224], "logits", ["N", 1000], opset=17)


def pplcnet(seed: int = 0, scale: float = 1.0) -> onnx.ModelProto:
    """PP-LCNet's topology (x1.0 by default): depthwise-separable blocks with HardSwish, SE in the last two."""
    g = _Graph(seed)

    def width(c: int) -> int:
        return max(8, int(c * scale + 4) // 8 * 8)

    h = g.op("HardSwish", [g.conv("image", 3, width(16), 3, stride=2)])
    cin = width(16)
    # (depthwise kernel, output channels, stride, squeeze-and-excitation), PaddleClas NET_CONFIG blocks2…6
    config = ([(3, 32, 1, False), (3, 64, 2, False), (3, 64, 1, False), (3, 128, 2, False), (3, 128, 1, False),
               (3, 256, 2, False)] + [(5, 256, 1, False)] * 5 + [(5, 512, 2, True), (5, 512, 1, True)])
    for k, c, stride, se in config:
        h = g.op("HardSwish", [_dwconv(g, h, cin, k, stride)])
        if se:
            s = g.op("GlobalAveragePool", [h])
            s = g.op("Relu", [g.conv(s, cin, cin // 4, 1)])
            s = g.op("HardSigmoid", [g.conv(s, cin // 4, cin, 1)], alpha=1.0 / 6, beta=0.5)
            h = g.op("Mul", [h, s])
        h = g.op("HardSwish", [g.conv(h, cin, width(c), 1)])
        cin = width(c)
    h = g.op("GlobalAveragePool", [h])
    h = g.op("HardSwish", [g.conv(h, cin, 1280, 1)])
    h = g.op("Flatten", [h], axis=1)
    g.linear(h, 1280, 1000, out="logits")
    return g.model("pplcnet_topology", "image", ["N", 3, 224, 224], "logits", ["N", 1000], opset=17)


def vit_s(seed: int = 0, depth: int = 12) -> onnx.ModelProto:
    """ViT-S/16's shape: width 384, 6 heads, MLP 1536 (GELU sites of d = 1536), `depth` blocks."""
    return vit(seed, width=384, depth=depth, heads=6)


def vit_s6(seed: int = 0) -> onnx.ModelProto:
    return vit_s(seed, depth=6)


MODELS = {"resnet18": resnet18, "resnet50": resnet50, "vit": vit, "mobilenetv2": mobilenetv2, "pplcnet": pplcnet,
          "vit_s": vit_s, "vit_s6": vit_s6}

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
