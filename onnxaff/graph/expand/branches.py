"""An `If` whose condition is fixed at export time, replaced by the branch it always takes.

Exporters leave such Ifs around whole models (silero-vad's sampling-rate switch, a `torch.cond` on a constant
flag): every site would then live in a subgraph. Inlined, the taken branch is ordinary graph and discovery
reads it as any other. The condition must fold to a constant (`GraphView.constant`: Constant nodes,
initializers that are not also graph inputs, arithmetic and comparisons of them). Inlined nodes are named
`<if>/<branch>/<node>`, so a site's id still says where it lived; branch-local tensors are renamed only
where another scope of the model already uses the name.
"""

from __future__ import annotations

import onnx
from onnx import helper

from onnxaff.graph.names import graph_names
from onnxaff.graph.view import GraphView

NAME = "branches"
_ROUNDS = 64  # an inlined branch may hold further constant Ifs: at most this many are inlined


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    out = []
    for a in node.attribute:
        out += [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
    return out


def _rename_inputs(graph: onnx.GraphProto, renames: dict[str, str]) -> None:
    """Outer-scope references of nested subgraphs follow the renamed tensors."""
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        for g in _subgraphs(node):
            _rename_inputs(g, renames)


def _condition(view: GraphView, node: onnx.NodeProto) -> bool | None:
    cond = node.input[0] if node.input else ""
    if not cond or _reads_an_input(view, cond):
        return None
    value = view.constant(cond)
    if value is None or value.size != 1:
        return None
    return bool(value.reshape(-1)[0])


def _reads_an_input(view: GraphView, name: str) -> bool:
    """Whether `name` depends on a graph input (an initializer listed as an input can be fed another value)."""
    inputs, todo, seen = {i.name for i in view.graph.input}, [name], set()
    while todo:
        t = todo.pop()
        if t in inputs:
            return True
        if t in seen or t not in view.producer:
            continue
        seen.add(t)
        todo += [i for i in view.nodes[view.producer[t]].input if i]
    return False


def _inline(graph: onnx.GraphProto, index: int, branch: onnx.GraphProto, label: str, used: set[str]) -> None:
    """Replace node `index` (an If) with `branch`'s nodes, its outputs written into the If's outputs."""
    node = graph.node[index]
    local = {t.name for t in branch.initializer} | {o for n in branch.node for o in n.output if o}
    renames: dict[str, str] = {}
    for k, out in enumerate(branch.output):  # a branch output made here becomes the If's output
        if out.name in local and out.name not in renames and k < len(node.output) and node.output[k]:
            renames[out.name] = node.output[k]
    for name in sorted(local - set(renames)):
        if name in used:
            base, k = f"{label}/{name}", 1
            while f"{base}.{k}" in used:
                k += 1
            renames[name] = f"{base}.{k}"
            used.add(renames[name])
    new_nodes = []
    for inner in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.input[:] = [renames.get(n, n) for n in copy.input]
        copy.output[:] = [renames.get(n, n) for n in copy.output]
        copy.name = f"{label}/{inner.name or inner.op_type}"
        for g in _subgraphs(copy):
            _rename_inputs(g, renames)
        new_nodes.append(copy)
    for k, out in enumerate(branch.output):
        target = node.output[k] if k < len(node.output) else ""
        source = renames.get(out.name, out.name)
        if target and source != target:
            new_nodes.append(helper.make_node("Identity", [source], [target], name=f"{label}/output.{k}"))
    for t in branch.initializer:
        copy = graph.initializer.add()
        copy.CopyFrom(t)
        copy.name = renames.get(t.name, t.name)
    for vi in branch.value_info:
        if vi.name in local:
            copy = graph.value_info.add()
            copy.CopyFrom(vi)
            copy.name = renames.get(vi.name, vi.name)
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes[:index] + new_nodes + nodes[index + 1:])


def apply(model: onnx.ModelProto) -> list[str]:
    """Inline every main-graph If whose condition folds to a constant; a note for each."""
    notes: list[str] = []
    if not any(n.op_type == "If" for n in model.graph.node):
        return notes  # the common case: no index of the graph built for nothing
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    for _ in range(_ROUNDS):
        view = GraphView(model.graph, opset=opset)
        hit = next(((i, c) for i, n in enumerate(view.nodes) if n.op_type == "If" and n.domain in ("", "ai.onnx")
                    and (c := _condition(view, n)) is not None), None)
        if hit is None:
            break
        i, taken = hit
        node = model.graph.node[i]
        attr = "then_branch" if taken else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == attr)
        label = node.name or f"If#{i}"
        where = f"{label}/{'then' if taken else 'else'}"
        _inline(model.graph, i, branch, where, graph_names(model.graph, subgraphs=True))
        notes.append(f"{label}: an If whose condition is always {taken}; its {attr} was inlined into the graph")
    return notes
