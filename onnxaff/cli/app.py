"""The `onnxaff` command group every command module adds itself to."""

from __future__ import annotations

import click


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
