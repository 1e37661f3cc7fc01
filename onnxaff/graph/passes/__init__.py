"""Site discovery as an ordered list of passes, each in its own module with one interface.

`find(view, taken, layout, misses=None) -> [(forward position, Site), ...]`: the sites a pass finds among the
nodes no earlier pass took (`taken`, the node indices of the sites found so far), each with the forward position
that orders it (the subgraph pass gives a control node's bodies instead, `subsites.Body`, which `find_sites`
discovers as graphs of their own). `misses`, when given, is the one record of refusals: a pass appends (stage,
region, Miss) for each candidate it did not make a site (the stage names the step, the region is a
`patterns.region.Candidate` of this view's nodes, the Miss says why), and finds the same sites whether it records
or not.
`graph.sites.run_passes` runs them in this order, handing each the same `misses`; `find_sites` settles what they
found (shapes, layouts, quantization) and `sites --explain` (graph/explain.py) reads the refusals.
A new form of non-linearity is a new pass module, listed here where it must run.
"""

from __future__ import annotations

from onnxaff.graph.passes.absorbed_relus import AbsorbedRelus
from onnxaff.graph.passes.anchored import AnchoredRules
from onnxaff.graph.passes.fused_attention import FusedAttention
from onnxaff.graph.passes.islands import ElementwiseIslands
from onnxaff.graph.passes.recurrent_gates import WholeRecurrentGates
from onnxaff.graph.passes.single_nodes import SingleNodes
from onnxaff.graph.passes.softmax import DecomposedSoftmax
from onnxaff.graph.passes.stacked_gates import StackedGates
from onnxaff.graph.passes.subgraphs import SubgraphSites


def passes() -> list:
    """The passes in the order they run: a node goes to the first pass that takes it.

    Stacked recurrent gates and ReLUs absorbed by quantization first (the patterns would take their parts), then
    the decomposed forms from the most specific to the most general, then single nodes, then what lives inside
    nodes (subgraphs, recurrent nodes and fused attention left whole), which no other pass can take.
    """
    return [StackedGates(), AbsorbedRelus(), DecomposedSoftmax(), AnchoredRules(), ElementwiseIslands(),
            SingleNodes(), SubgraphSites(), WholeRecurrentGates(), FusedAttention()]
