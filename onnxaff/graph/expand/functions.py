"""Model-local functions inlined, each body node named by its call path (`block.1/act/gelu`).

`export_modules_as_functions` and onnxscript write a model's layers as functions in `model.functions`; a
call is one node no rule sees into. `onnx.inliner.inline_local_functions` computes the same graph but names
body nodes `gelu__4`, losing which call they came from, and site ids are node names: so calls are inlined
here, node and tensor names prefixed with the calling node's name (its op type and position where it has
none). A call whose function (or one it calls) holds a subgraph or imports another version of an opset is
left to onnx's inliner, whose names then carry no path.
"""

from __future__ import annotations

from collections import Counter

import onnx
import onnx.inliner

from onnxaff.graph.names import Namer, graph_names

NAME = "functions"
_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def _key(f) -> tuple[str, str, str]:
    return f.domain, f.name, getattr(f, "overload", "")


class _Inliner:
    """Rewrites node lists, calls replaced by their bodies, recursively; names unique across the model."""

    def __init__(self, model: onnx.ModelProto):
        self.functions = {_key(f): f for f in model.functions}
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.namer = Namer(graph_names(model.graph, subgraphs=True), sep="_")
        self.calls: Counter = Counter()
        self.left: set[str] = set()

    def plain(self, f, seen=()) -> bool:
        """Inlined here: no subgraph and no opset version other than the model's, in it and what it calls."""
        if _key(f) in seen:
            return False  # recursion: onnx forbids it; leave it to the checker's message
        if any(o.domain in self.opsets and self.opsets[o.domain] != o.version for o in f.opset_import):
            return False
        for node in f.node:
            if any(a.type in _GRAPH_ATTRS for a in node.attribute):
                return False
            callee = self.functions.get((node.domain, node.op_type, getattr(node, "overload", "")))
            if callee is not None and not self.plain(callee, (*seen, _key(f))):
                return False
        return True

    def unique(self, name: str) -> str:
        return self.namer.fresh(name)

    def nodes(self, nodes) -> list[onnx.NodeProto]:
        """`nodes` with every call inlined; a body's nodes carry their call's name already, so nested calls
        extend the path."""
        out = []
        for i, node in enumerate(nodes):
            f = self.functions.get((node.domain, node.op_type, getattr(node, "overload", "")))
            if f is None or not self.plain(f):
                if f is not None:
                    self.left.add(f.name)
                for attr in node.attribute:
                    for sub in (attr.g,) if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                        body = self.nodes(sub.node)
                        del sub.node[:]
                        sub.node.extend(body)
                out.append(node)
                continue
            self.calls[f.name] += 1
            out += self.nodes(self.body(f, node, node.name or self.unique(f"{node.op_type}_{i}")))
        return out

    def body(self, f, call: onnx.NodeProto, prefix: str) -> list[onnx.NodeProto]:
        """The function's nodes for this call: its inputs, outputs and attributes bound, other names prefixed."""
        names = {name: (call.input[k] if k < len(call.input) else "") for k, name in enumerate(f.input)}
        names |= {name: call.output[k] for k, name in enumerate(f.output) if k < len(call.output) and call.output[k]}
        given = {a.name: a for a in call.attribute}
        defaults = {a.name: a for a in f.attribute_proto}
        body = []
        for n in f.node:
            node = onnx.NodeProto()
            node.CopyFrom(n)
            for seq in (node.input, node.output):
                for k, name in enumerate(seq):
                    if name and name not in names:
                        names[name] = self.unique(f"{prefix}/{name}")
                    seq[k] = names.get(name, "")
            node.name = self.unique(f"{prefix}/{n.name or n.op_type}")
            attrs = []
            for attr in node.attribute:
                if attr.ref_attr_name:
                    ref = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
                    if ref is None:
                        continue  # an optional attribute the call leaves out
                    bound = onnx.AttributeProto()
                    bound.CopyFrom(ref)
                    bound.name = attr.name
                    attr = bound
                attrs.append(attr)
            del node.attribute[:]
            node.attribute.extend(attrs)
            body.append(node)
        return body


def apply(model: onnx.ModelProto) -> list[str]:
    if not model.functions:
        return []
    inliner = _Inliner(model)
    body = inliner.nodes(model.graph.node)
    if not inliner.calls and not inliner.left:
        return []
    for f in inliner.functions.values():
        for o in f.opset_import:
            if o.domain not in inliner.opsets and inliner.plain(f):
                model.opset_import.append(onnx.helper.make_opsetid(o.domain, o.version))
                inliner.opsets[o.domain] = o.version
    del model.graph.node[:]
    model.graph.node.extend(body)
    notes = []
    if inliner.calls:
        calls = ", ".join(f"{name} ×{n}" for name, n in sorted(inliner.calls.items()))
        notes.append(f"inlined {sum(inliner.calls.values())} calls of model-local functions ({calls})")
    if inliner.left:
        model.CopyFrom(onnx.inliner.inline_local_functions(model))
        notes.append(f"inlined by onnx's inliner, without call paths in site ids: {', '.join(sorted(inliner.left))}")
    used = {(n.domain, n.op_type) for n in _all_nodes(model.graph)}
    keep = [f for f in model.functions if (f.domain, f.name) in used]
    del model.functions[:]
    model.functions.extend(keep)
    return notes


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in (attr.g,) if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                yield from _all_nodes(sub)
