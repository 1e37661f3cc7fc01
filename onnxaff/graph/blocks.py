"""Block discovery: residual, attention and feed-forward (MLP) blocks, read off the graph alone.

A block is, like a site, one input tensor and one output tensor, but around a whole sub-network:
trajectory metrics (docs/metrics.md) follow the residual stream block by block, and block-level scores
compare what a block does as a whole with what its activations do. Discovery is structural only: a
tensor is *data* when it depends on a graph input, *static* when it does not (weights, constants,
and everything computed from them or from Shape), and the three kinds are:

- residual: an Add/Sum of two or more data tensors of the output's shape that all derive from one
  tensor S (their nearest common ancestor), where the paths from S hold at least one weighted op
  (Conv, MatMul, ...) or activation. Input S, output the Add's output. A projection shortcut
  (Conv+BN on the skip path) still counts; bias adds (one data operand), broadcast adds (a mask, a
  pooled context), mask adds on attention scores and Adds inside activation patterns do not.
  onnxruntime's fused SkipLayerNormalization counts, with its sum (output 3) as the output.
- attention: a Softmax between a MatMul of two data tensors (Q·Kᵀ, then scale or mask) and a MatMul
  with V, where Q, K and V each go back to one projection (MatMul/Gemm with a constant weight, fused
  QKV with Split/Slice/Gather included) of the same tensor X; or one fused node (com.microsoft
  Attention / MultiHeadAttention / GroupQueryAttention, ai.onnx Attention). Input X, output the
  output projection (bias Add included) after the heads are merged again.
- mlp: projection (+bias) → one elementwise activation site (single node or decomposed, as
  `discover_sites` finds it; optionally gated, act(x·W1)·(x·W3)) → projection (+bias), whose output
  feeds no activation: a feed-forward that ends linearly, as in transformers. A stack of dense
  layers with activations between them (an MLP classifier) therefore has no mlp block.

Attention and mlp boundaries are moved across pure layout ops (Reshape, Transpose, ...) that only
the block uses, so that the block's tensors are the module's own (PyTorch's nn.MultiheadAttention
exports its batch_first transposes inside the block). Kinds are found independently and may nest:
a pre-norm transformer layer is two residual blocks, one around the attention and one around the mlp.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field

import onnx

from onnxaff.graph.load import default_opset
from onnxaff.graph.sites import Site, discover_sites
from onnxaff.graph.view import GraphView

KINDS = ("residual", "attention", "mlp")

_DEFAULT_DOMAINS = ("", "ai.onnx")
# A linear map of one data tensor by constant weights.
_PROJECTIONS = {
    "MatMul", "Gemm", "Einsum", "FusedMatMul", "MatMulNBits", "MatMulInteger", "QLinearMatMul",
    "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
}
# Fused attention nodes: the ones that project their input themselves, and the ones given Q, K, V.
_FUSED_ON_INPUT = {"Attention", "PackedAttention", "QAttention", "LongformerAttention"}  # com.microsoft
_FUSED_ON_QKV = {
    "MultiHeadAttention", "GroupQueryAttention", "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention",
    "SparseAttention",
}  # com.microsoft; ai.onnx Attention (opset 23) also takes projected Q, K, V
# onnxruntime fusions: residual sum + LayerNorm (the sum is output 3 when exported), bias + activation.
_SKIP_NORMS = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}
_FUSED_ACTIVATIONS = {"BiasGelu": "gelu", "FastGelu": "gelu_tanh", "Gelu": "gelu", "QuickGelu": "quick_gelu"}
# Ops that mix features with learned weights: a residual branch holds at least one (or an activation).
_MIXING = _PROJECTIONS | _FUSED_ON_INPUT | _FUSED_ON_QKV | {
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "NhwcConv", "FusedConv", "LSTM", "GRU", "RNN",
}
# Ops that only move or retype values.
_VALUE_PRESERVING = {"Identity", "Cast", "Dropout"}
_LAYOUT = _VALUE_PRESERVING | {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"}
_SHAPE_ONLY = {"Shape", "Size"}
# From Q, K or V up to their projection: head split, scaling, bias, rotary embedding, KV-cache concat.
_TO_PROJECTION = _LAYOUT | {"Gather", "Split", "Slice", "Concat", "Mul", "Div", "Add", "Sub", "Neg", "Expand", "Tile"}
# Between the scores product and the Softmax (scale, mask); between the Softmax and the product with V.
_SCORE_OPS = {"Mul", "Div", "Add", "Sub", "Where", "Cast", "Identity", "Reshape", "Max", "Min", "Clip"}
_WEIGHT_OPS = {"Dropout", "Cast", "Identity", "Reshape", "Where"}
_PAIR_PRODUCTS = {"MatMul", "Einsum"}  # Q·Kᵀ and weights·V: products of two data tensors
_MAX_WALK = 64  # nodes visited per upward or downward search: blocks are local structures
_MAX_CONNECTOR = 24  # nodes allowed between two chained residual blocks (norms, activations)


@dataclass
class Block:
    """A sub-network between one input tensor and one output tensor: residual, attention or mlp."""

    index: int
    id: str
    kind: str
    input: str
    output: str
    nodes: list[str]
    op_types: list[str]
    status: str = "ok"
    reason: str = ""
    input_shape: list | None = None
    output_shape: list | None = None
    params: dict = field(default_factory=dict)
    node_indices: list[int] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("node_indices")
        return d

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class _Found:
    kind: str
    input: str
    output: str
    key: int  # the node that names the block: the residual Add, the output projection (or its bias Add)
    params: dict


class _Graph:
    """GraphView plus the data/static split and the bounded walks block discovery needs."""

    def __init__(self, view: GraphView):
        self.view = view
        self.nodes = view.nodes
        self.order = view.order
        self.static: set[str] = set(view.initializers)
        for i in sorted(range(len(self.nodes)), key=self.order.__getitem__):
            node = self.nodes[i]
            ins = [n for n in node.input if n]
            if node.op_type in _SHAPE_ONLY or all(n in self.static for n in ins):
                self.static.update(n for n in node.output if n)
        # A fused SkipLayerNormalization computes its sum (output 3) first and normalises it into
        # output 0: inside the node the other outputs derive from the sum, not from the node's inputs.
        self.derived: dict[str, list[str]] = {}
        self.parent: dict[str, str] = {}
        for node in self.nodes:
            if node.domain == "com.microsoft" and node.op_type in _SKIP_NORMS and len(node.output) > 3:
                total = node.output[3]
                if total:
                    self.derived[total] = [o for o in node.output[:3] if o]
                    self.parent.update((o, total) for o in node.output[:3] if o)

    def data_inputs(self, i: int) -> list[str]:
        """The node's inputs that depend on a graph input, each once, in input order."""
        out: list[str] = []
        for n in self.nodes[i].input:
            if n and n not in self.static and n not in out:
                out.append(n)
        return out

    def parents(self, name: str) -> list[str]:
        """The data tensors `name` is computed from."""
        if name in self.parent:
            return [self.parent[name]]
        p = self.view.producer.get(name)
        return [] if p is None else self.data_inputs(p)

    def tensor_order(self, name: str) -> int:
        """Forward position of a tensor's producer (×2: a fused sum comes before its normalised form)."""
        p = self.view.producer.get(name)
        return -1 if p is None else 2 * self.order[p] + (name in self.parent)

    def users(self, name: str) -> list[int]:
        """Consumers that read values, not only the shape."""
        return [c for c in self.view.consumers.get(name, []) if self.nodes[c].op_type not in _SHAPE_ONLY]

    def single_user(self, name: str) -> int | None:
        users = self.users(name)
        if len(users) != 1 or name in self.view.graph_outputs:
            return None
        return users[0]

    def op(self, i: int) -> str:
        """Op type, qualified by domain outside the default one (com.microsoft.Attention)."""
        node = self.nodes[i]
        return node.op_type if node.domain in _DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"

    def is_projection(self, i: int) -> bool:
        node = self.nodes[i]
        return node.op_type in _PROJECTIONS and len(self.data_inputs(i)) == 1 and bool(node.output)

    def bias_add(self, name: str) -> int | None:
        """The Add that only adds a constant to `name`, when it is its single user."""
        c = self.single_user(name)
        if c is None or self.op(c) != "Add" or self.data_inputs(c) != [name]:
            return None
        return c

    def through_bias(self, name: str, key: int) -> tuple[str, int]:
        b = self.bias_add(name)
        return (self.nodes[b].output[0], b) if b is not None else (name, key)

    def common_source(self, tensors: list[str], limit: int = 20000) -> str | None:
        """The latest tensor (in forward order) that every one of `tensors` derives from, or None.

        Walks the data ancestors in decreasing forward order, so when a tensor is popped every
        path to it from the start tensors is known: the first one reached from all of them is the
        nearest common ancestor.
        """
        full = (1 << len(tensors)) - 1
        mask: dict[str, int] = {}
        for k, t in enumerate(tensors):
            mask[t] = mask.get(t, 0) | (1 << k)
        heap = [(-self.tensor_order(t), t) for t in mask]
        heapq.heapify(heap)
        for _ in range(limit):
            if not heap:
                return None
            _, t = heapq.heappop(heap)
            m = mask[t]
            if m == full:
                return t
            for u in self.parents(t):
                if u not in mask:
                    mask[u] = m
                    heapq.heappush(heap, (-self.tensor_order(u), u))
                else:
                    mask[u] |= m
        return None

    def between(self, src: str, dst: str) -> set[int]:
        """Nodes on some path from `src` to `dst` (shape computations feeding the path included)."""
        end = self.view.producer.get(dst)
        if end is None:
            return set()
        hi = self.order[end]
        fwd: set[int] = set()
        starts = [src, *self.derived.get(src, [])]
        stack = [c for t in starts for c in self.view.consumers.get(t, []) if self.order[c] <= hi]
        while stack:
            n = stack.pop()
            if n in fwd:
                continue
            fwd.add(n)
            for o in self.nodes[n].output:
                stack.extend(c for c in self.view.consumers.get(o, []) if self.order[c] <= hi and c not in fwd)
        if end not in fwd:
            return set()
        inside: set[int] = set()
        stack = [end]
        while stack:
            n = stack.pop()
            if n in inside or n not in fwd:
                continue
            inside.add(n)
            for name in self.nodes[n].input:
                p = self.view.producer.get(name)
                if p is not None and p not in inside:
                    stack.append(p)
        return inside

    def projection_source(self, name: str) -> str | None:
        """The one tensor that `name` is a projection of (through head split, scale, bias, RoPE), else None.

        Paths that end without a projection (a graph input such as position ids, a cache) are
        ignored; two different projected tensors, or none, give None.
        """
        found: set[str] = set()
        seen: set[str] = set()
        stack = [name]
        while stack and len(seen) < _MAX_WALK:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            p = self.view.producer.get(t)
            if p is None:
                continue
            if self.is_projection(p):
                found.update(self.data_inputs(p))
            elif self.op(p) in _TO_PROJECTION:
                stack.extend(self.data_inputs(p))
        return next(iter(found)) if len(found) == 1 else None

    def scores_product(self, softmax: int) -> int | None:
        """The nearest MatMul/Einsum of two data tensors upstream of a Softmax, through scale and mask ops."""
        best: int | None = None
        stack, seen = list(self.data_inputs(softmax)), set()
        while stack and len(seen) < _MAX_WALK:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            p = self.view.producer.get(t)
            if p is None:
                continue
            if self.op(p) in _PAIR_PRODUCTS and len(self.data_inputs(p)) == 2:
                if best is None or self.order[p] > self.order[best]:
                    best = p
            elif self.op(p) in _SCORE_OPS:
                stack.extend(self.data_inputs(p))
        return best

    def values_product(self, softmax: int) -> int | None:
        """The MatMul/Einsum that applies the attention weights to V (weights as its first operand)."""
        t = self.nodes[softmax].output[0]
        for _ in range(8):
            users = self.users(t)
            for c in users:  # other users (weights averaged over heads for need_weights) are allowed
                data = self.data_inputs(c)
                if self.op(c) in _PAIR_PRODUCTS and len(data) == 2 and data[0] == t:
                    return c
            steps = [c for c in users if self.op(c) in _WEIGHT_OPS]
            if len(steps) != 1:
                return None
            t = self.nodes[steps[0]].output[0]
        return None

    def out_projection(self, name: str) -> tuple[str, int] | None:
        """(output, key node) of the projection after the heads are merged (Transpose/Reshape/Concat)."""
        t = name
        for _ in range(16):
            c = self.single_user(t)
            if c is None:
                return None
            if self.is_projection(c) and self.data_inputs(c) == [t]:
                return self.through_bias(self.nodes[c].output[0], c)
            if self.op(c) not in _LAYOUT | {"Concat"}:
                return None
            t = self.nodes[c].output[0]
        return None

    def extend(self, x: str, out: str) -> tuple[str, str]:
        """Move a block's ends across layout ops that only the block uses (module boundaries)."""
        inside = self.between(x, out)
        for _ in range(16):
            p = self.view.producer.get(x)
            if p is None or x in self.view.graph_outputs or self.op(p) not in _LAYOUT:
                break
            data = self.data_inputs(p)
            if len(data) != 1 or not set(self.view.consumers.get(x, [])) <= inside:
                break
            x = data[0]
            inside = self.between(x, out)
        for _ in range(16):
            c = self.single_user(out)
            if c is None or self.op(c) not in _LAYOUT or self.data_inputs(c) != [out]:
                break
            out = self.nodes[c].output[0]
        return x, out


def _residual_blocks(g: _Graph, site_nodes: set[int], score_nodes: set[int]) -> list[_Found]:
    found = []
    for i, node in enumerate(g.nodes):
        fused = node.domain == "com.microsoft" and node.op_type in _SKIP_NORMS
        if not fused and (g.op(i) not in ("Add", "Sum") or i in site_nodes or i in score_nodes):
            continue  # Adds inside an activation pattern, or adding a mask to attention scores
        if not node.output or not node.output[0]:
            continue
        data = g.data_inputs(i)
        out = node.output[0]
        if fused:  # input + skip (+ constant bias); the sum itself only when output 3 is exported
            data = [t for t in node.input[:2] if t and t not in g.static]
            out = node.output[3] if len(node.output) > 3 and node.output[3] else out
        if len(data) < 2:
            continue  # a bias add, or x + x
        out_shape = g.view.shape(out)
        if out_shape is not None and any(
            (shape := g.view.shape(t)) is not None and not _dims_compatible(shape, out_shape) for t in data
        ):
            continue  # an operand is broadcast: a mask or a per-channel term, not a stream plus a branch
        src = g.common_source(data)
        if src is None:
            continue  # two unrelated streams (embeddings of two inputs, a mask)
        inside = g.between(src, out)
        if not any(j != i and (g.nodes[j].op_type in _MIXING or j in site_nodes) for j in inside):
            continue  # x + f(x) with f only reshaping or scaling: rotary embeddings, not a block
        # The skip path: the operand that is src itself, or src through value-preserving ops only
        # ('identity'), or through reshapes/transposes ('layout': the exporter moved the stream's
        # transpose onto both paths, so src has another layout than the output); else 'projection'.
        paths = {t: {g.nodes[j].op_type for j in g.between(src, t)} for t in data}
        shortcut, skip = "projection", min(data, key=lambda t: len(g.between(src, t)))
        for kind, ops in (("identity", _VALUE_PRESERVING), ("layout", _LAYOUT)):
            hit = [t for t in data if paths[t] <= ops]
            if hit:
                shortcut, skip = kind, hit[0]
                break
        params = {"shortcut": shortcut, "skip": skip, "branches": [t for t in data if t != skip]}
        if fused:
            params["fused"] = g.op(i)
            params["normalized_output"] = out == node.output[0]  # LayerNorm(sum): the sum is not exported
        found.append(_Found("residual", src, out, i, params))
    return found


@dataclass
class _Core:
    """Where attention weights are made and applied: a Softmax between two products, or a fused node."""

    anchor: int
    qkv: list[str]  # tensors to trace back to their projections
    source: str | None  # the input, when the node projects it itself
    out: str  # weights applied to V, heads not merged yet
    form: str
    score_nodes: set[int] = field(default_factory=set)  # Q·Kᵀ to Softmax: scale, mask


def _attention_cores(g: _Graph) -> list[_Core]:
    cores = []
    for i, node in enumerate(g.nodes):
        if not node.output or not node.output[0]:
            continue
        if node.domain == "com.microsoft" and node.op_type in _FUSED_ON_INPUT and node.input and node.input[0]:
            cores.append(_Core(i, [], node.input[0], node.output[0], f"com.microsoft.{node.op_type}"))
        elif (node.domain == "com.microsoft" and node.op_type in _FUSED_ON_QKV) or g.op(i) == "Attention":
            cores.append(_Core(i, [n for n in node.input[:3] if n], None, node.output[0], g.op(i)))
        elif g.op(i) == "Softmax":
            scores, values = g.scores_product(i), g.values_product(i)
            if scores is None or values is None:
                continue
            q, k = g.data_inputs(scores)
            v = g.data_inputs(values)[1]
            cores.append(_Core(i, [q, k, v], None, g.nodes[values].output[0], "decomposed",
                               g.between(g.nodes[scores].output[0], node.output[0])))
    return cores


def _attention_blocks(g: _Graph, cores: list[_Core]) -> list[_Found]:
    found: dict[tuple[str, str], _Found] = {}
    for core in cores:
        anchor, qkv, source, core_out, form = core.anchor, core.qkv, core.source, core.out, core.form
        params: dict = {"form": form}
        if source is None:
            sources = [g.projection_source(t) for t in qkv]
            if sources[0] is None:
                if form == "decomposed":
                    continue  # Q is no projection of anything: not a self-attention layer
                source = qkv[0]  # a fused node fed without visible projections
            else:
                source = sources[0]
                memory = sorted({s for s in sources[1:] if s and s != source})
                if memory:
                    params["cross_attention_memory"] = memory
        proj = g.out_projection(core_out)
        params["out_projection"] = proj is not None
        out, key = proj if proj is not None else (core_out, anchor)
        blk = found.get((source, out))
        if blk is None:
            found[(source, out)] = _Found("attention", source, out, key, params | {"cores": 1})
        else:  # one softmax per head, merged by Concat before the output projection
            blk.params["cores"] += 1
    return list(found.values())


def _mlp_blocks(g: _Graph, sites: list[Site]) -> list[_Found]:
    acts = {s.input: s for s in sites if s.elementwise}
    site_inputs = {s.input for s in sites}
    found: dict[tuple[str, str], _Found] = {}
    for i in sorted(range(len(g.nodes)), key=g.order.__getitem__):
        if not g.is_projection(i):
            continue
        x = g.data_inputs(i)[0]
        h, _ = g.through_bias(g.nodes[i].output[0], i)
        site, fused = acts.get(h), g.single_user(h)
        if site is not None:
            t, act, act_id = site.output, site.kind, site.id
        elif fused is not None and g.nodes[fused].domain == "com.microsoft" and g.data_inputs(fused) == [h]:
            act = _FUSED_ACTIVATIONS.get(g.nodes[fused].op_type)  # bias + GELU in one node
            if act is None:
                continue
            t, act_id = g.nodes[fused].output[0], g.view.node_label(fused)
        else:
            continue
        gated = False
        c = g.single_user(t)
        while c is not None and g.op(c) in ("Dropout", "Identity", "Cast"):
            t = g.nodes[c].output[0]
            c = g.single_user(t)
        if c is not None and g.op(c) == "Mul" and len(g.data_inputs(c)) == 2:
            other = next(u for u in g.data_inputs(c) if u != t)
            if g.projection_source(other) != x:
                continue
            t, gated = g.nodes[c].output[0], True
            c = g.single_user(t)
        if c is None or not g.is_projection(c) or g.data_inputs(c) != [t]:
            continue
        out, key = g.through_bias(g.nodes[c].output[0], c)
        if out in site_inputs:
            continue  # dense → act → dense → act: layers of an MLP classifier, not a feed-forward block
        if (x, out) not in found:
            found[(x, out)] = _Found("mlp", x, out, key, {"activation": act, "activation_site": act_id, "gated": gated})
    return list(found.values())


def _stream_source(g: _Graph, tensor: str, outputs: set[str], adds: set[int]) -> str | None:
    """The residual output that `tensor` is computed from through unweighted ops (ReLU, LayerNorm), if any."""
    t, used = tensor, 0
    while t not in outputs:
        p = g.view.producer.get(t)
        if p is None:
            return None
        data = g.parents(t)
        if t in g.parent:  # LayerNorm(sum) inside a fused SkipLayerNormalization
            src, region = data[0], {p}
        elif len(data) == 1:
            src, region = data[0], {p}
        else:  # a decomposed norm: Sub(x, mean(x)), Div(·, sqrt(var)) ...
            src = g.common_source(data, limit=4 * _MAX_CONNECTOR) if data else None
            region = g.between(src, t) if src is not None else set()
        if src is None or not region or region & adds or any(g.nodes[j].op_type in _MIXING for j in region):
            return None
        used += len(region)
        if used > _MAX_CONNECTOR:
            return None
        t = src
    return t


def _base_id(view: GraphView, key: int, output: str) -> str:
    name = view.nodes[key].name
    return name or f"{view.nodes[key].op_type}:{output}"


def _unique_ids(blocks: list[Block]) -> None:
    counts: dict[str, int] = {}
    for b in blocks:
        n = counts.get(b.id, 0)
        counts[b.id] = n + 1
        if n:
            b.id = f"{b.id}~{n + 1}"
    seen: set[str] = set()
    for b in blocks:
        while b.id in seen:
            b.id += "~"
        seen.add(b.id)


def discover_blocks(
    model: onnx.ModelProto, kinds: tuple[str, ...] | list[str] = KINDS, infer_shapes: bool = True,
    sites: list[Site] | None = None,
) -> list[Block]:
    """All residual, attention and mlp blocks of a model, in forward order of their output.

    kinds: which of KINDS to report. infer_shapes=False when the model went through `load_model`
    (shapes already inferred). sites: the model's `discover_sites` result, when the caller has it
    (mlp blocks are recognised by their activation site). Blocks whose input or output has no
    inferred rank are 'skipped', as sites are. params, per kind:
    residual: shortcut ('identity' | 'layout' | 'projection'), skip and branches (the Add's
    operands), after (id of the residual block whose output feeds this one's input, directly or
    through unweighted ops: the link `residual_stages` follows), nested_in, contains (ids of the
    blocks inside), and fused / normalized_output for onnxruntime's SkipLayerNormalization.
    attention: form ('decomposed' or the fused op), out_projection (found or not), cores (softmaxes
    merged into the block: one per head when heads are computed apart), cross_attention_memory.
    mlp: activation (site kind), activation_site (its id), gated.
    """
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown block kind(s) {unknown}; known: {', '.join(KINDS)}")
    if infer_shapes:
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:
            pass  # blocks without shapes are reported as skipped, with the reason
    view = GraphView(model.graph, opset=default_opset(model))
    g = _Graph(view)
    if sites is None:
        sites = discover_sites(model, infer_shapes=False)
    site_nodes = {i for s in sites for i in s.node_indices}

    cores = _attention_cores(g)
    found: list[_Found] = []
    if "residual" in kinds:
        found.extend(_residual_blocks(g, site_nodes, {j for c in cores for j in c.score_nodes}))
    if "attention" in kinds:
        found.extend(_attention_blocks(g, cores))
    if "mlp" in kinds:
        found.extend(_mlp_blocks(g, sites))

    entries = []
    for f in found:
        x, out = (f.input, f.output) if f.kind == "residual" else g.extend(f.input, f.output)
        inside = g.between(x, out)
        order = sorted(inside, key=g.order.__getitem__)
        blk = Block(
            index=-1, id=_base_id(view, f.key, out), kind=f.kind, input=x, output=out,
            nodes=[view.node_label(i) for i in order], op_types=[g.op(i) for i in order], params=dict(f.params),
            input_shape=view.shape(x), output_shape=view.shape(out), node_indices=order,
        )
        if blk.input_shape is None or blk.output_shape is None:
            blk.status, blk.reason = "skipped", "unknown rank (shape inference could not type this tensor)"
        entries.append(((g.tensor_order(out), KINDS.index(f.kind)), blk))
    entries.sort(key=lambda e: e[0])
    blocks = [b for _, b in entries]
    for k, b in enumerate(blocks):
        b.index = k
    _unique_ids(blocks)
    _link(g, blocks)
    return blocks


def _link(g: _Graph, blocks: list[Block]) -> None:
    """Fill the cross-references of residual blocks: after, nested_in, contains."""
    res = [b for b in blocks if b.kind == "residual"]
    sets = {b.index: set(b.node_indices) for b in blocks}
    adds = {b.node_indices[-1] for b in res if b.node_indices}
    for b in res:
        inner = [o for o in blocks if o is not b and sets[o.index] and sets[o.index] <= sets[b.index]]
        b.params["contains"] = [o.id for o in inner]
        outer = [o for o in res if o is not b and sets[b.index] < sets[o.index]]
        b.params["nested_in"] = min(outer, key=lambda o: len(sets[o.index])).id if outer else None
    top = {b.output: b for b in res if b.params["nested_in"] is None}
    for b in res:
        src = _stream_source(g, b.input, set(top), adds - {b.node_indices[-1]})
        b.params["after"] = top[src].id if src is not None and top[src] is not b else None


def _dims_compatible(a: list | None, b: list | None) -> bool:
    """Same rank and equal wherever both dims are known integers (symbolic dims match anything)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(not (isinstance(x, int) and isinstance(y, int)) or x == y for x, y in zip(a, b, strict=True))


def residual_stages(blocks: list[Block], min_blocks: int = 1) -> list[list[Block]]:
    """Maximal runs of chained residual blocks of one shape: the h⁰ … h^L tracks of docs/metrics.md.

    Rule, over the ok residual blocks that are not nested in another one, in forward order: block B
    extends the run ending in block P when B's `after` is P (B's input is P's output, or is computed
    from it through unweighted ops only: the ReLU of a post-activation ResNet, the LayerNorm of a
    post-norm transformer, at most 24 nodes) and B's output shape equals P's. Otherwise B starts a
    new run if its input and output shapes are equal and its shortcut is not 'layout' (a
    downsampling block, or one whose input is the stream before a transpose, starts none: h⁰ and
    h^L must be comparable). Shapes are equal when the ranks are and every pair of
    integer dims is (symbolic dims match anything). Runs shorter than `min_blocks` are dropped;
    with one block, the line-shape score is 1 by construction. Tracks: `stage_tracks`.
    """
    runs: list[list[Block]] = []
    by_id: dict[str, list[Block]] = {}  # id of a run's last block -> the run
    for b in sorted(blocks, key=lambda b: b.index):
        if b.kind != "residual" or not b.ok or b.params.get("nested_in") or b.params.get("normalized_output"):
            continue  # a fused SkipLayerNorm without its sum output gives LayerNorm(h), not h
        run = by_id.pop(b.params.get("after") or "", None)
        if run is not None and _dims_compatible(b.output_shape, run[-1].output_shape):
            run.append(b)
        elif b.params.get("shortcut") != "layout" and _dims_compatible(b.input_shape, b.output_shape):
            run = [b]
            runs.append(run)
        else:
            continue
        by_id[b.id] = run
    return [r for r in runs if len(r) >= min_blocks]


def stage_tracks(stage: list[Block]) -> list[str]:
    """Tensor names h⁰ … h^L of a stage: the first block's input, then every block's output."""
    return [stage[0].input] + [b.output for b in stage] if stage else []
