"""Shape inference that never fails a load and never keeps a declared shape the graph contradicts.

A `value_info` is a hint an exporter or a tool wrote. onnx's inference (non-strict) keeps it where its own result
differs, so a stale one (`[N, 4]` on a MatMul that writes `[N, 16]`) became a site's D. Strict inference tells
whether any hint is contradicted; only then is the graph inferred again without them, and a hint kept only where
the graph's own shapes say nothing against it (a contrib op's output, which onnx cannot infer).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import onnx

# Above this size shape inference runs on a file rather than on the in-memory proto.
INFER_BY_PATH_BYTES = 1 << 30
# Initializers of up to this many elements keep their values for shape inference: shape, axes and slice
# vectors, which inference reads; larger ones are weights, whose values no shape depends on.
SHAPE_VALUE_ELEMENTS = 128


def infer(model: onnx.ModelProto, path: Path | None, by_path: bool = False) -> tuple[onnx.ModelProto, bool, list]:
    """(the inferred model, whether inference ran, the notes: each value_info the graph contradicts).

    path: the model's file while the proto in memory is the file's (inferred from it when large, `by_path`);
    `model` is left as it was."""
    try:
        if not model.graph.value_info:
            return _run(model, path if by_path else None, strict=False), True, []
        try:
            return _run(model, path if by_path else None, strict=True), True, []
        except onnx.shape_inference.InferenceError as exc:
            if "existing" not in str(exc):  # an error of another kind: inferred as before, hints kept
                return _run(model, path if by_path else None, strict=False), True, []
        return _without_contradicted(model, by_path)
    except Exception:
        return model, False, []


def _without_contradicted(model: onnx.ModelProto, by_path: bool) -> tuple[onnx.ModelProto, bool, list]:
    """Inferred without the hints, then again with the hints its result does not contradict."""
    declared = list(model.graph.value_info)
    del model.graph.value_info[:]
    try:
        fresh = _run(model, None, strict=False, via_file=by_path)
        g = fresh.graph
        found = {vi.name: _dims(vi.type) for vi in (*g.input, *g.value_info, *g.output)}
        kept, notes = [], []
        for vi in declared:
            given, computed = _dims(vi.type), found.get(vi.name)
            if _agree(given, computed):
                kept.append(vi)
            else:
                notes.append(f"the model's value_info declares {vi.name} as [{', '.join(map(str, given))}], but its "
                             f"graph computes [{', '.join(map(str, computed))}]: the declaration is ignored")
        model.graph.value_info.extend(kept)
        return _run(model, None, strict=False, via_file=by_path), True, notes
    finally:
        del model.graph.value_info[:]
        model.graph.value_info.extend(declared)


def _dims(tp: onnx.TypeProto) -> list | None:
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tp.tensor_type.shape.dim]


def _agree(given: list | None, computed: list | None) -> bool:
    """No known dim of one differs from the other's (a symbolic or unknown dim agrees with anything)."""
    if given is None or computed is None:
        return True
    return len(given) == len(computed) and all(
        not (isinstance(a, int) and isinstance(b, int)) or a == b for a, b in zip(given, computed, strict=True))


def _run(model: onnx.ModelProto, path: Path | None, strict: bool, via_file: bool = False) -> onnx.ModelProto:
    """onnx's inference on the file at `path`, on a temporary file of `model` (via_file), or in memory."""
    if path is not None or via_file:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "inferred.onnx"
            if path is None:
                path = Path(tmp) / "model.onnx"
                path.write_bytes(model.SerializeToString())
            onnx.shape_inference.infer_shapes_path(str(path), str(out), strict_mode=strict)
            return onnx.load(str(out), load_external_data=False)
    return _without_weights(model, strict)


def _without_weights(model: onnx.ModelProto, strict: bool) -> onnx.ModelProto:
    """Shape inference with the weights' bytes held aside, put back into the result afterwards.

    Inference passes the model through protobuf both ways: on ResNet-18 (47 MB of weights) that cost 0.15 s of
    every run's start-up, for shapes the weights do not change. `model` is left as it was."""
    held = {i: t.raw_data for i, t in enumerate(model.graph.initializer)
            if t.HasField("raw_data") and math.prod(t.dims) > SHAPE_VALUE_ELEMENTS}
    try:
        for i in held:
            model.graph.initializer[i].ClearField("raw_data")
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=strict)
    finally:
        for i, data in held.items():
            model.graph.initializer[i].raw_data = data
    for i, data in held.items():
        inferred.graph.initializer[i].raw_data = data
    return inferred


def with_inputs(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto | None:
    """The graph's shapes when its inputs are `shapes` (name -> dims): inferred on a copy of the graph without its
    weights' bytes and without value_info, so that no symbolic dim of the file survives where the feeds fix it.
    None where inference fails. `model` is not touched."""
    copy = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
    g = copy.graph
    g.node.extend(model.graph.node)
    g.output.extend(model.graph.output)
    for t in model.graph.initializer:
        if math.prod(t.dims) > SHAPE_VALUE_ELEMENTS:  # a weight: its dims are all inference reads
            g.initializer.append(onnx.TensorProto(name=t.name, data_type=t.data_type, dims=t.dims))
        else:
            g.initializer.append(t)
    for vi in model.graph.input:
        vi = g.input.add(name=vi.name, type=vi.type)
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape
            dims.ClearField("dim")
            for d in shapes[vi.name]:
                dims.dim.add(dim_value=int(d))
    _fold_shape_math(g, list(copy.opset_import))
    try:  # data propagation: dims computed from Shape (a "same" padding of the fed size) become numbers
        return onnx.shape_inference.infer_shapes(copy, data_prop=True)
    except Exception:
        return None


# The integer arithmetic exporters compute pads and shapes with from constants alone (TorchScript's F.pad:
# ConstantOfShape, Concat, Reshape, Slice, Transpose, Cast). onnx's inference propagates none of it, so every dim
# past such a Pad was unknown: EfficientNet-Lite0 fed at 224x224 counted 0 of its 385 M MACs.
_SHAPE_MATH = {"Constant", "ConstantOfShape", "Concat", "Reshape", "Slice", "Transpose", "Cast", "Gather",
               "Unsqueeze", "Squeeze", "Flatten", "Identity", "Add", "Sub", "Mul", "Div", "Neg", "Ceil", "Floor",
               "Max", "Min", "Range", "Expand", "Equal", "Where", "Not", "Less", "Greater", "Mod", "Abs"}


def _fold_shape_math(graph: onnx.GraphProto, opsets: list) -> None:
    """Replace each node of `_SHAPE_MATH` that computes from small constants alone by its value (onnx's reference
    evaluator), in place; a node it cannot evaluate, or a large value, stays as it is."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer  # values on disk are weights: not read
             if math.prod(t.dims) <= SHAPE_VALUE_ELEMENTS and t.data_location != onnx.TensorProto.EXTERNAL}
    kept = []
    for node in graph.node:
        values = None
        if node.op_type in _SHAPE_MATH and node.domain in ("", "ai.onnx") and all(i == "" or i in known
                                                                                   for i in node.input) \
                and _small_output(node, known):
            values = _evaluate(node, {i: known[i] for i in node.input if i}, opsets, helper, ReferenceEvaluator)
        if values is None or any(v.size > SHAPE_VALUE_ELEMENTS for v in values):
            kept.append(node)
            continue
        for name, value in zip(node.output, values, strict=True):
            known[name] = value
            graph.initializer.append(numpy_helper.from_array(value, name))
    graph.ClearField("node")
    graph.node.extend(kept)


def _small_output(node, known: dict) -> bool:
    """Whether a node that makes its size from its inputs' values (a folded mask's ConstantOfShape([T, T]), an
    Expand, a Range) stays within SHAPE_VALUE_ELEMENTS: checked before evaluating, never allocated to be told."""
    try:
        if node.op_type in ("ConstantOfShape", "Expand"):
            shape = known[node.input[-1] if node.op_type == "ConstantOfShape" else node.input[1]]
            return math.prod(max(int(d), 0) for d in np.ravel(shape)) <= SHAPE_VALUE_ELEMENTS
        if node.op_type == "Range":
            start, limit, delta = (float(np.ravel(known[i])[0]) for i in node.input[:3])
            return delta != 0 and math.ceil((limit - start) / delta) <= SHAPE_VALUE_ELEMENTS
    except (KeyError, IndexError, ValueError, TypeError, OverflowError):
        return False
    return True


def _evaluate(node, feeds: dict, opsets: list, helper, evaluator) -> list | None:
    """A node's outputs from its constant inputs, under the model's opsets; None where it cannot be evaluated."""
    if node.op_type == "Constant" and any(a.name == "value" and math.prod(a.t.dims) > SHAPE_VALUE_ELEMENTS
                                          for a in node.attribute):
        return None  # a weight written as a Constant: no shape reads its values
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for n, v in feeds.items()]
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output]
    model = helper.make_model(helper.make_graph([node], "fold", inputs, outputs), opset_imports=opsets)
    try:
        return [np.asarray(v) for v in evaluator(model).run(None, feeds)]
    except Exception:
        return None
