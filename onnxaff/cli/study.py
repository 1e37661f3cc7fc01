"""`onnxaff study` (the whole chain over many models, resumable) and `onnxaff demo` (the shipped models)."""

from __future__ import annotations

import sys

import click

from onnxaff.cli.app import cli
from onnxaff.cli.config import analysis_kwargs, flag_of, given_fields
from onnxaff.cli.echo import echo_err
from onnxaff.cli.options import analysis_options, configured
from onnxaff.errors import ConfigError, render_options
from onnxaff.foundations.text import printable

# Exit status when the study finished but some models failed (2 is a user error before anything ran).
SOME_FAILED = 3


@cli.command()
@click.argument("models", nargs=-1, required=True)
@click.option("--data", default=None, help="The data every model is analysed on (as for `analyze`) [default: a "
              "manifest's].")
@click.option("--out", required=True, help="Study folder: signatures/, report.html, compare.json.")
@click.option("--accuracy", default=None, type=click.Path(dir_okay=False), help="CSV: label or sha256, accuracy.")
@click.option("--group", "group_file", default=None, type=click.Path(dir_okay=False), help="CSV: label, group.")
@click.option("--force", is_flag=True, help="Redo every model, even those whose signature is up to date.")
@click.option("--clusters", type=int, default=3, show_default=True, help="Clusters to cut the tree into.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="ray: each model's --shards shards run as Ray tasks (pip install 'onnxaff[ray]').")
@click.option("--shards", type=int, default=4, show_default=True, help="Shards per model for --executor ray.")
@click.option("--ray-address", default=None, help="An existing Ray cluster (e.g. auto) [default: a local one].")
@click.option("--checkpoint-every", type=int, default=0, show_default=True,
              help="Save a model's state every N batches (always on SIGINT/SIGTERM); a rerun continues it.")
@click.option("--strict", is_flag=True, help="Refuse to compare signatures whose options that change the numbers "
                                            "differ (per-model data, older signatures); they are still written.")
@click.option("--dry-run", is_flag=True, help="Print every model's cost preview (as analyze --dry-run) and the "
              "study's predicted time and peak memory, then stop: nothing is written.")
@analysis_options
def study(models, data, out, accuracy, group_file, force, clusters, executor, shards, ray_address, checkpoint_every,
          strict, dry_run, **flags) -> None:
    """Analyse MODELS (files, LABEL=FILE, folders, text files listing them, or .toml manifests naming each model
    with its own preprocessing, data, options, accuracy and group) on DATA, then compare them.

    Writes OUT/signatures/<label>.json, OUT/report.html and OUT/compare.json. A rerun skips the models
    whose signature is up to date and continues an interrupted one. Exit status 3 when some model failed.
    A flag given here overrides a manifest's [options]; a model's own table overrides both.
    """
    from onnxaff.analysis.textual import parse_texts
    from onnxaff.reports.console import models_table
    from onnxaff.results.comparison import read_table
    from onnxaff.studies import preview_study, resolve_models, run_study

    quiet = flags["quiet"]
    kwargs = parse_texts(analysis_kwargs(**flags))  # a study reads its options (metrics, files) as values
    given = given_fields(click.get_current_context(), flags)  # the flags a manifest's [options] do not override
    if dry_run:
        from onnxaff.analysis.cost import process_age
        from onnxaff.cli.analyze import print_estimates

        estimates = preview_study(resolve_models(list(models)), data, kwargs, startup=process_age(),
                                  echo=None if quiet else echo_err, given=given)
        print_estimates(estimates)
        if any(isinstance(e, str) for e in estimates.values()):  # as the study itself would: some model failed
            sys.exit(SOME_FAILED)
        return None
    result = run_study(resolve_models(list(models)), data, out, options=kwargs, given=given,
                       accuracy=read_table(accuracy, "accuracy") if accuracy else None,
                       groups=read_table(group_file, "group") if group_file else None, force=force,
                       executor=executor, shards=shards, ray_address=ray_address,
                       checkpoint_every=checkpoint_every, clusters=clusters,
                       echo=None if quiet else echo_err, strict=strict)
    if not quiet and result.rows:
        click.echo(models_table(result.rows, result.metric))
    for label, reason in result.failed.items():
        echo_err(f"failed: {label}: {render_options(reason, flag_of)}")
    failed = f", {len(result.failed)} failed" if result.failed else ""
    click.echo(printable(f"study outputs in {result.folder.resolve()}: report.html, compare.json and signatures/ "
                         f"({len(result.signatures)} models{failed})"))
    if result.failed:
        sys.exit(SOME_FAILED)


@cli.command()
@click.option("--out", default="onnxaff-demo", show_default=True, help="Folder for the demo's outputs.")
@click.option("--metrics", default=None,
              help="Comma-separated metrics; the first one heads the tables [default: the declared defaults].")
@configured("--chunk-size", help="Rows per scored chunk, or Kd: K·D rows at a site of D features (at least 64).")
@configured("--device", type=click.Choice(["auto", "cpu", "cuda"]))
@click.option("--models", "only", default="", help="Comma-separated shipped model names [default: all].")
@click.option("--quiet", is_flag=True, help="No progress or tables, only the output folder.")
@click.option("--force", is_flag=True, help="Reanalyse every network, even those already in OUT.")
def demo(out, metrics, chunk_size, device, only, quiet, force) -> None:
    """Analyse every shipped reference network on its shipped data and write a comparison report."""
    from onnxaff.metrics import default_metrics, registry
    from onnxaff.reports.console import models_table
    from onnxaff.studies import run_demo

    names = default_metrics(registry()) if metrics is None else [m.strip() for m in metrics.split(",") if m.strip()]
    if not names:
        raise ConfigError("metrics", "{option} names no metric")
    run = run_demo(out, metrics=names, chunk_size=chunk_size, device=device,
                   only=[m.strip() for m in only.split(",") if m.strip()] or None, progress=not quiet,
                   echo=None if quiet else echo_err, force=force)
    if not quiet:
        click.echo(models_table(run.rows, names[0], extra=["framework"]))
    wrote = "report.html and signatures/" if (run.folder / "report.html").exists() else "signatures/"
    click.echo(printable(f"demo outputs in {run.folder.resolve()}: {wrote} ({len(run.signatures)} models)"))
