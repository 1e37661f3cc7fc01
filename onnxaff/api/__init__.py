"""The Python API (`onnxaff.analyze`, `sites`, `study`, `compare`, `correlate`, `report`): what a notebook calls.

Each function's keywords are the options of the command of the same name, with their defaults read from
`AnalysisConfig`; the result objects show themselves as tables in a notebook and give `to_pandas()`.
"""

from onnxaff.api.results import compare, correlate, report
from onnxaff.api.run import Sites, analyze, sites
from onnxaff.api.studies import study

__all__ = ["Sites", "analyze", "compare", "correlate", "report", "sites", "study"]
