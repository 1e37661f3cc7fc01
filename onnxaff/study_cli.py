"""`onnxaff study`: the whole chain (analyse every model, compare, correlate, report) in one resumable command."""

from __future__ import annotations

import sys

import click

from onnxaff.text import printable

# Exit status when the study finished but some models failed (2 is a user error before anything ran).
SOME_FAILED = 3


def analysis_kwargs(**flags) -> dict:
    """Analysis keyword options from `analyze`'s command-line options (the very conversion `analyze` makes)."""
    from onnxaff.cli import analysis_options

    return analysis_options(**flags)


def print_rows(rows: list[dict], metric: str) -> None:
    from onnxaff.cli import _table

    def fmt(v, spec=".4f"):
        return "-" if v is None else format(v, spec)

    extra = [k for k in (rows[0] if rows else {}) if k not in ("model", "sites", "accuracy", "mean", "min",
                                                                "share_above_0.95")]
    click.echo(_table([[r["model"], *[r[k] for k in extra], r["sites"], fmt(r["accuracy"]), fmt(r["mean"]),
                        fmt(r["min"]), fmt(r["share_above_0.95"], ".0%")] for r in rows],
                      ["model", *extra, "sites", "accuracy", f"{metric} mean", "min", ">0.95"]))


def make_command(analysis_options) -> click.Command:
    """The `study` command, with `analyze`'s analysis options (given by cli.py, which this module cannot import
    at load time: `python -m onnxaff.cli` would import it twice, in a cycle)."""

    @click.command()
    @click.argument("models", nargs=-1, required=True)
    @click.option("--data", required=True, help="The data every model is analysed on (as for `analyze`).")
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
    @analysis_options
    def study(models, data, out, accuracy, group_file, force, clusters, executor, shards, ray_address, checkpoint_every,
              **options) -> None:
        """Analyse MODELS (files, LABEL=FILE, folders, or text files listing them) on DATA, then compare them.

        Writes OUT/signatures/<label>.json, OUT/report.html and OUT/compare.json. A rerun skips the models
        whose signature is up to date and continues an interrupted one. Exit status 3 when some model failed.
        """
        from onnxaff.compare import read_table
        from onnxaff.study import resolve_models, run_study

        quiet = options["quiet"]
        kwargs = analysis_kwargs(**options)
        result = run_study(resolve_models(list(models)), data, out, options=kwargs,
                           accuracy=read_table(accuracy, "accuracy") if accuracy else None,
                           groups=read_table(group_file, "group") if group_file else None, force=force,
                           executor=executor, shards=shards, ray_address=ray_address, checkpoint_every=checkpoint_every,
                           clusters=clusters,
                           echo=None if quiet else (lambda line: click.echo(printable(line), err=True)))
        if not quiet and result.rows:
            print_rows(result.rows, kwargs["metrics"][0])
        for label, reason in result.failed.items():
            click.echo(printable(f"failed: {label}: {reason}"), err=True)
        click.echo(printable(f"study outputs in {result.folder.resolve()}: report.html, compare.json and signatures/ "
                             f"({len(result.signatures)} models"
                             f"{f', {len(result.failed)} failed' if result.failed else ''})"))
        if result.failed:
            sys.exit(SOME_FAILED)

    return study
