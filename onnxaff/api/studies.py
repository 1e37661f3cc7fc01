"""`onnxaff.study`: many models analysed on the same data, compared and reported, resumable (`onnxaff study`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from onnxaff.api.options import DEFAULT, data_arg, given, is_torch_module, refuse_against_protocol
from onnxaff.data.image_preprocess import ImagePreprocess
from onnxaff.errors import ConfigError, OnnxaffError
from onnxaff.studies.result import Study


def _echo(line) -> None:
    from onnxaff.foundations.text import printable

    print(printable(line), file=sys.stderr)


def study(models, data=None, out=None, *, metrics=DEFAULT.metrics, chunk_size=DEFAULT.chunk_size,
          batch_size=DEFAULT.batch_size, limit=DEFAULT.limit, reduce=DEFAULT.reduce,
          device=DEFAULT.device, preprocess=None, input_shapes=DEFAULT.input_shapes, seed=DEFAULT.seed,
          progress=DEFAULT.progress, intervals=DEFAULT.intervals, accuracy=None, groups=None,
          example_input=None, force: bool = False, clusters: int = 3, strict: bool = False,
          checkpoint_every: int = 0, executor: str = "local", shards: int = 4, ray_address: str | None = None,
          config=None, **options) -> Study:
    """Analyse several models on the same data, then compare them, correlate them with accuracy and report.

    The study keeps ``OUT/signatures/<label>.json`` per model with what made it (model file, data, options, code):
    a second call skips the models whose signature is up to date, continues one that was interrupted from its
    checkpoint, redoes one whose model, data or options changed, and writes ``OUT/report.html`` and
    ``OUT/compare.json`` again. A model that fails is named with its reason and the others go on.

    Parameters
    ----------
    models : list of str or os.PathLike, or dict of str to path or torch.nn.Module
        ONNX files, ``LABEL=FILE`` texts, folders (every ``.onnx`` under them) or text files listing models; or a
        dict label -> file, or label -> torch.nn.Module (exported with `example_input` to
        ``OUT/models/<label>.onnx``). Labels name the signature files and the models in every table.
    data : str or os.PathLike, optional
        The data every model is analysed on, as for `analyze`, but a path or spec (an image folder, ``.npy`` or
        ``.npz``, ``synthetic:...``, ``text:FILE``): a study reads it again for each model and on each rerun.
        None where a manifest (a ``.toml`` among `models`, docs/usage.md) gives each model its data.
    out : str or os.PathLike
        The study's folder (required).
    metrics, chunk_size, batch_size, limit, reduce, device, preprocess, input_shapes, seed, progress, intervals
        As for `analyze`; the first metric heads the tables. `progress` also prints a line per model on stderr.
    accuracy : dict of str to float, pandas.Series, or path, optional
        Each model's accuracy by label (or model file sha256), numbers of any kind, or a two-column CSV: the
        report correlates the signature statistics with it (at least three models).
    groups : dict of str to str, pandas.Series, or path, optional
        A group per model, correlated on its own too.
    example_input : torch.Tensor, optional
        For torch modules among `models`: one batch they take.
    force : bool
        Redo every model, even those whose signature is up to date.
    clusters : int
        Clusters the dendrogram is cut into.
    strict : bool
        Refuse to compare signatures whose options that change the numbers differ (they are still written).
    checkpoint_every : int
        Save a model's state every N batches (always on SIGINT/SIGTERM); a rerun continues it.
    executor : {"local", "ray"}
        ``ray``: each model's `shards` run as Ray tasks (``pip install 'onnxaff[ray]'``), at `ray_address`.
    shards : int
        Shards per model on Ray.
    ray_address : str, optional
        An existing Ray cluster (default: a local one).
    config : AnalysisConfig, optional
        Every analysis option at once; the keywords given replace its fields.
    **options
        The other fields of ``onnxaff.AnalysisConfig``, as for `analyze`.

    Returns
    -------
    Study
        ``signatures`` by label, ``rows`` (each model's statistics), ``failed`` (label -> reason), ``skipped``
        (up to date), ``report`` (the page's path); ``to_pandas()`` the models' table.

    Examples
    --------
    >>> import onnxaff
    >>> from onnxaff_models import shipped_model
    >>> models = {name: shipped_model(name).path for name in ("sk_mlp_relu", "sk_mlp_tanh")}
    >>> done = onnxaff.study(models, str(shipped_model("sk_mlp_relu").data), "study", limit=128, chunk_size=64,
    ...                      metrics=["cka"], progress=False)
    >>> sorted(done.signatures), done.failed, done.report.name
    (['sk_mlp_relu', 'sk_mlp_tanh'], {}, 'report.html')
    >>> onnxaff.study(models, str(shipped_model("sk_mlp_relu").data), "study", limit=128, chunk_size=64,
    ...               metrics=["cka"], progress=False).skipped  # a rerun: both up to date
    ['sk_mlp_relu', 'sk_mlp_tanh']
    """
    import dataclasses

    from onnxaff.api.results import _table
    from onnxaff.studies import resolve_models, run_study

    data = data_arg(data)
    if out is None:
        raise OnnxaffError("study needs out, the folder its signatures, report.html and compare.json go to")
    if data is not None and not isinstance(data, str):
        raise ConfigError("data", f"a study reads its data again for each model and on each rerun: give {{option}} "
                          f"as a path or spec (save arrays with numpy.save first), not a {type(data).__name__}")
    chosen = given(preprocess, metrics=metrics, chunk_size=chunk_size, batch_size=batch_size, limit=limit,
                   reduce=reduce, device=device, input_shapes=input_shapes, seed=seed, progress=progress,
                   intervals=intervals, **options)
    refuse_against_protocol(chosen, config)
    if isinstance(chosen.get("images"), ImagePreprocess):  # the study digests its options as a dict
        chosen["images"] = chosen["images"].options()
    explicit = _explicit(chosen, config)  # what a manifest's [options] do not override
    if config is not None:
        chosen = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)} | chosen
    specs = _model_specs(models, Path(out), example_input)
    return run_study(resolve_models(specs), data, out, options=chosen, given=explicit,
                     accuracy=None if accuracy is None else _table(accuracy, "accuracy"),
                     groups=None if groups is None else _table(groups, "group"), force=force, executor=executor,
                     shards=shards, ray_address=ray_address, checkpoint_every=checkpoint_every, clusters=clusters,
                     echo=_echo if chosen.get("progress", True) else None, strict=strict)


def _explicit(chosen: dict, config) -> set[str]:
    """The fields the caller set (`images.KEY` for image options): the keywords given, and the fields of `config`
    that are not AnalysisConfig's defaults; a manifest's `[options]` fill the others."""
    import dataclasses

    from onnxaff.analysis.config import AnalysisConfig

    if config is not None:
        base = AnalysisConfig()
        chosen = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                  if getattr(config, f.name) != getattr(base, f.name)} | chosen
    return set(chosen) | {f"images.{key}" for key in chosen.get("images") or {}}


def _model_specs(models, out: Path, example_input) -> list[str]:
    """The models as resolve_models takes them: texts (a dict's as LABEL=FILE); torch modules exported first."""
    if isinstance(models, str | os.PathLike):
        models = [models]
    if not isinstance(models, Mapping):
        if any(is_torch_module(m) for m in models):
            raise ConfigError("models", "torch modules in a study need labels: give {option} as a dict "
                              "label -> module")
        return [os.fspath(m) for m in models]
    specs = []
    for label, model in models.items():
        if is_torch_module(model):
            model = _export(label, model, out / "models", example_input)
        specs.append(f"{label}={os.fspath(model)}")
    return specs


def _export(label: str, module, folder: Path, example_input) -> Path:
    """`module` written to FOLDER/<label>.onnx: the study identifies a model by its file (a rerun's export of the
    same module is the same file, so its signature stays up to date)."""
    from onnxaff.graph.export import from_torch
    from onnxaff.studies.models import LABEL

    if example_input is None:
        raise ConfigError("example_input", f"the torch module {label} is exported to ONNX first, which runs it "
                          "once: give {option}, one batch of input")
    if not isinstance(label, str) or not LABEL.match(label):
        raise ConfigError("models", f"{{option}} label {label!r} must be letters, digits and _ . + - (it names "
                          "the model's files)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OnnxaffError(f"cannot create {folder}: {exc.strerror}") from None
    from_torch(module, example_input, folder / f"{label}.onnx")
    return folder / f"{label}.onnx"
