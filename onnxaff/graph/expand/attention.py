"""Fused attention rewritten as the unfused export writes it, so that its softmax is a site.

onnxruntime's transformer optimizer fuses attention into `com.microsoft` Attention (one QKV projection) or
MultiHeadAttention (Q, K, V given), and the dynamo exporter writes SDPA at opset 23 as ONNX `Attention`: the
softmax is then inside one node. Each such node is replaced by projection (contrib Attention), head split,
scale·Q·Kᵀ + mask, Softmax (named `<attention node>/softmax`), ·V and head merge. Masked scores get the value
onnxruntime's CPU kernel writes: the `mask_filter_value` attribute (−10000 by default) for a contrib op's
mask_index (1-D lengths or end/start positions, 2-D key padding, 3-D per query: the forms that kernel runs; the
optimiser hands each Attention EmbedLayerNormalization's 1-D lengths, so that op's outputs are typed here), the
type's lowest finite value for its causal mask and for all of ONNX Attention's masks.
onnxruntime's ONNX Attention also gives a query whose every key is masked zero weights (a Where after the
Softmax). A form not rewritten (past state, attention bias, rotary, softcap, …) is left fused; `refusal` says why, and
discovery lists the node as a skipped softmax site with that reason.
"""

from __future__ import annotations

import math

import onnx
from onnx import TensorProto

from onnxaff.graph.expand.attention_build import LOWEST, Builder

NAME = "attention"
FUSED = {("com.microsoft", "Attention"), ("com.microsoft", "MultiHeadAttention"), ("", "Attention"),
         ("ai.onnx", "Attention")}
# Inputs and attributes the rewrite reproduces; any other one given makes the node a refusal.
_INPUTS = {"Attention": ("input", "weights", "bias", "mask_index"),
           "MultiHeadAttention": ("query", "key", "value", "bias", "key_padding_mask"),
           "": ("Q", "K", "V", "attn_mask")}
_ALL_INPUTS = {"Attention": ("input", "weights", "bias", "mask_index", "past", "attention_bias",
                             "past_sequence_length"),
               "MultiHeadAttention": ("query", "key", "value", "bias", "key_padding_mask", "attention_bias",
                                      "past_key", "past_value", "past_sequence_length", "cache_indirection"),
               "": ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")}
_ATTRS = {"Attention": {"num_heads", "unidirectional", "qkv_hidden_sizes", "scale", "mask_filter_value"},
          "MultiHeadAttention": {"num_heads", "unidirectional", "scale", "mask_filter_value"},
          "": {"is_causal", "scale", "q_num_heads", "kv_num_heads", "softmax_precision"}}
# Attributes whose default means "off": given at that value they are no refusal.
_OFF = {"do_rotary": 0, "past_present_share_buffer": 0, "rotary_embedding_dim": 0, "softcap": 0.0,
        "qk_matmul_output_mode": 0, "left_window_size": -1, "right_window_size": -1}


def is_fused(node: onnx.NodeProto) -> bool:
    return (node.domain, node.op_type) in FUSED


def label(node: onnx.NodeProto) -> str:
    """The fused node as a site id names it: its name, else op type and output (as `GraphView.base_id`)."""
    return node.name or f"{node.op_type}:{node.output[0]}"


def _kind(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain == "com.microsoft" else ""


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class Types:
    """Element type and shape of a tensor, from the graph's declarations, else from one shape inference."""

    def __init__(self, graph: onnx.GraphProto, model: onnx.ModelProto | None = None):
        self.model, self.infos, self.inferred = model, {}, model is None
        self._read(graph)
        self._embeddings(graph)

    def _read(self, graph: onnx.GraphProto) -> None:
        for vi in (*graph.input, *graph.output, *graph.value_info):
            t = vi.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] \
                if t.HasField("shape") else None
            self.infos[vi.name] = (t.elem_type, shape)
        for init in graph.initializer:
            self.infos[init.name] = (init.data_type, list(init.dims))

    def _embeddings(self, graph: onnx.GraphProto) -> None:
        """EmbedLayerNormalization's outputs, which onnx's shape inference does not type: the embeddings
        [B, S, W] (and their sum) in the tables' type, and the mask index, 1-D int32 lengths [B], that the
        optimiser hands each Attention as its mask."""
        for node in graph.node:
            if (node.domain, node.op_type) != ("com.microsoft", "EmbedLayerNormalization"):
                continue
            elem = self.infos.get(node.input[2], (TensorProto.FLOAT, None))[0] if len(node.input) > 2 else 0
            for k, name in enumerate(node.output):
                if name and name not in self.infos:
                    self.infos[name] = (TensorProto.INT32, [None]) if k == 1 else (elem, [None] * 3)

    def get(self, name: str) -> tuple[int, list | None]:
        if name not in self.infos and not self.inferred:
            self.inferred = True
            try:
                self._read(onnx.shape_inference.infer_shapes(self.model).graph)
            except Exception:
                pass  # the node is then refused for an unknown shape, with the reason
        return self.infos.get(name, (0, None))

    def derive(self, node: onnx.NodeProto) -> None:
        """The fused node's output: its type and rank (what a later attention node fed by it asks)."""
        if node.output[0] not in self.infos:
            rank = self.rank(node.input[0]) if _kind(node) == "" else 3
            self.infos[node.output[0]] = (element_type(node, self), None if rank is None else [None] * rank)

    def rank(self, name: str) -> int | None:
        shape = self.get(name)[1]
        return None if shape is None else len(shape)


def refusal(node: onnx.NodeProto, types: Types, opset: int) -> str | None:
    """Why this fused attention node is not rewritten; None when it is."""
    kind, what = _kind(node), f"{node.domain or 'ONNX'} {node.op_type}"
    given = [n for n, name in zip(_ALL_INPUTS[kind], node.input, strict=False) if name and n not in _INPUTS[kind]]
    if given:
        return f"{what} with input {', '.join(given)}: not rewritten into standard ONNX"
    outs = [k for k, name in enumerate(node.output) if name and k > 0]
    if outs:
        return f"{what} with outputs beyond the first (present state or scores): not rewritten"
    attrs = _attrs(node)
    odd = sorted(a for a, v in attrs.items() if a not in _ATTRS[kind] and _OFF.get(a, object()) != v)
    if odd:
        return f"{what} with attribute {', '.join(odd)}: not rewritten into standard ONNX"
    if opset < 11:
        return f"{what} in a model of opset {opset}: the rewrite needs opset 11 or later"
    elem = element_type(node, types)
    if elem not in LOWEST:
        return f"{what} on {TensorProto.DataType.Name(elem)}: only float and float16 are rewritten"
    if kind == "Attention":
        return _contrib_attention_refusal(node, types, attrs, what)
    if kind == "MultiHeadAttention":
        return _mha_refusal(node, types, what)
    return _onnx_refusal(node, types, attrs, what)


def element_type(node: onnx.NodeProto, types: Types) -> int:
    """The float type the node computes in: its first typed float input (weights, bias), else float.

    Behind other contrib ops (SkipLayerNormalization, ...) shape inference types nothing; the fused CPU
    kernels are float first, and a wrong guess fails loudly when the model is run, never silently.
    """
    masks = {3} if _kind(node) == "" else {3, 4}
    for k, name in enumerate(node.input):
        if name and k not in masks and types.get(name)[0]:
            return types.get(name)[0]
    return TensorProto.FLOAT


def _mask_refusal(node: onnx.NodeProto, k: int, types: Types, what: str) -> str | None:
    if len(node.input) <= k or not node.input[k]:
        return None
    rank = types.rank(node.input[k])
    if rank in (1, 2, 3):
        return None
    if rank == 4:  # onnxruntime's CPU kernels refuse it too: nothing to check a rewrite against
        return f"{what} with a 4-D (Megatron) mask: not rewritten, only 1-D lengths, 2-D and 3-D masks are"
    return (f"{what} with a mask of unknown rank (shape inference could not type it): only 1-D lengths, 2-D and "
            "3-D masks are rewritten")


def _contrib_attention_refusal(node, types: Types, attrs: dict, what: str) -> str | None:
    if types.rank(node.input[0]) not in (3, None):
        return f"{what} whose input is not 3-D [batch, sequence, hidden]"
    width = types.get(node.input[1])[1]
    if not attrs.get("qkv_hidden_sizes") and (width is None or len(width) != 2 or not width[1]):
        return f"{what} whose weights' width is unknown"
    return _mask_refusal(node, 3, types, what)


def _mha_refusal(node, types: Types, what: str) -> str | None:
    given = [n for n in node.input[:3] if n]
    if len(given) < 3 or any(types.rank(n) not in (3, None) for n in given):
        return f"{what} with packed or 4-D query/key/value: only separate 3-D query, key and value are rewritten"
    return _mask_refusal(node, 4, types, what)


def _onnx_refusal(node, types: Types, attrs: dict, what: str) -> str | None:
    ranks = {types.rank(n) for n in node.input[:3]}
    if ranks not in ({3}, {4}):
        return f"{what} with Q, K, V of ranks {sorted(map(str, ranks))}: only all 3-D or all 4-D are rewritten"
    if ranks == {3}:
        if not attrs.get("q_num_heads") or not attrs.get("kv_num_heads"):
            return f"{what} on 3-D inputs without q_num_heads and kv_num_heads"
        heads = attrs["q_num_heads"], attrs["kv_num_heads"]
    else:
        heads = tuple(types.get(n)[1][1] for n in node.input[:2])
    if None in heads:
        return f"{what} on 4-D inputs whose head counts are unknown"
    if heads[0] != heads[1]:
        return f"{what} with grouped query heads ({heads[0]} query, {heads[1]} key/value heads): not rewritten"
    if len(node.input) > 3 and node.input[3]:
        mask = types.get(node.input[3])
        if mask[0] not in (TensorProto.BOOL, types.get(node.input[0])[0]):
            return f"{what} with a mask of an unexpected type"
    return None


def _rewrite(node: onnx.NodeProto, b: Builder, types: Types) -> None:
    kind, attrs = _kind(node), _attrs(node)
    ins = [*node.input, *[""] * 7]
    if kind == "":
        return _rewrite_onnx(node, b, types, attrs, ins)
    heads, filler = attrs["num_heads"], attrs.get("mask_filter_value", -10000.0)
    if kind == "Attention":
        qkv = b.op("MatMul", ins[:2], "qkv")
        if ins[2]:
            qkv = b.op("Add", [qkv, ins[2]], "qkv_bias")
        sizes = list(attrs.get("qkv_hidden_sizes") or [types.get(ins[1])[1][1] // 3] * 3)
        q, k, v = b.split(qkv, sizes, -1, "qkv_split")
        mask = ins[3]
    else:
        q, k, v = ins[:3]
        if ins[3]:  # [query width | key width (the same) | value width], cut at the query's width at run time
            width = b.op("Gather", [b.op("Shape", [q], "query_shape"), b.ints("last", [2])], "query_width", axis=0)
            twice = b.op("Add", [width, width], "query_width_2")
            bq = b.op("Slice", [ins[3], b.ints("start", [0]), width], "bias_query")
            bk = b.op("Slice", [ins[3], width, twice], "bias_key")
            bv = b.op("Slice", [ins[3], twice, b.ints("end", [2**62])], "bias_value")
            q, k, v = b.op("Add", [q, bq], "query_bias"), b.op("Add", [k, bk], "key_bias"), b.op("Add", [v, bv])
        mask = ins[4]
        sizes = [((types.get(ins[0])[1] or [0])[-1] or 0)]
    q, k, v = b.heads(q, heads, "query"), b.heads(k, heads, "key"), b.heads(v, heads, "value")
    scale = attrs.get("scale") or (1.0 / math.sqrt(sizes[0] // heads) if sizes[0] else None)
    scale = b.const("scale", scale) if scale else _dynamic_scale(b, q)
    mask = b.key_mask(mask, types.rank(mask), filler, q, k) if mask else None
    causal = (LOWEST[b.elem_type], True) if attrs.get("unidirectional") else None
    b.merge(b.attend(q, k, v, scale, mask, causal), node.output[0])


def _dynamic_scale(b: Builder, q: str) -> str:
    """1/√h from Q's [B, N, S, h] shape at run time (h unknown when the graph is read)."""
    h = b.op("Cast", [b.dim(q, 3, "head_size")], "head_size_f", to=b.elem_type)
    return b.op("Reciprocal", [b.op("Sqrt", [h], "sqrt_head_size")], "scale")


def _rewrite_onnx(node, b: Builder, types: Types, attrs: dict, ins: list[str]) -> None:
    q, k, v = ins[:3]
    three_d = types.rank(q) == 3
    if three_d:
        q, k = b.heads(q, attrs["q_num_heads"], "query"), b.heads(k, attrs["kv_num_heads"], "key")
        v = b.heads(v, attrs["kv_num_heads"], "value")
    scale = b.const("scale", attrs["scale"]) if attrs.get("scale") else _dynamic_scale(b, q)
    mask = ins[3] or None
    if mask and types.get(mask)[0] == TensorProto.BOOL:
        mask = b.op("Where", [mask, b.const("zero_f", 0.0), b.const("mask_filter", LOWEST[b.elem_type])], "mask_add")
    causal = (LOWEST[b.elem_type], True) if attrs.get("is_causal") else None
    context = b.attend(q, k, v, scale, mask, causal, zero_masked_rows=True)
    if three_d:
        b.merge(context, node.output[0])
    else:
        b.nodes.append(onnx.helper.make_node("Identity", [context], [node.output[0]], name=b.name("output")))


def apply(model: onnx.ModelProto) -> list[str]:
    """Rewrite every fused attention node it can; a note per node refused, one for all rewritten."""
    graph = model.graph
    if not any(is_fused(n) for n in graph.node):
        return []
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    types = Types(graph, model)
    taken = {n for node in graph.node for n in (*node.input, *node.output, node.name)}
    taken |= {t.name for t in graph.initializer} | {vi.name for vi in (*graph.input, *graph.output)}
    new_nodes, notes, rewritten = [], [], []
    for node in graph.node:
        if not is_fused(node):
            new_nodes.append(node)
            continue
        why = refusal(node, types, opset)
        types.derive(node)
        if why is not None:
            new_nodes.append(node)
            notes.append(f"{label(node)}: {why}; its softmax is listed as skipped")
            continue
        b = Builder(label(node), taken, opset, element_type(node, types))
        _rewrite(node, b, types)
        new_nodes += b.nodes
        graph.initializer.extend(b.initializers)
        rewritten.append(f"{node.domain + '.' if node.domain else ''}{node.op_type}")
    del graph.node[:]
    graph.node.extend(new_nodes)
    if rewritten:  # one line for a 24-layer model, not 24
        kinds = ", ".join(f"{op} ×{rewritten.count(op)}" for op in sorted(set(rewritten)))
        notes.append(f"{len(rewritten)} fused attention node(s) rewritten into standard ONNX for analysis (their "
                     f"softmax is a site): {kinds}")
    return notes
