"""ONNX's own node tests for every activation op, each single node paired with its `_expanded` body.

`onnx.backend.test.case.node` builds them offline (the modules of OPS, imported one by one). Inputs
after the first (PRelu's slope, Clip's bounds) become initializers with the test's own values: a site's
parameters are constants. float16 and bfloat16 twins of every float32 pair are the same graphs retyped (the
expansions spell every constant as CastLike, so they are type-generic); onnx ships celu's natively.
"""

from __future__ import annotations

import functools
import re
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

OPS = ("relu", "leakyrelu", "prelu", "elu", "selu", "celu", "sigmoid", "hardsigmoid", "hardswish", "tanh",
       "softplus", "softsign", "gelu", "mish", "thresholdedrelu", "softmax", "logsoftmax", "clip", "swish")
DTYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass
class Pair:
    name: str  # the expanded test's name, plus the dtype when retyped
    dtype: str
    single: onnx.ModelProto
    expanded: onnx.ModelProto
    x: np.ndarray  # the test's first input (float32)


@functools.cache
def _cases() -> dict:
    """The node test cases of OPS only: each module of onnx.backend.test.case.node makes its cases (and their
    `_expanded` twins) as it is imported, so importing these few, not all of them as collect_testcases() does,
    takes a tenth of the time (0.4 s, not 6)."""
    import importlib

    import onnx.backend.test.case.node as node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in OPS:
            importlib.import_module(f"{node.__name__}.{op}")
    return {c.name: c for c in node._NodeTestCases}


def _op_of(name: str) -> str | None:
    base = name[len("test_"):]
    return max((op for op in OPS if base == op or base.startswith(op + "_")), key=len, default=None)


def _constantize(model: onnx.ModelProto, inputs: list, dtype: int) -> onnx.ModelProto:
    """Graph inputs after the first become initializers holding the test's values, in `dtype`."""
    model = retype(model, dtype)
    g = model.graph
    for vi, value in list(zip(g.input, inputs, strict=False))[1:]:
        value = np.asarray(value, dtype=np.float32)
        g.initializer.append(helper.make_tensor(vi.name, dtype, value.shape, value.reshape(-1).tolist()))
    keep = [vi for vi in g.input if vi.name not in {t.name for t in g.initializer}]
    del g.input[:]
    g.input.extend(keep)
    return model


def retype(model: onnx.ModelProto, dtype: int) -> onnx.ModelProto:
    """The same model with its float32 inputs, outputs and value infos in `dtype`."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = dtype
    return model


def pairs() -> list[Pair]:
    """Every (single node, expanded) pair of a float activation test, in float32, float16 and bfloat16."""
    cases, out = _cases(), []
    for name, case in cases.items():
        twin = _EXPANDED.sub("", name)
        if twin == name or _op_of(name) is None or twin not in cases:
            continue
        inputs = case.data_sets[0][0]
        x = np.asarray(inputs[0])
        native = next((d for d in ("bfloat16", "float16") if d in name), None)
        if native is None and x.dtype != np.float32:
            continue  # integer Clip variants: not a float activation
        for dtype in [native] if native else list(DTYPES):
            code = DTYPES[dtype]
            single = _constantize(cases[twin].model, inputs, code)
            expanded = _constantize(case.model, inputs, code)
            label = name if native or dtype == "float32" else f"{name} ({dtype})"
            out.append(Pair(label, dtype, single, expanded, x.astype(np.float32)))
    return out
