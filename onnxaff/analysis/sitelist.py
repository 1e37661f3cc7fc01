"""The sites a run scores, worked out once for `analyze` and `onnxaff sites` alike.

Both commands list the activations, then any `--pairs` and `--blocks` sites, numbered in that order, and
both give sites whose rank static shape inference missed (a dynamic Reshape, ...) their shape from a
probe run: `analyze` on its first batch, `sites` on one example of its `--data` (synthetic by default,
shaped by `--input-shape`). So the two commands agree on every site and its status.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import onnx

from onnxaff import defaults
from onnxaff.errors import Message, OnnxaffError
from onnxaff.graph import augment_model, load_model
from onnxaff.graph.blocks import find_blocks, residual_stages
from onnxaff.graph.load import LoadedModel, from_proto
from onnxaff.graph.pairs import block_sites, pair_sites
from onnxaff.graph.sites import Site, find_sites, place_batch, settle_shape
from onnxaff.runtime.sessions import Runner

PROBE_DATA = "synthetic:gaussian"  # what a probe run feeds where no data is given


@dataclass
class SiteList:
    activations: list[Site]
    extra: list[Site]  # pair and block sites, deduplicated
    stages: list[list]  # residual stages (chains of residual blocks)
    sites: list[Site]  # activations + extra, numbered
    # With explain: the non-linearities left unclaimed or unnamed, with each rule's refusal (graph.explain).
    misses: list | None = None
    notes: list[str] = field(default_factory=list)  # what loading rewrote or let pass (LoadedModel.notes)


def _dedupe(sites: list[Site]) -> list[Site]:
    """A pair named twice, or a block that is also a pair, is one site (the first)."""
    seen, out = set(), []
    for s in sites:
        if (s.input, s.output) not in seen:
            seen.add((s.input, s.output))
            out.append(s)
    return out


def list_sites(loaded: LoadedModel, layout: str = defaults.LAYOUT, pairs=(), blocks=(),
               explain: bool = False, batch_axes: dict | None = None) -> SiteList:
    """Activations, then pairs and blocks, numbered in that order (shapes as static inference gives them).

    explain: also say why the non-linearities no site names were refused (one more discovery pass).
    batch_axes: input name -> the axis it stacks examples on (0 for the others), followed to every site.
    """
    view = loaded.view
    activations = find_sites(view, layout, batch_axes)
    extra = pair_sites(view, [tuple(p) for p in pairs], layout) if pairs else []
    stages: list[list] = []
    if blocks:
        found = find_blocks(view, kinds=list(blocks), sites=activations)
        extra += block_sites(view, found, layout)
        stages = residual_stages(found)
    extra = _dedupe(extra)
    place_batch(view, extra, layout, batch_axes)  # (the activations were placed by find_sites)
    sites = activations + extra
    for k, s in enumerate(sites):
        s.index = k
    misses = None
    if explain:
        from onnxaff.graph.explain import explain_misses

        misses = explain_misses(view, activations)
    return SiteList(activations, extra, stages, sites, misses)


def sites_of(model, layout: str = defaults.LAYOUT, pairs=(), blocks=(), *, data=PROBE_DATA, shapes: dict | None = None,
             feeding: dict | None = None, explain: bool = False, explicit: bool = False) -> SiteList:
    """The sites `analyze` scores (`onnxaff sites`, onnxaff.sites): `model` a path or a ModelProto, its sites
    listed, a rank static inference missed resolved by a probe run on `data` (see resolve_by_probe)."""
    loaded = from_proto(model) if isinstance(model, onnx.ModelProto) else load_model(model)
    listed = list_sites(loaded, layout, pairs, blocks, explain=explain,
                        batch_axes=dict(feeding or {}).get("batch_axes"))
    listed.notes = list(loaded.notes)
    resolve_by_probe(loaded, listed, layout, data, shapes=shapes, feeding=feeding, explicit=explicit)
    return listed


def probe_feed(loaded: LoadedModel, data: str, *, seed: int = defaults.SEED, shapes: dict | None = None,
               images: dict | None = None, feeding: dict | None = None) -> dict:
    """One example of DATA (or the model's fixed batch) to run the model on once; `feeding`: the per-input and
    source options as AnalysisConfig names them (batch_axes, constants, input_ranges, pad, sample_rate, tokenizer,
    max_length, pack)."""
    from onnxaff.data import examples_in, fixed_batch_of, model_inputs, open_source
    from onnxaff.data.registry import find_kind
    from onnxaff.graph.inputs import input_hints

    feeding = {k: v for k, v in dict(feeding or {}).items() if v is not None}
    inputs = model_inputs(loaded.model, feeding.pop("batch_axes", None))
    count = fixed_batch_of(inputs) or 1
    opts = dict(images or {}, workers=0)
    found = find_kind(data) if isinstance(data, str) else None
    synthetic = found is not None and found[1] == ""  # read from no file: as many examples as asked
    source = open_source(data, inputs, limit=None if synthetic else count * 4, seed=seed,
                         shapes=shapes, images=opts, hints=input_hints(loaded.view), **feeding)
    for batch in source.batches(count):
        n = examples_in(batch, inputs)
        if n == count:
            return batch
    what = data if isinstance(data, str) else source.describe()["source"]
    raise OnnxaffError(f"no usable example in {what} for the probe run")


def resolve_unknown_ranks(loaded: LoadedModel, sites: list[Site], feed: dict, layout: str) -> None:
    """Sites whose rank shape inference missed (dynamic Reshape, ...) get it from one real batch."""
    pending = [s for s in sites if s.unknown_rank]
    if not pending:
        return
    probes = [dataclasses.replace(s, status="ok") for s in pending]
    raw, outs = augment_model(loaded.model, probes, raw=True, view=loaded.view)
    names = [n for s in probes for n in (outs[s.index].x, outs[s.index].y)]
    arrays = Runner(loaded, raw, device="cpu").run(names, feed)
    view = loaded.view
    for k, s in enumerate(pending):
        xa, ya = arrays[2 * k], arrays[2 * k + 1]
        s.status, s.reason = "ok", ""
        s.input_shape = ["N", *xa.shape[1:]]
        s.output_shape = ["N", *ya.shape[1:]]
        settle_shape(view, s, layout)
        if s.ok:
            s.params = {**s.params, "shape_from": "a probe batch (static shape inference failed)"}


def resolve_by_probe(loaded: LoadedModel, found: SiteList, layout: str, data, *, seed: int = defaults.SEED,
                     shapes: dict | None = None, images: dict | None = None, explicit: bool = False,
                     feeding: dict | None = None) -> None:
    """Unknown ranks from one probe run. When the data cannot be made (symbolic dims and no --input-shape
    for the default synthetic data), the sites stay skipped and their note says what resolves them."""
    pending = [s for s in found.sites if s.unknown_rank]
    if not pending:
        return
    try:
        feed = probe_feed(loaded, data, seed=seed, shapes=shapes, images=images, feeding=feeding)
        resolve_unknown_ranks(loaded, found.sites, feed, layout)
    except OnnxaffError as exc:
        if explicit:  # the data or shape the user gave does not run: say so
            raise
        for s in pending:
            what = data if isinstance(data, str) else "the data given"
            s.reason = Message(f"{s.reason}; a probe run on {what} could resolve it but failed: {exc.template}")
