"""`onnxaff merge`: the parts of a sharded run into one signature."""

from __future__ import annotations

import click

from onnxaff.cli.analyze import print_summary
from onnxaff.cli.app import cli
from onnxaff.foundations.text import printable


@cli.command()
@click.argument("parts", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", required=True, help="Merged signature JSON path.")
@click.option("--quiet", is_flag=True, help="No summary.")
def merge(parts, out, quiet) -> None:
    """Merge the parts of `analyze --shard i/n` (all n of them) into one run's signature."""
    from onnxaff.foundations.files import refuse_overwrite
    from onnxaff.results.shards import merge_parts, part_files

    refuse_overwrite([("--out", out)], [("a part", p) for part in parts for p in part_files(part)])
    sig = merge_parts(list(parts))
    path = sig.write(out)
    if not quiet:
        print_summary(sig)
    click.echo(printable(f"merged {len(parts)} parts into {path}"))
