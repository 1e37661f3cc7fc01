"""A study: many models analysed on the same data, then compared (DTW, clustering) and correlated with accuracy.

The unit of work is one model. Its signature is written to `DIR/signatures/<label>.json` with the identity
of what produced it (model file hash, data, options), so a rerun skips a model whose signature is up to
date, continues a model that was interrupted from its checkpoint (`DIR/signatures/<label>.ckpt.npz`),
and only re-renders the report. A model that fails (unreadable file, unsupported operator, data that does
not fit it) is recorded with its one-line reason and the others go on. `onnxaff demo` is a study of the
shipped models.
"""


from onnxaff.study.identity import data_identity, options_identity
from onnxaff.study.models import StudyModel, resolve_models
from onnxaff.study.result import Study, StudyResult
from onnxaff.study.run import CLUSTERS, run_study

__all__ = ["CLUSTERS", "Study", "StudyModel", "StudyResult", "data_identity", "options_identity", "resolve_models",
           "run_study"]
