"""The main job: data through the augmented model, per-site chunks and moments, metrics, signature.

config (AnalysisConfig: the options, validated once) -> plan (Plan: model, sites, stages, metrics, augmented
model, built once) -> run (open_run: the lifecycle; its Feeder fills a RunState batch by batch) -> assemble (the
Signature). A checkpoint saves the RunState and a resumed run restores it; shards and Ray merge their parts'
RunStates.
"""

from __future__ import annotations

import os

import onnx

from onnxaff.analysis.assemble import assemble, stage_results
from onnxaff.analysis.checkpoint import STATE_KIND_CHECKPOINT, STATE_KIND_PART
from onnxaff.analysis.config import DEFAULT_METRICS, AnalysisConfig, parse_shard
from onnxaff.analysis.feeder import Feeder
from onnxaff.analysis.lifecycle import Run, open_run
from onnxaff.analysis.plan import Plan, shard_window
from onnxaff.analysis.runstate import RunState
from onnxaff.format.signature import Signature

__all__ = ["DEFAULT_METRICS", "STATE_KIND_CHECKPOINT", "STATE_KIND_PART", "AnalysisConfig", "Feeder", "Plan", "Run",
           "RunState", "analyze", "assemble", "open_run", "parse_shard", "shard_window", "stage_results"]


def analyze(
    model: str | os.PathLike | onnx.ModelProto,
    data: str | list[str],
    *,
    config: AnalysisConfig | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    **options,
) -> Signature:
    """Run `data` through `model` and return its non-linearity signature.

    `data`: an image folder, a .npy/.npz file, `synthetic:KIND`, `text:FILE` (lines, or `text:FILE.jsonl[:FIELD]`),
    or a list of str (texts); text data need `tokenizer` (a tokenizer.json path or a tokenizers.Tokenizer) and
    take `max_length` (tokens per example; default: the model's sequence length, else 128).

    Options: an AnalysisConfig, or its fields as keywords (metrics, chunk_size, batch_size, limit, reduce,
    device, layout, seed, input_shapes, images, plugins, progress, reduce_in, chunk_workers, shard, pairs,
    blocks, threads, graph_optimization, nlc_directions, intervals, batch_axes, constants, input_ranges, pad,
    tokenizer, max_length, sample_rate), which replace the config's. threads and
    graph_optimization ("all", "extended", "basic", "disable": onnxruntime's levels) change float32
    features at the rounding level only (docs/reproducibility.md). reduce_in="numpy" exposes the full
    activation tensors and reduces them on the host: the naive design, kept as the benchmarks' baseline and
    as a check of the in-graph reduction.

    With `checkpoint`, the state is saved there every `checkpoint_every` batches and on SIGINT/SIGTERM
    (raising Interrupted); `resume=True` continues from it. A file there that is not an onnxaff checkpoint is
    refused, and the file is locked while the run holds it. The file stays until the caller removes it; the CLI
    saves the finished pass there too before it writes the signature, and removes it once that is written
    (onnxaff.analysis.checkpoint.write_result).
    """
    with open_run(model, data, config, checkpoint=checkpoint, resume="always" if resume else "never",
                  **options) as run:
        run.execute(checkpoint_every, finish=True)
        return run.signature()
