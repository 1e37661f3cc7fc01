"""A study: many models analysed on the same data, then compared (DTW, clustering) and correlated with accuracy.

The unit of work is one model. Its signature is written to `DIR/signatures/<label>.json` with the identity
of what produced it (model file hash, data, options), so a rerun skips a model whose signature is up to
date, continues a model that was interrupted from its checkpoint (`DIR/signatures/<label>.ckpt.npz`),
and only re-renders the report. A model that fails (unreadable file, unsupported operator, data that does
not fit it) is recorded with its one-line reason and the others go on. A manifest (a .toml file) names each model
with its own preprocessing, data, options, accuracy and group. `onnxaff demo` is a study of the shipped models.
"""


from onnxaff.studies.demo import run_demo
from onnxaff.studies.identity import data_identity, options_identity
from onnxaff.studies.manifest import read_manifest
from onnxaff.studies.models import Manifest, StudyModel
from onnxaff.studies.preview import preview_study
from onnxaff.studies.result import Study, StudyResult
from onnxaff.studies.run import CLUSTERS, run_study
from onnxaff.studies.specs import resolve_models

__all__ = ["CLUSTERS", "Manifest", "Study", "StudyModel", "StudyResult", "data_identity", "options_identity",
           "preview_study", "read_manifest", "resolve_models", "run_demo", "run_study"]
