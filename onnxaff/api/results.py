"""`onnxaff.compare`, `onnxaff.correlate` and `onnxaff.report`: signatures already made, compared and written up."""

from __future__ import annotations

import dataclasses
import numbers
import os
import warnings
from collections.abc import Mapping
from pathlib import Path

from onnxaff.errors import OnnxaffError
from onnxaff.format.signature import Signature
from onnxaff.results.comparison import Comparison, Correlation
from onnxaff.studies.result import Study


def signatures_of(signatures, exclude_flagged: bool = False) -> tuple[list[Signature], list[str | os.PathLike]]:
    """(the signatures, the files they were read from): `signatures` a list of Signatures or paths, a dict label ->
    Signature or path (the label names it in tables and plots), or a Study. A Signature given is copied, never
    changed (labels, `exclude_flagged`)."""
    from onnxaff.format.signature import drop_flagged, read_signature
    from onnxaff.results.comparison import label_signature

    if isinstance(signatures, Study):
        signatures = signatures.signatures
    if isinstance(signatures, Signature | str | os.PathLike):
        raise OnnxaffError("give the signatures as a list (or a dict label -> signature), not one signature")
    items = list(signatures.items()) if isinstance(signatures, Mapping) else [(None, s) for s in signatures]
    sigs, paths = [], []
    for label, s in items:
        if isinstance(s, Signature):
            sig = dataclasses.replace(s, model=dict(s.model))  # its sites are immutable: drop_flagged replaces them
        else:
            sig = read_signature(s)
            paths.append(s)
        sigs.append(label_signature(sig, label))
    if exclude_flagged:
        drop_flagged(sigs)
    return sigs, paths


def _warn(line) -> None:
    if line:
        warnings.warn(str(line), UserWarning, stacklevel=3)


def compare(signatures, *, metric: str | None = None, normalized: bool = False, strict: bool = False,
            exclude_flagged: bool = False) -> Comparison:
    """DTW distances between signatures of one metric, and their hierarchical clustering.

    Parameters
    ----------
    signatures : list of Signature or path, dict of str to Signature or path, or Study
        At least two. A dict's keys label the signatures in tables, plots and files (else: the model names, runs
        of one model told apart by their data source).
    metric : str, optional
        The metric compared. Default: the first metric that declares itself default (affinity) if every signature
        has its scores, else the first metric they all have scores of.
    normalized : bool
        Length-normalised DTW: divided by the square root of the longer signature's length.
    strict : bool
        Refuse signatures whose options that change the numbers differ (otherwise a UserWarning says where).
    exclude_flagged : bool
        Leave out the site scores that carry flags (docs/statistics.md).

    Returns
    -------
    Comparison
        ``distances`` (the DTW matrix, rows and columns in ``names`` order), ``clusters(k)``,
        ``neighbours(k)``, ``differences``; ``to_pandas()`` gives the matrix, ``onnxaff.report`` a page.

    Examples
    --------
    >>> import onnxaff
    >>> from onnxaff_models import shipped_model
    >>> sigs = {name: onnxaff.analyze(shipped_model(name).path, shipped_model(name).data, limit=128,
    ...                               chunk_size=64, metrics=["cka"], progress=False)
    ...         for name in ("torch_cnn_relu", "helper_cnn_relu", "torch_cnn_silu")}
    >>> comparison = onnxaff.compare(sigs, metric="cka")
    >>> comparison.names
    ['torch_cnn_relu', 'helper_cnn_relu', 'torch_cnn_silu']
    >>> comparison.neighbours(1)["torch_cnn_relu"][0][0]  # the same weights, written with onnx.helper
    'helper_cnn_relu'
    """
    from onnxaff.results.comparison import compare as run_compare
    from onnxaff.results.comparison import default_metric, metrics_to_compare
    from onnxaff.results.differences import differences_line

    sigs, _ = signatures_of(signatures, exclude_flagged)
    if len(sigs) >= 2:
        metric = metric or default_metric(sigs)
        metrics_to_compare(sigs, metric)  # one line naming what they have, when some lack it
    comparison = run_compare(sigs, metric=metric, normalized=normalized, strict=strict)
    _warn(differences_line(comparison.differences, comparison.names))
    return comparison


def correlate(signatures, accuracy, *, metric: str | None = None, groups=None, strict: bool = False,
              exclude_flagged: bool = False) -> Correlation:
    """How well each signature statistic (and depth, parameters, GFLOPs) predicts accuracy, over models.

    Parameters
    ----------
    signatures : list of Signature or path, dict of str to Signature or path, or Study
        At least three models.
    accuracy : dict of str to float, pandas.Series, or path
        Each model's accuracy by label (or model name, or model file sha256), numbers of any kind (numpy's
        too); or a two-column CSV of them.
    metric : str, optional
        Whose statistics are correlated. Default: as for `compare`, the first default metric every signature has
        scores of, else the first metric they share.
    groups : dict of str to str, pandas.Series, or path, optional
        A group per model: each group is correlated on its own too.
    strict : bool
        Refuse signatures whose options that change the numbers differ.
    exclude_flagged : bool
        Leave out the site scores that carry flags.

    Returns
    -------
    Correlation
        A dict: ``table[group][statistic]`` holds ``r2``, ``pearson_r``, ``r_ci95`` (bootstrap), ``p_value``
        (permutation test), ``slope``, ``intercept``; ``rows`` the models' values, ``warnings`` what to know
        (fewer than ten models). ``to_pandas()`` gives the table.
    """
    from onnxaff.results.comparison import correlate as run_correlate
    from onnxaff.results.differences import line_of

    sigs, _ = signatures_of(signatures, exclude_flagged)
    result = run_correlate(sigs, _table(accuracy, "accuracy"), metric=metric,
                           groups=None if groups is None else _table(groups, "group"), strict=strict)
    for line in [*result["warnings"], line_of(result["differences"])]:
        _warn(line)
    return result


def _table(value, what: str) -> dict[str, str]:
    """A model -> value table given as a dict (any mapping, or an object with ``items()`` such as a pandas Series),
    or as a two-column CSV file. Numbers of any kind (numpy's, Python's) as their float's full text."""
    if isinstance(value, Mapping) or (hasattr(value, "items") and not isinstance(value, str | os.PathLike)):
        return {str(k): _cell(v) for k, v in value.items()}
    if not isinstance(value, str | os.PathLike):
        raise OnnxaffError(f"{what} must be a dict of model -> {what}, a pandas Series or a two-column CSV file's "
                           f"path, not a {type(value).__name__}")
    from onnxaff.results.comparison import read_table

    return read_table(value, what)


def _cell(value) -> str:
    """A table value as its text: a real number (np.float32, np.float64, float) as repr of its float, an integer
    as its digits, anything else as str."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return repr(float(value))
    return str(value)


def report(result, path: str | os.PathLike, *, metric: str | None = None, clusters: int = 2) -> Path:
    """Write a result's page, the same file the command line writes for it, atomically.

    Parameters
    ----------
    result : Signature or path, Comparison, list or dict of signatures, Correlation or Study
        A Signature (or its file): its model's page (``onnxaff report``). A Comparison: the comparison page of its
        metric; a list (or dict label -> signature) of signatures or their files: the page of every metric they
        share (``onnxaff compare``). A Correlation: ``onnxaff correlate``'s page. A Study: its ``report.html``.
    path : str or os.PathLike
        Where to write. Comparisons and correlations take the format from the suffix: ``.md``, ``.csv``,
        ``.json``, else HTML; a signature's page and a study's are HTML. An existing file is replaced, never a
        signature being read.
    metric : str, optional
        A signature's page: the metric shown first (default: the first default metric it has scores of, else its
        first scored metric). A list of signatures: compare only this metric (default: every metric they share).
    clusters : int
        Clusters the comparison's dendrogram is cut into.

    Returns
    -------
    pathlib.Path
        The file written.

    Examples
    --------
    >>> import onnxaff
    >>> from onnxaff_models import shipped_model
    >>> mlp = shipped_model("sk_mlp_tanh")
    >>> sig = onnxaff.analyze(mlp.path, mlp.data, limit=128, chunk_size=64, progress=False)
    >>> onnxaff.report(sig, "sk_mlp_tanh.html").read_text().startswith("<!DOCTYPE html>")
    True
    """
    from onnxaff.foundations.files import refuse_overwrite, write_text_atomic
    from onnxaff.reports.write import write_comparison, write_correlation, write_single
    from onnxaff.results.comparison import compare as run_compare
    from onnxaff.results.comparison import default_metric, metrics_to_compare
    from onnxaff.results.differences import differences

    if isinstance(result, str | os.PathLike):  # one signature's file
        from onnxaff.format.signature import read_signature

        refuse_overwrite([("the report", path)], [("the signature", result)])
        result = read_signature(result)
    if isinstance(result, Study):
        if result.report is None:
            raise OnnxaffError(f"the study in {result.folder} wrote no report")
        return write_text_atomic(path, Path(result.report).read_text(encoding="utf-8"))
    if isinstance(result, Signature):
        return write_single(path, result, metric or default_metric([result]))
    if isinstance(result, Comparison):
        if not result.signatures:
            raise OnnxaffError("this Comparison holds no signatures to draw (onnxaff.compare's do)")
        return write_comparison(path, result.signatures, [result], clusters, result.differences)
    if isinstance(result, dict) and {"table", "rows", "metric"} <= set(result):
        return write_correlation(path, result)
    sigs, paths = signatures_of(result)
    refuse_overwrite([("the report", path)], [("the signature", p) for p in paths])
    names = metrics_to_compare(sigs, metric or "all")
    comps = [run_compare(sigs, metric=m) for m in names]
    return write_comparison(path, sigs, comps, clusters, differences(sigs, names))
