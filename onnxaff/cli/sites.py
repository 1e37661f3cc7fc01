"""`onnxaff sites` and `onnxaff plugins`: what a run would score, and with which metrics."""

from __future__ import annotations

import json
import os

import click

from onnxaff.cli.app import cli
from onnxaff.cli.config import flag_of
from onnxaff.cli.options import configured, feed_options
from onnxaff.errors import render_options
from onnxaff.foundations.terminal import table
from onnxaff.foundations.text import printable

FEEDING = ("batch_axes", "constants", "input_ranges", "pad")  # the probe run's per-input feeding (config fields)
SOURCE = ("sample_rate", "tokenizer", "max_length", "pack")  # how audio and text become its example


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@configured("--layout", type=click.Choice(["auto", "channels_first", "channels_last"]),
            help="Feature axis of rank-3+ tensors (as analyze).")
@click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxDxD",
              help="Dims after the batch axis for an input with symbolic dims (for the probe run, as in analyze).")
@click.option("--data", default="synthetic:gaussian", show_default=True,
              help="Data of the one-example probe run that gives unknown ranks their shape (as analyze's first batch).")
@click.option("--pairs", default=None, metavar="IN:OUT[,IN:OUT...]", help="Also list these tensor pairs (as analyze).")
@click.option("--blocks", default=None, metavar="KINDS",
              help="Also list discovered blocks: residual, attention, mlp or all (as analyze).")
@click.option("--explain", is_flag=True,
              help="Also say, for each non-linearity no site names, which rules were tried and why each refused "
                   "(JSON: an object with 'sites' and 'misses').")
@feed_options
def sites(model: str, fmt: str, layout: str, input_shape, data: str, pairs, blocks, explain: bool, **feed) -> None:
    """List the non-linearities (sites) of MODEL in forward order, with the status analyze gives them."""
    from onnxaff.analysis.config import AnalysisConfig
    from onnxaff.analysis.sitelist import PROBE_DATA, sites_of
    from onnxaff.cli.config import feed_kwargs
    from onnxaff.graph.reduction import feature_dim

    source = {k: feed.pop(k) for k in SOURCE}
    # As typed: checked (and parsed) by the analysis' config before the model is read, as analyze's are.
    config = AnalysisConfig(layout=layout, input_shapes=input_shape, pairs=pairs, blocks=blocks,
                            **feed_kwargs(**feed), **source)
    listed = sites_of(model, config.layout, config.pairs, config.blocks, data=data, shapes=config.input_shapes,
                      feeding={k: getattr(config, k) for k in FEEDING + SOURCE}, explain=explain,
                      explicit=data != PROBE_DATA or bool(input_shape) or any(feed.values()))
    for note in listed.notes:
        click.echo(printable(f"note: {note}"), err=True)
    if fmt == "json":
        found = [s.to_dict() | {"dim": feature_dim(s, "mean")} for s in listed.sites]
        if explain:
            found = {"sites": found, "misses": [m.to_dict() for m in listed.misses]}
        click.echo(json.dumps(found, indent=1))
        return
    _print_sites(listed, os.path.basename(model))
    if explain:
        _print_misses(listed.misses)


def _print_sites(listed, model_name: str) -> None:
    from onnxaff.graph.reduction import feature_dim
    from onnxaff.graph.sites import format_params
    from onnxaff.reports.console import fmt_shape

    found = listed.sites
    rows = [[s.index, s.id, s.kind, s.status, fmt_shape(s.input_shape), feature_dim(s, "mean") or "?",
             "+".join(s.op_types), format_params(s.params), render_options(s.reason, flag_of)] for s in found]
    click.echo(table(rows, ["#", "id", "kind", "status", "shape", "D", "ops", "params", "note"]))
    ok = sum(s.ok for s in found)
    extra = f", {len(listed.extra)} of them pairs/blocks" if listed.extra else ""
    click.echo("\n" + printable(f"{len(found)} sites in {model_name} ({ok} ok, {len(found) - ok} skipped{extra})"))
    if listed.stages:
        click.echo(f"{len(listed.stages)} residual stage(s) of "
                   f"{', '.join(str(len(st)) for st in listed.stages)} blocks get trajectory metrics")


def _print_misses(misses) -> None:
    """One row per refusal; of the library's, only the nearest (smallest deviation where it decided)."""
    lines = [m for m in misses if m.affine]
    misses = [m for m in misses if not m.affine]
    if lines:
        rows = [["+".join(m.ops) + " (" + ", ".join(m.nodes) + ")", f"{t.entry} → {t.exit}", t.reason]
                for m in lines for t in m.tried]
        click.echo("\n" + printable(f"islands called affine, so no site: {len(lines)}"))
        click.echo(table(rows, ["island", "region", "why"]))
    if not misses:
        click.echo("\nevery non-affine node belongs to a named site: nothing to explain")
        return
    rows = []
    for m in misses:
        where = f"site {m.site}" if m.site else "+".join(m.ops) + " (" + ", ".join(m.nodes) + ")"
        library = [t for t in m.tried if t.stage == "library"]
        shown = [t for t in m.tried if t.stage != "library"]
        if library:
            shown.append(min(library, key=lambda t: t.gap))
        for t in shown:
            rule = f"nearest of {len(library)}: {t.rule}" if t.stage == "library" and len(library) > 1 else t.rule
            ops = f"{len(t.ops)} op" + "s" * (len(t.ops) > 1)
            rows.append([where, t.stage, rule, f"{t.entry} → {t.exit} ({ops})", t.reason])
            where = ""
    click.echo("\n" + printable(f"non-linearities no site names: {len(misses)}; the rules tried and why each "
                                 "refused (--format json lists every library refusal)"))
    click.echo(table(rows, ["unnamed", "pass", "rule", "region tried", "reason"]))


@cli.command()
@click.option("--plugin", "plugin", multiple=True, type=click.Path(dir_okay=False),
              help="Also load metrics from this Python file.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def plugins(plugin, fmt) -> None:
    """List every registered metric with its metadata and origin."""
    from onnxaff.metrics import registry

    found = registry(list(plugin))
    if fmt == "json":
        click.echo(json.dumps({n: {**r.cls.info(), "origin": r.origin, "parameters": r.cls.parameters(),
                                   "default": r.cls.default, "stage_default": r.cls.stage_default}
                               for n, r in sorted(found.items())}, indent=1, default=repr))
        return
    rows = [[n, r.cls.info()["needs"], r.cls.info()["direction"], f"[{r.cls.range[0]:.3g}, {r.cls.range[1]:.3g}]",
             r.origin, r.cls.description] for n, r in sorted(found.items())]
    click.echo(table(rows, ["metric", "needs", "direction", "range", "origin", "description"]))
