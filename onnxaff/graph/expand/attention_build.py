"""Standard-ONNX node building for the attention expansion: names, small constants, head reshapes, the core.

The core is the unfused export's arithmetic, scale·Q·Kᵀ + mask → Softmax → ·V, so the Softmax it writes is
found as the plain export's is. Its node is named after the fused node, which makes the site's id say where
it came from. Only small constants (shapes, split sizes, the scale, mask values) are added; weights stay the
initializers they were.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxaff.graph.names import Namer

# What onnxruntime writes for a masked score: the lowest finite value of the type (ONNX Attention's masks,
# and the contrib ops' causal mask); the contrib ops' padding masks use their mask_filter_value attribute.
LOWEST = {TensorProto.FLOAT: float(np.finfo(np.float32).min), TensorProto.FLOAT16: float(np.finfo(np.float16).min)}
NUMPY = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


class Builder:
    """New nodes and constants for one fused node, named `<label>/<what>` and unique in the graph."""

    def __init__(self, label: str, taken: set[str], opset: int, elem_type: int):
        self.label, self.opset, self.elem_type = label, opset, elem_type
        self.namer = Namer(taken, sep="~")
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def name(self, what: str) -> str:
        return self.namer.fresh(f"{self.label}/{what}")

    def op(self, op_type: str, inputs: list[str], what: str | None = None, outputs: int = 1, **attrs) -> str:
        """One node; its first output's name (the node is named as that output)."""
        outs = [self.name(f"{what or op_type}" if outputs == 1 else f"{what or op_type}_{k}") for k in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0], **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, what: str, value, dtype=None) -> str:
        array = np.asarray(value, dtype=dtype or NUMPY[self.elem_type])
        name = self.name(what)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def ints(self, what: str, values) -> str:
        return self.const(what, values, np.int64)

    def split(self, x: str, sizes: list[int], axis: int, what: str) -> list[str]:
        if self.opset >= 13:
            return self.op("Split", [x, self.ints(f"{what}_sizes", sizes)], what, outputs=len(sizes), axis=axis)
        return self.op("Split", [x], what, outputs=len(sizes), axis=axis, split=sizes)

    def heads(self, x: str, num_heads: int, what: str) -> str:
        """[B, S, N·h] → [B, N, S, h]."""
        split = self.op("Reshape", [x, self.ints(f"{what}_shape", [0, 0, num_heads, -1])], f"{what}_split")
        return self.op("Transpose", [split], what, perm=[0, 2, 1, 3])

    def merge(self, x: str, output: str) -> None:
        """[B, N, S, h] → [B, S, N·h], written to the fused node's output."""
        t = self.op("Transpose", [x], "context_t", perm=[0, 2, 1, 3])
        self.nodes.append(helper.make_node("Reshape", [t, self.ints("context_shape", [0, 0, -1])], [output],
                                           name=self.name("context")))

    def dim(self, x: str, axis: int, what: str) -> str:
        """A dimension of x as an int64 scalar."""
        shape = self.op("Shape", [x], f"{what}_shape")
        return self.op("Gather", [shape, self.ints(f"{what}_axis", axis)], what, axis=0)

    def causal(self, q: str, k: str) -> str:
        """Bool [S, L], true above the diagonal: key positions after the query's (no past state)."""
        zero, one = self.ints("zero", 0), self.ints("one", 1)
        rows = self.op("Range", [zero, self.dim(q, 2, "q_len"), one], "rows")
        cols = self.op("Range", [zero, self.dim(k, 2, "k_len"), one], "cols")
        rows = self.op("Reshape", [rows, self.ints("column", [-1, 1])], "rows_column")
        return self.op("Greater", [cols, rows], "future")

    def key_mask(self, mask: str, rank: int, filler: float, q: str, k: str) -> str:
        """The contrib ops' int mask (1 keep, 0 mask) as the additive mask the fused kernel adds to the [B, N, S, L]
        scores: 2-D [B, L] key padding, 3-D [B, S, L] per query, or 1-D lengths, where [B] is each example's
        key count (keys from it on masked) and [2B] adds start positions (keys before them masked)."""
        if rank == 1:
            keep = self._lengths(mask, q, k)
        else:
            keep = self.op("Greater", [mask, self.const("mask_zero", 0, np.int32)], "keep")
        add = self.op("Where", [keep, self.const("zero_f", 0.0), self.const("mask_filter", filler)], "mask_add")
        return self.unsqueeze(add, [1] if rank == 3 else [1, 2], "mask_bias")

    def unsqueeze(self, x: str, axes: list[int], what: str) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.ints(f"{what}_axes", axes)], what)
        return self.op("Unsqueeze", [x], what, axes=axes)

    def _lengths(self, mask: str, q: str, k: str) -> str:
        """Bool [B, L] from end positions [B] or end and start positions [2B], told apart at run time: the mask
        followed by B zeros holds the start positions (or those zeros) at [B, 2B)."""
        batch = self.op("Reshape", [self.dim(q, 0, "batch"), self.ints("one_d", [1])], "batch_1d")
        zeros = self.op("ConstantOfShape", [batch], "zero_starts",
                        value=numpy_helper.from_array(np.zeros(1, np.int64), "zero"))
        ends = self.op("Cast", [mask], "mask_index_64", to=TensorProto.INT64)
        padded = self.op("Concat", [ends, zeros], "mask_index_padded", axis=0)
        twice = self.op("Add", [batch, batch], "batch_2")
        end = self.op("Slice", [padded, self.ints("start", [0]), batch], "end_positions")
        start = self.op("Slice", [padded, batch, twice], "start_positions")
        end, start = self.unsqueeze(end, [1], "end_column"), self.unsqueeze(start, [1], "start_column")
        cols = self.op("Range", [self.ints("zero_k", 0), self.dim(k, 2, "k_len"), self.ints("one_k", 1)], "keys")
        before_start = self.op("Less", [cols, start], "before_start")
        return self.op("And", [self.op("Less", [cols, end], "before_end"),
                               self.op("Not", [before_start], "from_start")], "keep")

    def attend(self, q: str, k: str, v: str, scale: str, mask: str | None, causal: tuple[float, bool] | None,
               zero_masked_rows: bool = False) -> str:
        """softmax(scale·Q·Kᵀ + mask)·V over [B, N, S, h] tensors.

        causal: (value, replace): the score above the diagonal gets value, replacing the mask there (replace) or
        added to it, as the fused op does. zero_masked_rows: a query whose every score is masked (the lowest
        float) attends to nothing, as onnxruntime's ONNX Attention kernel has it; after the softmax, so the
        site is the plain Softmax still.
        """
        kt = self.op("Transpose", [k], "key_t", perm=[0, 1, 3, 2])
        scores = self.op("Mul", [self.op("MatMul", [q, kt], "qk"), scale], "scores")
        if causal is not None:
            value, replace = causal
            future = self.causal(q, k)
            fill = self.const("causal_fill", value)
            if mask is None or replace:
                mask = self.op("Where", [future, fill, mask or self.const("zero_c", 0.0)], "causal_mask")
            else:
                mask = self.op("Add", [mask, self.op("Where", [future, fill, self.const("zero_c", 0.0)])],
                               "causal_mask")
        if mask is not None:
            scores = self.op("Add", [scores, mask], "masked_scores")
        probs = self.op("Softmax", [scores], "softmax", axis=-1)
        if zero_masked_rows:
            top = self.op("ReduceMax", [scores, self.ints("last_axis", [-1])], "row_max", keepdims=1)
            seen = self.op("Greater", [top, self.const("masked", LOWEST[self.elem_type])], "row_seen")
            probs = self.op("Where", [seen, probs, self.const("zero_p", 0.0)], "attended")
        return self.op("MatMul", [probs, v], "context")
