"""`onnxaff compare`, `correlate` and `report`: reports over signatures already written."""

from __future__ import annotations

import os

import click

from onnxaff.cli.app import cli
from onnxaff.cli.echo import echo_err
from onnxaff.cli.options import exclude_flagged
from onnxaff.foundations.terminal import table
from onnxaff.foundations.text import printable


def split_labels(args) -> tuple[list[str | None], list[str]]:
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


def read_all(paths, labels=None, exclude_flagged: bool = False):
    from onnxaff.format.signature import drop_flagged, read_signature
    from onnxaff.results.comparison import label_signature

    sigs = [label_signature(read_signature(p), label)
            for p, label in zip(paths, labels or [None] * len(paths), strict=True)]
    if exclude_flagged:
        dropped, total = drop_flagged(sigs)
        click.echo(f"--exclude-flagged: left out {dropped} flagged of {total} site scores", err=True)
    return sigs


@cli.command()
@click.argument("signatures", nargs=-1, required=True, metavar="[LABEL=]SIGNATURE...")
@click.option("--out", default="compare.html", show_default=True, help="Report path.")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "csv", "json"]), default=None,
              help="Default: from the --out suffix.")
@click.option("--metric", default="all", show_default=True, help="A metric, or all that every signature has.")
@click.option("--normalized", is_flag=True, help="Length-normalised DTW (÷ sqrt of the longer length).")
@click.option("--clusters", type=int, default=2, show_default=True, help="Clusters to cut the tree into.")
@exclude_flagged
@click.option("--strict", is_flag=True, help="Refuse signatures whose options that change the numbers differ.")
def compare(signatures, out, fmt, metric, normalized, clusters, exclude_flagged, strict) -> None:
    """DTW distances, clustering and statistics of several signatures, per metric.

    Each SIGNATURE may be given as LABEL=PATH: the label names that run in every table, plot and file
    (without labels, runs of one model are told apart by their data source)."""
    from onnxaff.foundations.files import refuse_overwrite
    from onnxaff.results.comparison import compare as run_compare
    from onnxaff.results.comparison import metrics_to_compare, run_labels

    labels, signatures = split_labels(signatures)
    refuse_overwrite([("--out", out)], [("the signature", p) for p in signatures])
    sigs = read_all(signatures, labels, exclude_flagged)
    from onnxaff.results.differences import differences, differences_line, refuse

    names = metrics_to_compare(sigs, metric)
    diffs = differences(sigs, names)
    if strict:
        refuse(diffs, run_labels(sigs))
    if diffs:
        echo_err("warning: " + differences_line(diffs, run_labels(sigs)).template)
    comps = [run_compare(sigs, metric=m, normalized=normalized) for m in names]
    from onnxaff.reports.write import write_comparison

    path = write_comparison(out, sigs, comps, clusters, diffs, fmt)
    comp = comps[0]
    nb = comp.neighbours(1)
    for n in comp.names:
        click.echo(printable(f"{n}: nearest by {comp.metric} {nb[n][0][0]}") + f" (DTW {nb[n][0][1]:.4f})")
    click.echo(printable(f"report written to {path}"))


@cli.command()
@click.argument("signatures", nargs=-1, required=True, metavar="[LABEL=]SIGNATURE...")
@click.option("--accuracy", required=True, type=click.Path(dir_okay=False), help="CSV: model name or sha256, top-1.")
@click.option("--group", "group_file", default=None, type=click.Path(dir_okay=False), help="CSV: model, group.")
@click.option("--metric", default=None, help="[default: the first default metric they all have scores of, else "
              "the first they share]")
@click.option("--out", default="correlate.html", show_default=True, help="Report path: .html, .json, .csv or .md.")
@exclude_flagged
@click.option("--strict", is_flag=True, help="Refuse signatures whose options that change the numbers differ.")
def correlate(signatures, accuracy, group_file, metric, out, exclude_flagged, strict) -> None:
    """R², Pearson r (with its bootstrap 95 % interval) and its permutation p-value, of accuracy against each
    signature statistic and model baseline.

    Each SIGNATURE may be given as LABEL=PATH: the label names that model in the tables, plots and the
    accuracy and group CSVs (which may also key it by model name or sha256)."""
    from onnxaff.foundations.files import refuse_overwrite
    from onnxaff.results.comparison import correlate as run_correlate
    from onnxaff.results.comparison import read_table

    labels, signatures = split_labels(signatures)
    refuse_overwrite([("--out", out)], [*(("the signature", p) for p in signatures), ("--accuracy", accuracy),
                                        ("--group", group_file)])
    result = run_correlate(read_all(signatures, labels, exclude_flagged), read_table(accuracy, "accuracy"),
                           metric=metric, groups=read_table(group_file, "group") if group_file else None,
                           strict=strict)
    from onnxaff.reports.write import write_correlation

    path = write_correlation(out, result)
    click.echo(table([[f, f"{v['r2']:.4f}", f"{v['pearson_r']:.4f}", _interval(v.get("r_ci95")),
                       f"{v['p_value']:.4f}" if v["p_value"] == v["p_value"] else "-"] for f, v in result.ranked()],
                     ["statistic", "R²", "r", "r 95 % interval", "p"]))
    click.echo(f"p: {result['p_method']}; {result['interval_method']}")
    from onnxaff.results.differences import line_of

    for line in [*result["warnings"], *filter(None, [line_of(result["differences"])])]:
        echo_err(f"warning: {getattr(line, 'template', line)}")
    if result["left_out"]:
        click.echo(printable(f"warning: not in every signature, left out: {', '.join(result['left_out'])}"), err=True)
    click.echo(printable(f"report written to {path}"))


def _interval(ci) -> str:
    return "-" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


@cli.command()
@click.argument("signature", type=click.Path(dir_okay=False))
@click.option("--out", default=None, help="HTML path [default: SIGNATURE with .html].")
@click.option("--metric", default=None, help="[default: the first default metric it has scores of, else its "
              "first]")
def report(signature, out, metric) -> None:
    """One model's report: signature, histogram, per-site table, model and data."""
    from onnxaff.format.signature import read_signature
    from onnxaff.foundations.files import refuse_overwrite
    from onnxaff.reports.write import write_single
    from onnxaff.results.comparison import default_metric

    out = out or os.path.splitext(signature)[0] + ".html"
    refuse_overwrite([("--out", out)], [("the signature", signature)])
    sig = read_signature(signature)
    path = write_single(out, sig, metric or default_metric([sig]))
    click.echo(printable(f"report written to {path}"))
