"""The small models and plugin files many tests build, written once, inline in ONNX text format.

A test that needs a shape of its own writes it next to itself; the ones here are the shapes that several
files used to write again (a Relu/Tanh chain, a two-layer MLP with weights, a metric plugin file).
"""

from __future__ import annotations

import textwrap

import numpy as np
import onnx
from onnx import numpy_helper

from tests.conftest import parse

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def chain_text(*ops: str, width: int = 4, dims: str | None = None, dtype: str = "float", opset: int = 17) -> str:
    """`y = opK(...op1(x))` on [N, width] (or on [dims]): one site an op, intermediates named h, h1, h2, ..."""
    dims = dims or f"N, {width}"
    names = ["x", *("h" if i == 0 else f"h{i}" for i in range(len(ops) - 1)), "y"]
    body = "  ".join(f"{out} = {op}({inp})" for op, inp, out in zip(ops, names, names[1:], strict=False))
    return (f'<ir_version: 8, opset_import: ["" : {opset}]> '
            f"g ({dtype}[{dims}] x) => ({dtype}[{dims}] y) {{ {body} }}")


def chain(*ops: str, **kw) -> onnx.ModelProto:
    """The checked model of chain_text."""
    return parse(chain_text(*ops, **kw))


def save(model: onnx.ModelProto, path) -> str:
    """Write model to path; the path as the string the CLI is given."""
    onnx.save(model, path)
    return str(path)


def with_weights(text: str, full_check: bool = False, **weights: np.ndarray) -> onnx.ModelProto:
    """The model of text with the named arrays as initializers (text too long to carry them inline)."""
    model = onnx.parser.parse_model(text)
    model.graph.initializer.extend(numpy_helper.from_array(w, name) for name, w in weights.items())
    onnx.checker.check_model(model, full_check=full_check)
    return model


def mlp(rng: np.random.Generator, d_in: int = 8, hidden: int = 16, d_out: int = 4,
        full_check: bool = False) -> onnx.ModelProto:
    """MatMul, Add, Relu, MatMul, Tanh with random weights: two sites behind real layers."""
    return with_weights(HEADER + f""" g (float[N, {d_in}] x) => (float[N, {d_out}] y) {{
        h = MatMul(x, w1)
        a = Add(h, b1)
        r = Relu(a)
        o = MatMul(r, w2)
        y = Tanh(o)
    }}""", w1=rng.standard_normal((d_in, hidden)).astype(np.float32),
        b1=rng.standard_normal(hidden).astype(np.float32), w2=rng.standard_normal((hidden, d_out)).astype(np.float32),
        full_check=full_check)


PLUGIN_HEADER = textwrap.dedent('''
    import os, sys, time, threading
    import numpy as np
    from onnxaff.metrics import Metric
''')


def write_plugin(path, body: str) -> str:
    """A metric plugin file: the usual imports, then body (dedented)."""
    path.write_text(PLUGIN_HEADER + textwrap.dedent(body))
    return str(path)
