"""Block discovery: residual, attention and feed-forward (mlp) blocks, read off the graph alone.

A block is, like a site, one input tensor and one output tensor, but around a whole sub-network:
trajectory metrics (docs/metrics.md) follow the residual stream block by block, and block-level scores
compare what a block does as a whole with what its activations do. Discovery is structural only: a
tensor is *data* when it depends on a graph input, *static* when it does not (weights, constants,
and everything computed from them or from Shape; `GraphView.static`), and the three kinds are:

- residual (residual.py): an Add/Sum of two or more data tensors of the output's shape that all derive
  from one tensor S (their nearest common ancestor), where the paths from S hold at least one weighted
  op (Conv, MatMul, ...) or activation. Input S, output the Add's output. A projection shortcut
  (Conv+BN on the skip path) still counts; bias adds (one data operand), broadcast adds (a mask, a
  pooled context), mask adds on attention scores and Adds inside activation patterns do not.
  onnxruntime's fused SkipLayerNormalization counts, with its sum (output 3) as the output.
- attention (attention.py): a Softmax between a MatMul of two data tensors (Q·Kᵀ, then scale or mask)
  and a MatMul with V, where Q, K and V each go back to one projection (MatMul/Gemm with a constant
  weight, fused QKV with Split/Slice/Gather included) of the same tensor X; or one fused node
  (com.microsoft Attention / MultiHeadAttention / GroupQueryAttention, ai.onnx Attention). Input X,
  output the output projection (bias Add included) after the heads are merged again.
- mlp (mlp.py): projection (+bias) → one elementwise activation site (single node or decomposed, as
  `discover_sites` finds it; optionally gated, act(x·W1)·(x·W3)) → projection (+bias), whose output
  feeds no activation: a feed-forward that ends linearly, as in transformers. A stack of dense
  layers with activations between them (an MLP classifier) therefore has no mlp block.

Attention and mlp boundaries are moved across pure layout ops (Reshape, Transpose, ...) that only
the block uses, so that the block's tensors are the module's own (PyTorch's nn.MultiheadAttention
exports its batch_first transposes inside the block). Kinds are found independently and may nest:
a pre-norm transformer layer is two residual blocks, one around the attention and one around the mlp.
Chains of residual blocks make the stages (stages.py); the shared walks are in walk.py.
"""

from onnxaff.graph.blocks.block import KINDS, Block
from onnxaff.graph.blocks.discover import discover_blocks, find_blocks
from onnxaff.graph.blocks.stages import residual_stages, stage_tracks

__all__ = ["KINDS", "Block", "discover_blocks", "find_blocks", "residual_stages", "stage_tracks"]
