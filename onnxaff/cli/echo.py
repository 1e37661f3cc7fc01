"""Lines for people on stderr: progress and warnings, with the options the library names in them as flags."""

from __future__ import annotations

import click

from onnxaff.cli.config import flag_of
from onnxaff.errors import render_options
from onnxaff.foundations.text import printable


def echo_err(line: str) -> None:
    """A progress or warning line on stderr, as printable text; the options the library names in it (a study's
    progress, a plan's warnings) as flags."""
    click.echo(printable(render_options(line, flag_of)), err=True)
