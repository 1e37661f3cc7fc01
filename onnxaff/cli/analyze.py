"""`onnxaff analyze`: one model on one data source, locally (checkpointed, or one shard) or on Ray."""

from __future__ import annotations

import os

import click

from onnxaff.cli.app import cli
from onnxaff.cli.config import RunOptions, flag_of, run_options
from onnxaff.cli.echo import echo_err
from onnxaff.cli.options import analysis_options, configured, scale_options
from onnxaff.errors import OnnxaffError, render_options
from onnxaff.foundations.text import printable


def print_summary(sig) -> None:
    """The per-site table and signature statistics a person reads after a run, within 120 columns: scores
    as mean ± the half-width of their 95 % interval, metrics past the width in further blocks."""
    from onnxaff.reports.console import summary_lines

    click.echo("\n".join(summary_lines(sig)))
    for w in sig.warnings:
        echo_err(f"warning: {render_options(w, flag_of)}")


def _estimate(model: str, data: str, config):
    from onnxaff.analysis.cost import estimate, process_age

    return estimate(model, data, config, startup=process_age())


def print_estimates(estimates: dict) -> None:
    """Cost previews (label -> Estimate, or why a model has none): each one's table and notes, then for several a
    line per model and the totals."""
    from onnxaff.reports.console import estimate_lines, estimates_table

    for label, est in estimates.items():
        if isinstance(est, str):
            echo_err(f"failed: {label}: {render_options(est, flag_of)}")
            continue
        lines = ([printable(f"== {label}")] if label else []) + estimate_lines(est.to_dict())
        click.echo("\n".join(render_options(line, flag_of) for line in lines))
        for note in est.notes:
            echo_err(f"warning: {render_options(note, flag_of)}")
    if len(estimates) > 1:
        click.echo(estimates_table({k: e.to_dict() for k, e in estimates.items() if not isinstance(e, str)}))


def default_out(model: str, shard: tuple[int, int] | None) -> str:
    stem = os.path.splitext(os.path.basename(model))[0]
    return f"{stem}.shard-{shard[0]}-of-{shard[1]}.json" if shard else f"{stem}.signature.json"


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--data", required=True, help="An image folder (flat or one subfolder per class), audio:FOLDER (audio "
              "files cut into windows of the waveform input's length), a .npy/.npz file, synthetic:gaussian, "
              "synthetic:uniform, synthetic:grid (options after a colon: n=..,seed=..), or text:FILE (a line an "
              "example; text:FILE.jsonl[:FIELD], field 'text' by default; --tokenizer).")
@click.option("--out", default=None, help="Signature JSON path [default: MODEL_NAME.signature.json].")
@analysis_options
@scale_options
@configured("--nlc-directions", "nlc_directions", metavar="N|all",
            help="Network NLC on wide inputs: rolls per example, or all (exact estimator, ~14x slower; "
                 "docs/statistics.md).")
@click.option("--dry-run", is_flag=True, help="Print each site's D, rows per chunk, chunks and predicted few_rows "
              "flags, and the run's predicted time and peak memory (from a calibration of a few seconds), then stop: "
              "nothing is written (docs/cost.md).")
def analyze(model, data, out, dry_run, **flags) -> None:
    """Score every site of MODEL on DATA and write the signature JSON."""
    opts = run_options(**flags)
    if dry_run:
        return print_estimates({"": _estimate(model, data, opts.analysis)})
    run_analysis(model, data, out or default_out(model, opts.analysis.shard), opts)


def run_analysis(model: str, data: str, out: str, opts: RunOptions):
    """Check every output before the run (a long analysis must not end on a file it may not write), run, report."""
    from onnxaff.analysis.reads import run_inputs
    from onnxaff.foundations.files import check_writable, refuse_overwrite
    from onnxaff.results.shards import state_path_for

    outputs = [("--out", out)]
    checkpoint = None
    if opts.executor != "ray":
        checkpoint = opts.checkpoint or f"{out}.ckpt.npz"
        outputs += [("--checkpoint", checkpoint)]
        outputs += [("the shard's state file", state_path_for(out))] if opts.analysis.shard else []
    refuse_overwrite(outputs, run_inputs(model, data, opts.analysis, outputs))
    check_writable(out)
    if opts.executor == "ray":
        path, sig = _run_ray(model, data, out, outputs, opts)
    else:
        path, sig = _run_local(model, data, out, outputs, checkpoint, opts)
    if not opts.quiet:
        print_summary(sig)
        click.echo(printable(f"signature written to {path}"))
    return sig


def _run_ray(model, data, out, outputs, opts: RunOptions):
    from onnxaff.analysis.reads import model_weight_files
    from onnxaff.foundations.files import refuse_overwrite
    from onnxaff.results.executors import run_ray

    if opts.analysis.shard is not None or opts.resume or opts.checkpoint is not None or opts.checkpoint_every:
        raise OnnxaffError("--executor ray runs every shard itself and keeps no checkpoint: drop "
                           "--shard/--resume/--checkpoint/--checkpoint-every")
    refuse_overwrite(outputs, model_weight_files(model))
    sig = run_ray(model, data, opts.shards, opts.analysis.replace(progress=False),
                  address=opts.ray_address, progress=not opts.quiet)
    return sig.write(out), sig


def _run_local(model, data, out, outputs, checkpoint: str, opts: RunOptions):
    """Under the checkpoint's lock (open_run takes it), held to the result's last write."""
    from onnxaff.analysis import open_run
    from onnxaff.analysis.checkpoint import write_result
    from onnxaff.analysis.reads import weight_files
    from onnxaff.foundations.files import check_writable, refuse_overwrite
    from onnxaff.results.shards import write_part

    check_writable(checkpoint)  # its first save may come only with Ctrl-C, hours in

    def warn(line: str) -> None:
        echo_err("warning: " + getattr(line, "template", line))  # a Message keeps its options marked

    def note(line: str) -> None:
        if not opts.quiet:
            echo_err(line)

    resume = "always" if opts.resume else "never"
    with open_run(model, data, opts.analysis, checkpoint=checkpoint, resume=resume, echo=note, warn=warn) as run:
        refuse_overwrite(outputs, weight_files(run.plan.loaded))
        for w in run.plan.slow_chunks:  # said before the hours, not after
            warn(w)
        # A part is saved unfinished (merging finishes once); a whole run finishes inside execute(), where Ctrl-C
        # during its last scores still saves the state.
        run.execute(opts.checkpoint_every, finish=opts.analysis.shard is None)
        if opts.analysis.shard is not None:  # its state beside OUT (for `onnxaff merge`), then its own signature
            return write_result(run, lambda: write_part(run, out))
        return write_result(run, lambda: _signature_to(run, out))


def _signature_to(run, out):
    sig = run.signature()
    return sig.write(out), sig
