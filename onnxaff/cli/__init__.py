"""The `onnxaff` command: a module per command group, each a thin layer over the Python API.

`config` holds the one mapping from options to the AnalysisConfig fields (and from configuration
fields back to flags); `options` the option groups commands share; `main` the entry point and its error handler.
"""

from onnxaff.cli import analyze, merge, reports, sites, study  # noqa: F401  (each adds its commands to `cli`)
from onnxaff.cli.analyze import print_summary
from onnxaff.cli.app import cli
from onnxaff.cli.main import main

__all__ = ["cli", "main", "print_summary"]
