"""The `onnxaff` command. Each subcommand is a thin layer over the Python API."""

from __future__ import annotations

import json
import os
import sys
import traceback

import click

from onnxaff.errors import OnnxaffError


def _fmt_shape(shape) -> str:
    return "?" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="onnxaff")
def cli() -> None:
    """Measure how non-linear each non-linearity of an ONNX model is (affinity score and baselines)."""


@cli.command()
@click.argument("model", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--layout", type=click.Choice(["auto", "channels_first", "channels_last"]), default="auto",
              show_default=True, help="Feature axis of rank-4 tensors.")
def sites(model: str, fmt: str, layout: str) -> None:
    """List the non-linearities (sites) of MODEL in forward order."""
    from onnxaff.graph import discover_sites, load_model
    from onnxaff.graph.rewrite import feature_dim

    loaded = load_model(model)
    found = discover_sites(loaded.model, layout=layout)
    if fmt == "json":
        click.echo(json.dumps([s.to_dict() | {"dim": feature_dim(s, "mean")} for s in found], indent=1))
        return
    rows = [
        [s.index, s.id, s.kind, s.status, _fmt_shape(s.input_shape), feature_dim(s, "mean") or "?",
         "+".join(s.op_types), s.reason]
        for s in found
    ]
    click.echo(_table(rows, ["#", "id", "kind", "status", "shape", "D", "ops", "note"]))
    ok = sum(s.ok for s in found)
    click.echo(f"\n{len(found)} sites in {os.path.basename(model)} ({ok} ok, {len(found) - ok} skipped)")


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
    except OnnxaffError as exc:
        click.echo(f"onnxaff: error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("onnxaff: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug: still one line, the traceback on request
        if debug:
            traceback.print_exc()
        click.echo(f"onnxaff: internal error: {type(exc).__name__}: {exc} (set ONNXAFF_DEBUG=1 for the traceback)",
                   err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
