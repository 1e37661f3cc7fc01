"""The `onnxaff` command. Each subcommand is a thin layer over the Python API."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import click

from onnxaff.errors import ConfigError, Interrupted, OnnxaffError
from onnxaff.text import printable


def _fmt_shape(shape) -> str:
    return "?" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def _table(rows: list[list[str]], header: list[str]) -> str:
    """Aligned columns for the terminal; cells are printable text (a name cannot break a line or send escapes)."""
    rows, header = [[printable(c) for c in r] for r in rows], [printable(h) for h in header]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


class _Commands(click.Group):
    """`onnxaff --help` lists each command's whole first sentence, wrapped, never cut with '...'."""

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, cmd.get_short_help_str(limit=1000)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="onnxaff")
def cli() -> None:
    """Measure how non-linear each non-linearity of an ONNX model is (affinity score and baselines)."""


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--layout", type=click.Choice(["auto", "channels_first", "channels_last"]), default="auto",
              show_default=True, help="Feature axis of rank-4 tensors.")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxDxD",
              help="Dims after the batch axis for an input with symbolic dims (for the probe run, as in analyze).")
@click.option("--data", default="synthetic:gaussian", show_default=True,
              help="Data of the one-example probe run that gives unknown ranks their shape (as analyze's first batch).")
@click.option("--pairs", default=None, metavar="IN:OUT[,IN:OUT...]", help="Also list these tensor pairs (as analyze).")
@click.option("--blocks", default=None, metavar="KINDS",
              help="Also list discovered blocks: residual, attention, mlp or all (as analyze).")
def sites(model: str, fmt: str, layout: str, input_shape, data: str, pairs, blocks) -> None:
    """List the non-linearities (sites) of MODEL in forward order, with the status analyze gives them."""
    from onnxaff.data import parse_input_shapes
    from onnxaff.graph import load_model
    from onnxaff.graph.pairs import parse_block_kinds, parse_pairs
    from onnxaff.graph.rewrite import feature_dim
    from onnxaff.graph.sites import format_params
    from onnxaff.sitelist import list_sites, resolve_by_probe

    loaded = load_model(model)
    listed = list_sites(loaded, layout, parse_pairs(pairs), parse_block_kinds(blocks))
    resolve_by_probe(loaded, listed, layout, data, shapes=parse_input_shapes(input_shape),
                     explicit=data != "synthetic:gaussian" or bool(input_shape))
    found = listed.sites
    if fmt == "json":
        click.echo(json.dumps([s.to_dict() | {"dim": feature_dim(s, "mean")} for s in found], indent=1))
        return
    rows = [
        [s.index, s.id, s.kind, s.status, _fmt_shape(s.input_shape), feature_dim(s, "mean") or "?",
         "+".join(s.op_types), format_params(s.params), s.reason]
        for s in found
    ]
    click.echo(_table(rows, ["#", "id", "kind", "status", "shape", "D", "ops", "params", "note"]))
    ok = sum(s.ok for s in found)
    extra = f", {len(listed.extra)} of them pairs/blocks" if listed.extra else ""
    click.echo("\n" + printable(f"{len(found)} sites in {os.path.basename(model)} ({ok} ok, {len(found) - ok} "
                                 f"skipped{extra})"))
    if listed.stages:
        click.echo(f"{len(listed.stages)} residual stage(s) of "
                   f"{', '.join(str(len(st)) for st in listed.stages)} blocks get trajectory metrics")


def _fmt_score(entry: dict | None, chunks: bool = True, ci: bool = False) -> str:
    """mean±std (chunks); with `ci`, ± is the ci95's half-width instead; without `chunks`, no chunk count."""
    if not entry:
        return "-"
    if entry.get("mean") is None:
        return entry.get("status", "-")
    mark = "*" if entry.get("partial") else ""
    if entry.get("std") is None:  # pooled metrics: one value over all rows
        return f"{entry['mean']:.4f} (pooled)"
    spread = f"±{entry['std']:.4f}"
    if ci:  # the ci95 is symmetric (t or half-sampling, onnxaff.stats)
        lo, hi = entry.get("ci95") or (None, None)
        spread = f"±{(hi - lo) / 2:.4f}" if lo is not None and hi is not None else ""
    if not chunks:
        return f"{entry['mean']:.4f}{spread}{mark}"
    return f"{entry['mean']:.4f}{spread} ({entry['chunks']}){mark}"


def _site_chunks(s: dict) -> str:
    counts = {e.get("chunks") for e in s.get("metrics", {}).values() if e and e.get("std") is not None}
    counts.discard(None)
    return "/".join(str(c) for c in sorted(counts)) or "-"


# One letter per flag in the terminal table (a legend line follows it); the signature keeps the names.
FLAG_CODES = {"few_rows": "F", "partial": "P", "eps_dominated": "E", "rank_deficient": "R", "constant_output": "C"}


def print_summary(sig) -> None:
    """The per-site table and signature statistics a person reads after a run, within 120 columns: scores
    as mean±std with the chunk count in its own column, metrics past the width in further blocks."""
    from onnxaff.dispatch import stage_entry
    from onnxaff.terminal import wrapped

    names = [n for n, info in sig.metrics.items() if not stage_entry(info)]
    track_names = [n for n in sig.metrics if n not in names]
    rows, seen_flags = [], set()
    for s in sig.sites:
        cells = [_fmt_score(s["metrics"].get(n), chunks=False, ci=True) for n in names]
        flags = sorted({f for n in names for f in (s["metrics"].get(n) or {}).get("flags") or []})
        seen_flags.update(flags)
        rows.append([s["index"], printable(s["id"])[:32], s["kind"], s.get("dim") or "-", s["status"], _site_chunks(s),
                     "".join(FLAG_CODES.get(f, f"[{f}]") for f in flags) or "-", *cells])
    click.echo(wrapped(rows, ["#", "site", "kind", "D", "status", "chunks", "flags", *names], fixed=7, repeat=2))
    click.echo("scores: mean±half-width of the 95 % interval over the chunks (the std is in the signature)")
    if seen_flags:
        click.echo("flags: " + ", ".join(f"{FLAG_CODES.get(f, f'[{f}]')} {f}" for f in sorted(seen_flags))
                   + " (docs/statistics.md)")
    click.echo("")
    if sig.stages:
        click.echo(wrapped([[st["index"], printable(st["id"])[:40], st["length"], st.get("dim") or "-", st["status"],
                             *[_fmt_score(st["metrics"].get(n)) for n in track_names]] for st in sig.stages],
                           ["#", "residual stage", "blocks", "D", "status", *[f"{n} mean±std (chunks)"
                                                                               for n in track_names]], fixed=5))
        click.echo("")
    stats_rows = []
    for n, st in sig.summary().items():
        if st.get("sites"):
            near = st.get("near_linear")
            stats_rows.append([n, st["sites"], f"{st['mean']:.4f}", f"{st['median']:.4f}", f"{st['min']:.4f}",
                               f"{st['max']:.4f}", f"{st['std']:.4f}",
                               f"{100 * near['share']:.0f}% ({near['rule']})" if near else "-"])
    if stats_rows:
        click.echo(_table(stats_rows, ["signature", "sites", "mean", "median", "min", "max", "std", "near-linear"]))
    d, rt = sig.data, sig.runtime
    click.echo("\n" + printable(f"{sig.model['name']}: {d['samples']} samples from {d['source']}"))
    click.echo(printable(f"chunks of {sig.options['chunk_size']}, reduce={sig.options['reduce']}, "
                         f"{rt['providers'][0]}, {rt['seconds']:.1f} s ({rt['samples_per_second']} samples/s)"))
    if any(e.get("partial") for s in sig.sites for e in s["metrics"].values()):
        click.echo("* scored on one partial chunk: the data has fewer rows than --chunk-size")
    for w in sig.warnings:
        click.echo(printable(f"warning: {w}"), err=True)


def _analysis_options(f):
    options = [
        click.option("--metrics", default=None,
                     help="Comma-separated metrics, each NAME or NAME:KEY=VALUE:KEY=VALUE (see `onnxaff plugins`) "
                          "[default: the metrics declared default: affinity,affinity_lw]."),
        click.option("--chunk-size", type=int, default=512, show_default=True, help="Rows per scored chunk."),
        click.option("--batch-size", type=int, default=64, show_default=True),
        click.option("--limit", type=int, default=None, help="Use at most N examples."),
        click.option("--reduce", type=click.Choice(["mean", "reference", "positions", "flatten"]), default="mean",
                     show_default=True, help="How a site's tensors become [rows, D] features."),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True),
        click.option("--reduce-in", "reduce_in", type=click.Choice(["graph", "numpy"]), default="graph",
                     show_default=True, help="numpy: fetch full activations and reduce on the host (naive baseline)."),
        click.option("--chunk-workers", type=int, default=None,
                     help="Threads scoring chunks beside the runtime [default: cores − 1, at most 4; 0: inline]."),
        click.option("--layout", type=click.Choice(["auto", "channels_first", "channels_last"]), default="auto",
                     show_default=True, help="Feature axis of rank-4 site tensors (auto: read off the graph)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of synthetic data."),
        click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxDxD",
                     help="Dims after the batch axis for an input with symbolic dims (synthetic data and image "
                          "folders: e.g. x=3x48x320)."),
        click.option("--plugin", "plugin", multiple=True, type=click.Path(dir_okay=False),
                     help="A Python file defining extra metrics."),
        click.option("--preprocess", default="torchvision", show_default=True,
                     type=click.Choice(["torchvision", "inception", "caffe", "raw"]), help="Image preset."),
        click.option("--mean", default=None, help="Per-channel mean after scaling, e.g. 0.5,0.5,0.5 (images)."),
        click.option("--std", default=None, help="Per-channel std, e.g. 0.5,0.5,0.5 (images)."),
        click.option("--resize", default=None, metavar="N|HxW",
                     help="Shorter side, or exact HxW, before the centre crop (images)."),
        click.option("--crop", default=None, metavar="N|HxW",
                     help="Centre crop / letterbox size (images; default: the model's)."),
        click.option("--fit", type=click.Choice(["crop", "letterbox", "pad"]), default=None,
                     help="Images: resize + centre crop [default], or scale to fit inside and pad: letterbox "
                          "(centred, as detectors), pad (top-left, as text recognisers)."),
        click.option("--pad-value", "pad_value", default=None, metavar="V[,V,V]",
                     help="Pixel value (0-255, before scaling) of --fit letterbox/pad borders [default: 0]."),
        click.option("--interpolation", default=None, help="nearest|bilinear|bicubic|lanczos|box|hamming."),
        click.option("--shuffle", is_flag=True, help="A seeded subset spread over classes (images)."),
        click.option("--workers", type=int, default=None, help="Decoding processes [default: min(4, cores)]."),
        click.option("--fast-decode", is_flag=True, help="JPEG draft-mode decoding (faster, not bit-exact)."),
        click.option("--pairs", default=None, metavar="IN:OUT[,IN:OUT...]",
                     help="Also score these tensor pairs as sites (any two tensors of the model)."),
        click.option("--blocks", default=None, metavar="KINDS",
                     help="Also score discovered blocks: residual, attention, mlp or all (comma-separated); "
                          "residual stages get trajectory metrics."),
        click.option("--quiet", is_flag=True, help="No progress bar or summary."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _floats(text: str | None, option: str):
    if text is None:
        return None
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise OnnxaffError(f"{option} {text!r} is not a comma-separated list of numbers") from None


def analysis_options(metrics, chunk_size, batch_size, limit, reduce, device, reduce_in, chunk_workers, layout, seed,
                     input_shape, plugin, preprocess, mean, std, resize, crop, interpolation, fit, pad_value, shuffle,
                     workers, fast_decode, pairs, blocks, quiet) -> dict:
    """Analysis keyword options from the analysis flags (`analyze`, `study`, shards and Ray alike)."""
    from onnxaff.data import parse_input_shapes
    from onnxaff.data.preprocess import parse_size
    from onnxaff.graph.pairs import parse_block_kinds, parse_pairs

    if metrics is not None and not any(m.strip() for m in metrics.split(",")):
        raise OnnxaffError(f"--metrics {metrics!r} names no metric")
    images = {"preprocess": preprocess, "shuffle": shuffle, "draft": fast_decode,
              "workers": min(4, os.cpu_count() or 1) if workers is None else workers}
    for key, value in (("mean", _floats(mean, "--mean")), ("std", _floats(std, "--std")),
                       ("resize", parse_size(resize, "--resize")), ("crop", parse_size(crop, "--crop")),
                       ("interpolation", interpolation), ("fit", fit),
                       ("pad_value", _floats(pad_value, "--pad-value"))):
        if value is not None:
            images[key] = value
    options = dict(
        metrics=None if metrics is None else [m.strip() for m in metrics.split(",") if m.strip()],
        chunk_size=chunk_size,
        batch_size=batch_size, limit=limit, reduce=reduce, device=device, layout=layout, seed=seed,
        input_shapes=parse_input_shapes(input_shape), images=images, plugins=list(plugin), progress=not quiet,
        reduce_in=reduce_in, chunk_workers=chunk_workers, pairs=parse_pairs(pairs), blocks=parse_block_kinds(blocks),
    )
    return options


def _run_analysis(model, data, out, metrics, chunk_size, batch_size, limit, reduce, device, reduce_in, chunk_workers,
                  layout, seed, input_shape, plugin, preprocess, mean, std, resize, crop, interpolation, fit, pad_value,
                  shuffle, workers, fast_decode, pairs, blocks, quiet, shard=None, executor="local", shards=4,
                  ray_address=None, checkpoint=None, checkpoint_every=0, resume=False, nlc_directions=None):
    from onnxaff.analysis import Analysis, parse_shard
    from onnxaff.analysis.checkpoint import prepare as prepare_checkpoint
    from onnxaff.analysis.checkpoint import write_result
    from onnxaff.files import check_writable, refuse_overwrite
    from onnxaff.shards import state_path_for, write_part

    outputs = [("--out", out)]
    if executor != "ray":
        checkpoint = checkpoint or f"{out}.ckpt.npz"
        outputs += [("--checkpoint", checkpoint)] + ([("the shard's state file", state_path_for(out))] if shard else [])
    inputs = _analysis_inputs(model, data, plugin, outputs)
    refuse_overwrite(outputs, inputs)
    check_writable(out)  # before the run: a long analysis must not end on a folder it cannot write
    if executor != "ray":
        check_writable(checkpoint)  # its first save may come only with Ctrl-C, hours in
        prepare_checkpoint(checkpoint)  # a file there that is not a checkpoint is refused, never replaced
    if checkpoint_every < 0:
        raise OnnxaffError(f"--checkpoint-every must be 0 or positive, got {checkpoint_every}")
    options = analysis_options(metrics, chunk_size, batch_size, limit, reduce, device, reduce_in, chunk_workers,
                               layout, seed, input_shape, plugin, preprocess, mean, std, resize, crop, interpolation,
                               fit, pad_value, shuffle, workers, fast_decode, pairs, blocks, quiet)
    if nlc_directions is not None:
        options["nlc_directions"] = nlc_directions
    if executor == "ray":
        from onnxaff.executors import run_ray
        from onnxaff.graph.load import load_model

        if shard is not None or resume or checkpoint is not None or checkpoint_every:
            raise OnnxaffError("--executor ray runs every shard itself and keeps no checkpoint: drop "
                               "--shard/--resume/--checkpoint/--checkpoint-every")
        refuse_overwrite(outputs, _weight_files(load_model(model, infer_shapes=False)))
        sig = run_ray(model, data, shards, {k: v for k, v in options.items() if k != "progress"},
                      address=ray_address, progress=not quiet)
        path = sig.write(out)
    else:
        run = Analysis(model, data, shard=parse_shard(shard), **options)
        refuse_overwrite(outputs, _weight_files(run.loaded))
        if resume:
            if not Path(checkpoint).exists():
                raise OnnxaffError(f"no checkpoint to resume at {checkpoint}")
            run.restore(checkpoint)
        elif Path(checkpoint).exists():
            click.echo(printable(f"warning: {checkpoint} holds an interrupted run; starting over replaces it "
                                 f"(--resume continues it)"), err=True)
        # A part is saved unfinished (merging finishes once); a whole run finishes inside run(), where Ctrl-C
        # during its last scores still saves the state.
        run.run(checkpoint, checkpoint_every, finish=shard is None)
        if shard is not None:  # its state beside OUT (for `onnxaff merge`), then its own signature
            path, sig = write_result(run, checkpoint, lambda: write_part(run, out))
        else:
            path, sig = write_result(run, checkpoint, lambda: _signature_to(run, out))
    if not quiet:
        print_summary(sig)
        click.echo(printable(f"signature written to {path}"))
    return sig


def _signature_to(run, out):
    sig = run.signature()
    return sig.write(out), sig


def _weight_files(loaded) -> list[tuple[str, Path]]:
    return [("an external weight file of the model", loaded.path.parent / loc) for loc in loaded.external_locations]


def _analysis_inputs(model, data, plugins, outputs) -> list[tuple[str, str]]:
    """The files an analysis reads, which none of its outputs may replace (external weights: once loaded)."""
    from onnxaff.data.images import EXTENSIONS

    inputs = [("the model", model), ("the data file", data if os.path.isfile(data) else None)]
    inputs += [("the plugin", p) for p in plugins]
    if os.path.isdir(data):  # an output named like an image inside the data folder would replace that image
        root = os.path.realpath(data)
        inputs += [("an image of the data folder", p) for _, p in outputs
                   if os.path.isfile(p) and Path(p).suffix.lower() in EXTENSIONS
                   and os.path.commonpath([root, os.path.realpath(p)]) == root]
    return inputs


_SCALE_OPTIONS = [
    click.option("--shard", default=None, metavar="I/N",
                 help="Analyse shard I of N (0-based; chunk-aligned slices) and save its state for `onnxaff merge`."),
    click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                 help="ray: run --shards shards as Ray tasks and merge them (pip install 'onnxaff[ray]')."),
    click.option("--shards", type=int, default=4, show_default=True, help="Shards for --executor ray."),
    click.option("--ray-address", default=None, help="An existing Ray cluster (e.g. auto) [default: a local one]."),
    click.option("--checkpoint", default=None, help="Checkpoint file [default: OUT.ckpt.npz]."),
    click.option("--checkpoint-every", type=int, default=0, show_default=True,
                 help="Save the state every N batches (0: only on SIGINT/SIGTERM)."),
    click.option("--resume", is_flag=True, help="Continue from the checkpoint of an interrupted run."),
]


def _scale_options(f):
    for option in reversed(_SCALE_OPTIONS):
        f = option(f)
    return f


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--data", required=True, help="An image folder (flat or one subfolder per class), a .npy/.npz "
              "file, or synthetic:gaussian, synthetic:uniform, synthetic:grid (options after a colon: n=..,seed=..).")
@click.option("--out", default=None, help="Signature JSON path [default: MODEL_NAME.signature.json].")
@_analysis_options
@_scale_options
@click.option("--nlc-directions", "nlc_directions", default=None, metavar="N|all",
              help="Network NLC on wide inputs: rolls per example [1], or all (exact estimator, ~14x slower; "
                   "docs/statistics.md).")
def analyze(model, data, out, **options) -> None:
    """Score every site of MODEL on DATA and write the signature JSON."""
    if out is None:
        stem = os.path.splitext(os.path.basename(model))[0]
        shard = options.get("shard")
        out = f"{stem}.shard-{shard.replace('/', '-of-')}.json" if shard else f"{stem}.signature.json"
    _run_analysis(model, data, out, **options)


@cli.command()
@click.argument("parts", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", required=True, help="Merged signature JSON path.")
@click.option("--quiet", is_flag=True, help="No summary.")
def merge(parts, out, quiet) -> None:
    """Merge the parts of `analyze --shard i/n` (all n of them) into one run's signature."""
    from onnxaff.files import refuse_overwrite
    from onnxaff.shards import merge_parts, part_files

    refuse_overwrite([("--out", out)], [("a part", p) for part in parts for p in part_files(part)])
    sig = merge_parts(list(parts))
    path = sig.write(out)
    if not quiet:
        print_summary(sig)
    click.echo(printable(f"merged {len(parts)} parts into {path}"))


@cli.command()
@click.option("--out", default="onnxaff-demo", show_default=True, help="Folder for the demo's outputs.")
@click.option("--metrics", default=None,
              help="Comma-separated metrics; the first one heads the tables [default: affinity,affinity_lw].")
@click.option("--chunk-size", type=int, default=512, show_default=True, help="Rows per scored chunk.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--models", "only", default="", help="Comma-separated shipped model names [default: all].")
@click.option("--quiet", is_flag=True, help="No progress or tables, only the output folder.")
@click.option("--force", is_flag=True, help="Reanalyse every network, even those already in OUT.")
def demo(out, metrics, chunk_size, device, only, quiet, force) -> None:
    """Analyse every shipped reference network on its shipped data and write a comparison report."""
    from onnxaff.demo import run_demo
    from onnxaff.metrics import default_metrics, registry

    names = default_metrics(registry()) if metrics is None else [m.strip() for m in metrics.split(",") if m.strip()]
    if not names:
        raise OnnxaffError("--metrics names no metric")

    run = run_demo(out, metrics=names, chunk_size=chunk_size, device=device,
                   only=[m.strip() for m in only.split(",") if m.strip()] or None, progress=not quiet,
                   echo=None if quiet else (lambda line: click.echo(printable(line), err=True)), force=force)
    if not quiet:
        def fmt(v, spec=".4f"):
            return "-" if v is None else format(v, spec)

        click.echo(_table([[r["model"], r["framework"], r["sites"], fmt(r["accuracy"]), fmt(r["mean"]), fmt(r["min"]),
                            fmt(r["share_above_0.95"], ".0%")] for r in run.rows],
                          ["model", "framework", "sites", "accuracy", f"{names[0]} mean", "min", ">0.95"]))
    wrote = "report.html and signatures/" if (run.folder / "report.html").exists() else "signatures/"
    click.echo(printable(f"demo outputs in {run.folder.resolve()}: {wrote} ({len(run.signatures)} models)"))


@cli.command()
@click.option("--plugin", "plugin", multiple=True, type=click.Path(dir_okay=False),
              help="Also load metrics from this Python file.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def plugins(plugin, fmt) -> None:
    """List every registered metric with its metadata and origin."""
    from onnxaff.metrics import registry

    found = registry(list(plugin))
    if fmt == "json":
        click.echo(json.dumps({n: {**r.cls.info(), "origin": r.origin, "parameters": r.cls.parameters()}
                               for n, r in sorted(found.items())}, indent=1, default=repr))
        return
    rows = [[n, r.cls.needs, r.cls.info()["direction"], f"[{r.cls.range[0]:.3g}, {r.cls.range[1]:.3g}]",
             r.origin, r.cls.description] for n, r in sorted(found.items())]
    click.echo(_table(rows, ["metric", "needs", "direction", "range", "origin", "description"]))


def _split_labels(args) -> tuple[list[str | None], list[str]]:
    """`LABEL=PATH` or a bare PATH per argument (a path that exists as given is a path, '=' and all)."""
    labels, paths = [], []
    for arg in args:
        label, eq, path = arg.partition("=")
        if eq and not os.path.exists(arg):
            labels.append(label)
            paths.append(path)
        else:
            labels.append(None)
            paths.append(arg)
    return labels, paths


def _read_all(paths, labels=None, exclude_flagged: bool = False):
    from onnxaff.compare import label_signature
    from onnxaff.signature import read_signature
    from onnxaff.stats import drop_flagged

    sigs = [label_signature(read_signature(p), label) for p, label in zip(paths, labels or [None] * len(paths),
                                                                          strict=True)]
    if exclude_flagged:
        dropped, total = drop_flagged(sigs)
        click.echo(f"--exclude-flagged: left out {dropped} flagged of {total} site scores", err=True)
    return sigs


_exclude_flagged = click.option("--exclude-flagged", is_flag=True,
                                help="Leave out scores with flags (few rows, partial chunk, ...) and say how many.")


@cli.command()
@click.argument("signatures", nargs=-1, required=True, metavar="[LABEL=]SIGNATURE...")
@click.option("--out", default="compare.html", show_default=True, help="Report path.")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "csv", "json"]), default=None,
              help="Default: from the --out suffix.")
@click.option("--metric", default="all", show_default=True, help="A metric, or all that every signature has.")
@click.option("--normalized", is_flag=True, help="Length-normalised DTW (÷ sqrt of the longer length).")
@click.option("--clusters", type=int, default=2, show_default=True, help="Clusters to cut the tree into.")
@_exclude_flagged
def compare(signatures, out, fmt, metric, normalized, clusters, exclude_flagged) -> None:
    """DTW distances, clustering and statistics of several signatures, per metric.

    Each SIGNATURE may be given as LABEL=PATH: the label names that run in every table, plot and file
    (without labels, runs of one model are told apart by their data source)."""
    from onnxaff.compare import compare as run_compare
    from onnxaff.compare import comparison_table, shared_metrics
    from onnxaff.files import refuse_overwrite, write_text_atomic
    from onnxaff.report.html import comparison_page
    from onnxaff.signature import write_json_atomic

    labels, signatures = _split_labels(signatures)
    refuse_overwrite([("--out", out)], [("the signature", p) for p in signatures])
    sigs = _read_all(signatures, labels, exclude_flagged)
    shared = shared_metrics(sigs)
    names = shared if metric == "all" else [metric]
    if not names:
        raise OnnxaffError("the signatures share no metric with scores")
    if metric != "all" and metric not in shared:
        raise OnnxaffError(f"--metric {metric!r} is not scored in every signature; they share: "
                           f"{', '.join(shared) or 'none'}")
    comps = [run_compare(sigs, metric=m, normalized=normalized) for m in names]
    fmt = fmt or {".md": "md", ".csv": "csv", ".json": "json"}.get(os.path.splitext(out)[1], "html")
    if fmt == "html":
        path = write_text_atomic(out, comparison_page(sigs, comps, clusters))
    elif fmt == "json":
        path = write_json_atomic(out, {"normalized": normalized, "models": comps[0].names, "metrics": {
            c.metric: {"dtw": c.distances.tolist(), "order": c.order, "clusters": c.clusters(clusters),
                       "neighbours": c.neighbours()} for c in comps}})
    else:
        path = write_text_atomic(out, comparison_table(comps, fmt, sigs))
    comp = comps[0]
    nb = comp.neighbours(1)
    for n in comp.names:
        click.echo(printable(f"{n}: nearest by {comp.metric} {nb[n][0][0]}") + f" (DTW {nb[n][0][1]:.4f})")
    click.echo(printable(f"report written to {path}"))


@cli.command()
@click.argument("signatures", nargs=-1, required=True, metavar="[LABEL=]SIGNATURE...")
@click.option("--accuracy", required=True, type=click.Path(dir_okay=False), help="CSV: model name or sha256, top-1.")
@click.option("--group", "group_file", default=None, type=click.Path(dir_okay=False), help="CSV: model, group.")
@click.option("--metric", default=None, help="[default: the first default metric, affinity]")
@click.option("--out", default="correlate.html", show_default=True, help="Report path: .html, .json, .csv or .md.")
@_exclude_flagged
def correlate(signatures, accuracy, group_file, metric, out, exclude_flagged) -> None:
    """R² and Pearson r of accuracy against each signature statistic and model baseline.

    Each SIGNATURE may be given as LABEL=PATH: the label names that model in the tables, plots and the
    accuracy and group CSVs (which may also key it by model name or sha256)."""
    from onnxaff.metrics import primary_metric

    metric = metric or primary_metric()
    from onnxaff.compare import correlate as run_correlate
    from onnxaff.compare import correlation_table, read_table
    from onnxaff.files import refuse_overwrite, write_text_atomic
    from onnxaff.report.html import correlation_page
    from onnxaff.signature import write_json_atomic

    labels, signatures = _split_labels(signatures)
    refuse_overwrite([("--out", out)], [*(("the signature", p) for p in signatures), ("--accuracy", accuracy),
                                        ("--group", group_file)])
    result = run_correlate(_read_all(signatures, labels, exclude_flagged), read_table(accuracy, "accuracy"),
                           metric=metric,
                           groups=read_table(group_file, "group") if group_file else None)
    if out.endswith(".json"):
        path = write_json_atomic(out, result)
    elif out.endswith((".csv", ".md")):
        path = write_text_atomic(out, correlation_table(result, out.rsplit(".", 1)[1]))
    else:
        path = write_text_atomic(out, correlation_page(result))
    rows = sorted(result["table"]["all"].items(), key=lambda kv: -(kv[1]["r2"] if kv[1]["r2"] == kv[1]["r2"] else -1))
    click.echo(_table([[f, f"{v['r2']:.4f}", f"{v['pearson_r']:.4f}"] for f, v in rows], ["statistic", "R²", "r"]))
    if result["left_out"]:
        click.echo(printable(f"warning: not in every signature, left out: {', '.join(result['left_out'])}"), err=True)
    click.echo(printable(f"report written to {path}"))


@cli.command()
@click.argument("signature", type=click.Path(dir_okay=False))
@click.option("--out", default=None, help="HTML path [default: SIGNATURE with .html].")
@click.option("--metric", default=None, help="[default: the first default metric, affinity]")
def report(signature, out, metric) -> None:
    """One model's report: signature, histogram, per-site table, model and data."""
    from onnxaff.metrics import primary_metric

    metric = metric or primary_metric()
    from onnxaff.files import refuse_overwrite, write_text_atomic
    from onnxaff.report.html import single_page
    from onnxaff.signature import read_signature

    out = out or os.path.splitext(signature)[0] + ".html"
    refuse_overwrite([("--out", out)], [("the signature", signature)])
    sig = read_signature(signature)
    scored = [m for m in sig.metrics if any(v is not None for v in sig.scores(m))]
    if metric not in scored:
        raise OnnxaffError(f"--metric {metric!r}: the signature has no {metric} scores; it has: "
                           f"{', '.join(scored) or 'none'}")
    path = write_text_atomic(out, single_page(sig, metric))
    click.echo(printable(f"report written to {path}"))


def _exit_interrupted() -> None:
    """Exit 130; hard (after flushing) when a metric is stuck in a thread, which Python cannot kill or join."""
    from onnxaff.scoring import busy_threads

    if busy_threads():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(130)


def _register_study() -> None:
    from onnxaff.study_cli import make_command

    cli.add_command(make_command(_analysis_options), name="study")


_register_study()


_FLAGS = {"input_shapes": "--input-shape", "plugins": "--plugin", "images.draft": "--fast-decode"}


def _flag(field: str) -> str:
    """The CLI flag of an AnalysisConfig field (`images.pad_value` -> --pad-value)."""
    if field.startswith("--"):  # parse_size and the like, called by the CLI with the flag itself
        return field
    return _FLAGS.get(field) or "--" + field.rpartition(".")[2].replace("_", "-")


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit status 2, never a traceback."""
    debug = bool(os.environ.get("ONNXAFF_DEBUG"))
    try:
        cli.main(args=argv, prog_name="onnxaff", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("onnxaff: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Interrupted as exc:
        click.echo(f"onnxaff: interrupted: {printable(exc)}", err=True)
        _exit_interrupted()
    except OnnxaffError as exc:
        text = exc.render(_flag(exc.field)) if isinstance(exc, ConfigError) else exc
        click.echo(f"onnxaff: error: {printable(text)}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("onnxaff: interrupted", err=True)
        _exit_interrupted()
    except Exception as exc:  # a bug: still one line, the traceback on request
        if debug:
            traceback.print_exc()
        click.echo(f"onnxaff: internal error: {type(exc).__name__}: {printable(exc)} (set ONNXAFF_DEBUG=1 for the "
                   "traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
